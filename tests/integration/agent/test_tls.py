"""The agent's clients over mTLS against real TLS gRPC servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from pathlib import Path

import grpc

from agent.pipeline import PipelineConfig
from agent.service import AgentService, ServiceConfig
from carico.tls import grpc_server_credentials, make_ca, make_leaf, write_pair
from protos.carico.v1 import aggregator_pb2_grpc, capacity_pb2_grpc

from .conftest import RecordingAggregator, RecordingIngest, ScriptedSource, global_model, wait_for


async def test_exchange_and_stream_over_mtls(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    ca = make_ca(now=now)
    ca_path, _ = write_pair(ca, tmp_path, "ca")
    srv_crt, srv_key = write_pair(
        make_leaf(ca, "server", now=now, hosts=("127.0.0.1",), client=False), tmp_path, "server"
    )
    cli_crt, cli_key = write_pair(make_leaf(ca, "agent", now=now, server=False), tmp_path, "agent")

    aggregator, ingest = RecordingAggregator(global_model()), RecordingIngest()
    server = grpc.aio.server()
    aggregator_pb2_grpc.add_AggregatorServicer_to_server(aggregator, server)
    capacity_pb2_grpc.add_CapacityIngestServicer_to_server(ingest, server)
    port = server.add_secure_port(
        "127.0.0.1:0", grpc_server_credentials(srv_crt, srv_key, client_ca_file=ca_path)
    )
    await server.start()

    def agent(cert: str, key: str) -> AgentService:
        target = f"127.0.0.1:{port}"
        config = ServiceConfig(
            node="tls-node",
            pipeline=PipelineConfig(sample_hz=50.0, batch=5),
            aggregator=target,
            extender=target,
            exchange_interval=0.2,
            rpc_timeout=1.0,
            backoff_max=0.5,
            tls_ca=str(ca_path),
            tls_cert=cert,
            tls_key=key,
        )
        return AgentService(config, ScriptedSource())

    async def run_until(service: AgentService, done: object) -> None:
        task = asyncio.create_task(service.run())
        try:
            await wait_for(done)  # type: ignore[arg-type]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    try:
        good = agent(str(cli_crt), str(cli_key))
        await run_until(good, lambda: len(aggregator.received) >= 1 and len(ingest.received) >= 2)
        assert aggregator.received[0].node == "tls-node"
        # Without a client certificate the server refuses the agent; it keeps sampling.
        refused = agent("", "")
        await run_until(
            refused,
            lambda: (
                refused.reporter is not None
                and refused.exchange.errors >= 2
                and refused.reporter.errors >= 1
            ),
        )
        assert refused.exchange.exchanges == 0 and refused.reports >= 1
    finally:
        await server.stop(None)
