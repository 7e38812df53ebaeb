"""TLS material works with real gRPC and HTTPS servers on loopback; the ops endpoint serves."""

import datetime as dt
import ssl
from pathlib import Path

import aiohttp
import grpc
import pytest
from prometheus_client import CollectorRegistry, Counter

from carico.http_ops import start_ops_server
from carico.tls import (
    grpc_channel_credentials,
    grpc_server_credentials,
    make_ca,
    make_leaf,
    write_pair,
)
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc

NOW = dt.datetime.now(dt.UTC)


class _Echo(aggregator_pb2_grpc.AggregatorServicer):
    async def Exchange(
        self, request: aggregator_pb2.LocalModel, context: grpc.aio.ServicerContext
    ) -> aggregator_pb2.GlobalModel:
        return aggregator_pb2.GlobalModel(aggregator=request.node)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca, other_ca = make_ca(now=NOW), make_ca("other", now=NOW)
    paths: dict[str, Path] = {}
    paths["ca"], _ = write_pair(ca, tmp_path, "ca")
    paths["server_crt"], paths["server_key"] = write_pair(
        make_leaf(ca, "server", now=NOW, hosts=("127.0.0.1", "localhost"), client=False),
        tmp_path,
        "server",
    )
    paths["client_crt"], paths["client_key"] = write_pair(
        make_leaf(ca, "agent", now=NOW, server=False), tmp_path, "client"
    )
    paths["rogue_crt"], paths["rogue_key"] = write_pair(
        make_leaf(other_ca, "rogue", now=NOW, server=False), tmp_path, "rogue"
    )
    return paths


async def _call(port: int, creds: grpc.ChannelCredentials) -> str:
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        reply = await stub.Exchange(aggregator_pb2.LocalModel(node="n1"), timeout=5)
        return reply.aggregator


async def test_grpc_mtls_accepts_signed_clients_and_refuses_others(pki: dict[str, Path]) -> None:
    server = grpc.aio.server()
    aggregator_pb2_grpc.add_AggregatorServicer_to_server(_Echo(), server)
    port = server.add_secure_port(
        "127.0.0.1:0", grpc_server_credentials(pki["server_crt"], pki["server_key"], pki["ca"])
    )
    await server.start()
    try:
        good = grpc_channel_credentials(pki["ca"], pki["client_crt"], pki["client_key"])
        assert await _call(port, good) == "n1"
        for creds in (
            grpc_channel_credentials(pki["ca"]),  # no client certificate
            grpc_channel_credentials(pki["ca"], pki["rogue_crt"], pki["rogue_key"]),  # wrong CA
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _call(port, creds)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(None)


def test_missing_files_and_half_client_pairs_are_clear_errors(pki: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="cannot read TLS file"):
        grpc_server_credentials(pki["server_crt"], pki["server_crt"].parent / "nope.key")
    with pytest.raises(ValueError, match="both"):
        grpc_channel_credentials(pki["ca"], pki["client_crt"], None)


async def test_ops_server_serves_metrics_health_and_readiness() -> None:
    registry = CollectorRegistry()
    Counter("carico_test_events", "events", registry=registry).inc(3)
    state: dict[str, str | None] = {"reason": "warming up"}
    ops = await start_ops_server("127.0.0.1", 0, registry, lambda: state["reason"])
    base = f"http://127.0.0.1:{ops.port}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/metrics") as resp:
                assert "carico_test_events_total 3.0" in await resp.text()
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 503 and "warming up" in await resp.text()
            state["reason"] = None
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 200
    finally:
        await ops.close()


def test_https_context_loads_and_requires_client_certs(pki: dict[str, Path]) -> None:
    from carico.tls import server_ssl_context

    context = server_ssl_context(pki["server_crt"], pki["server_key"], pki["ca"])
    assert context.verify_mode == ssl.CERT_REQUIRED


async def test_healthz_follows_the_health_callback() -> None:
    state: dict[str, str | None] = {"problem": "worker 1 is not running"}
    ops = await start_ops_server(
        "127.0.0.1", 0, CollectorRegistry(), healthy=lambda: state["problem"]
    )
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{ops.port}/healthz") as resp:
                assert resp.status == 503 and "worker 1 is not running" in await resp.text()
            state["problem"] = None
            async with http.get(f"http://127.0.0.1:{ops.port}/healthz") as resp:
                assert resp.status == 200
    finally:
        await ops.close()
