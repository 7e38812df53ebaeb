"""Certificates from ``carico certs`` carry real gRPC mTLS on 127.0.0.1.

The client dials 127.0.0.1 but verifies the server under its in-cluster Service name
(``grpc.ssl_target_name_override``), exactly as an agent in the cluster would.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import yaml

from carico.tls import grpc_channel_credentials, grpc_server_credentials, server_ssl_context
from carico_app import certs
from protos.carico.v1 import (
    aggregator_pb2,
    aggregator_pb2_grpc,
    capacity_pb2,
    capacity_pb2_grpc,
)


class _Aggregator(aggregator_pb2_grpc.AggregatorServicer):
    async def Exchange(
        self, request: aggregator_pb2.LocalModel, context: grpc.aio.ServicerContext
    ) -> aggregator_pb2.GlobalModel:
        return aggregator_pb2.GlobalModel(aggregator=request.node)


class _Ingest(capacity_pb2_grpc.CapacityIngestServicer):
    async def Report(
        self,
        request_iterator: AsyncIterator[capacity_pb2.NodeCapacity],
        context: grpc.aio.ServicerContext,
    ) -> capacity_pb2.ReportSummary:
        count = 0
        async for _ in request_iterator:
            count += 1
        return capacity_pb2.ReportSummary(accepted=count)


def _run_certs(*argv: str) -> None:
    parser = argparse.ArgumentParser()
    certs.add_arguments(parser)
    assert certs.run(parser.parse_args(list(argv))) == 0


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    _run_certs("--out", str(tmp_path / "pki"), "--namespace", "carico-system")
    return tmp_path / "pki"


async def _exchange(port: int, creds: grpc.ChannelCredentials, name: str) -> str:
    options = [("grpc.ssl_target_name_override", name)]
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds, options=options) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        reply = await stub.Exchange(aggregator_pb2.LocalModel(node="node-1"), timeout=5)
        return reply.aggregator


async def test_agent_reaches_the_aggregator_by_service_name_with_mtls(pki: Path) -> None:
    server = grpc.aio.server()
    aggregator_pb2_grpc.add_AggregatorServicer_to_server(_Aggregator(), server)
    port = server.add_secure_port(
        "127.0.0.1:0",
        grpc_server_credentials(pki / "aggregator.crt", pki / "aggregator.key", pki / "ca.crt"),
    )
    await server.start()
    try:
        agent = grpc_channel_credentials(pki / "ca.crt", pki / "agent.crt", pki / "agent.key")
        name = "carico-aggregator.carico-system.svc"
        assert await _exchange(port, agent, name) == "node-1"
        # The extender's certificate is a client certificate too.
        extender = grpc_channel_credentials(
            pki / "ca.crt", pki / "extender.crt", pki / "extender.key"
        )
        assert await _exchange(port, extender, "carico-aggregator") == "node-1"
        for creds, target in (
            (agent, "carico-aggregator.elsewhere.svc"),  # name not in the certificate
            (grpc_channel_credentials(pki / "ca.crt"), name),  # no client certificate
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _exchange(port, creds, target)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(None)


async def test_agent_streams_to_the_extender_with_credentials_from_the_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run_certs("--secret", "yaml", "--namespace", "team-a")
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(capsys.readouterr().out)}
    # Materialise each Secret as its volume would appear in a pod.
    mounts: dict[str, Path] = {}
    for component in ("extender", "agent"):
        mount = tmp_path / component
        mount.mkdir()
        for key, value in docs[certs.secret_name(component)]["data"].items():
            (mount / key).write_bytes(base64.b64decode(value))
        mounts[component] = mount
    ext, agent = mounts["extender"], mounts["agent"]
    server = grpc.aio.server()
    capacity_pb2_grpc.add_CapacityIngestServicer_to_server(_Ingest(), server)
    port = server.add_secure_port(
        "127.0.0.1:0",
        grpc_server_credentials(ext / "tls.crt", ext / "tls.key", ext / "ca.crt"),
    )
    await server.start()
    try:
        creds = grpc_channel_credentials(agent / "ca.crt", agent / "tls.crt", agent / "tls.key")
        options = [("grpc.ssl_target_name_override", "carico-extender.team-a.svc")]
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds, options=options) as ch:
            stub = capacity_pb2_grpc.CapacityIngestStub(ch)
            reports = [capacity_pb2.NodeCapacity(node="n1", sequence=i) for i in range(3)]
            summary = await stub.Report(iter(reports), timeout=5)
        assert summary.accepted == 3
    finally:
        await server.stop(None)


async def test_kube_scheduler_reaches_the_extender_https_on_loopback(pki: Path) -> None:
    # The extender's HTTPS endpoint (server_ssl_context, no client certificate) as kube-scheduler
    # sees it: a client trusting the CA and checking the loopback address it dials.
    server_context = server_ssl_context(pki / "extender.crt", pki / "extender.key")
    got: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.readline())
        writer.write(b"ok\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        client = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        for host in ("127.0.0.1", "localhost"):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname=host
            )
            writer.write(b"hello\n")
            assert await reader.readline() == b"ok\n"
            writer.close()
        # The aggregator's certificate does not name loopback: the handshake fails.
        wrong = server_ssl_context(pki / "aggregator.crt", pki / "aggregator.key")
        other = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=wrong)
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection(
                    "127.0.0.1",
                    other.sockets[0].getsockname()[1],
                    ssl=client,
                    server_hostname="127.0.0.1",
                )
        finally:
            other.close()
            await other.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
    assert got == [b"hello\n", b"hello\n"]
