"""With mTLS configured, the real servers refuse every client without a valid certificate.

Three servers (the extender's HTTPS and gRPC CapacityIngest, the aggregator's gRPC) and three
bad clients each: no certificate, a certificate from another CA, and a certificate of the right
CA that has expired. A client with a valid certificate gets through, so a refusal is the
certificate's doing and not a broken setup.
"""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import pytest

from aggregator.grpc_server import ServerTls, start_grpc_server
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from carico.tls import (
    grpc_channel_credentials,
    grpc_server_credentials,
    make_ca,
    make_leaf,
    server_ssl_context,
    write_pair,
)
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc, capacity_pb2, capacity_pb2_grpc
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.grpc_server import start_grpc
from scheduler_ext.http_server import build_app, start_http
from scheduler_ext.service import ExtenderService

BAD_CLIENTS = ("none", "other CA", "expired")


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: tuple[Path, Path]
    clients: dict[str, tuple[Path, Path] | None]  # "valid" and the BAD_CLIENTS


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    now = dt.datetime.now(dt.UTC)
    ca, other = make_ca(now=now), make_ca("other", now=now)
    ca_file, _ = write_pair(ca, tmp_path, "ca")
    server = write_pair(
        make_leaf(ca, "server", now=now, hosts=("127.0.0.1", "localhost"), client=False),
        tmp_path,
        "server",
    )
    valid = write_pair(make_leaf(ca, "client", now=now, server=False), tmp_path, "valid")
    foreign = write_pair(make_leaf(other, "client", now=now, server=False), tmp_path, "foreign")
    # Issued ten days ago for one day: the right CA, but expired nine days ago.
    expired = write_pair(
        make_leaf(ca, "client", now=now - dt.timedelta(days=10), server=False, valid_days=1),
        tmp_path,
        "expired",
    )
    clients = {"valid": valid, "none": None, "other CA": foreign, "expired": expired}
    return Pki(ca_file, server, clients)


def _grpc_credentials(pki: Pki, client: str) -> grpc.ChannelCredentials:
    pair = pki.clients[client]
    if pair is None:
        return grpc_channel_credentials(pki.ca)
    return grpc_channel_credentials(pki.ca, *pair)


async def test_extender_https_refuses_clients_without_a_valid_certificate(pki: Pki) -> None:
    service = ExtenderService(InMemoryCluster())
    http = await start_http(
        build_app(service), "127.0.0.1", 0, server_ssl_context(*pki.server, pki.ca)
    )

    async def status(client: str) -> int:
        context = ssl.create_default_context(cafile=str(pki.ca))
        pair = pki.clients[client]
        if pair is not None:
            context.load_cert_chain(str(pair[0]), str(pair[1]))
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
            session.get(f"https://127.0.0.1:{http.port}/api/v1/nodes") as resp,
        ):
            return resp.status

    try:
        assert await status("valid") == 200
        for client in BAD_CLIENTS:
            with pytest.raises(aiohttp.ClientError):
                await status(client)
    finally:
        await http.close()


@pytest.fixture
async def extender_grpc(pki: Pki) -> AsyncIterator[int]:
    service = ExtenderService(InMemoryCluster())
    server = await start_grpc(service, "127.0.0.1:0", grpc_server_credentials(*pki.server, pki.ca))
    yield server.port
    await server.close(None)


async def test_extender_grpc_refuses_clients_without_a_valid_certificate(
    pki: Pki, extender_grpc: int
) -> None:
    report = capacity_pb2.NodeCapacity(
        node="n1", avail=3.0, k=0.3, capacity=2.0, per_pod_cost=0.1, sequence=1, timestamp=1.7e9
    )

    async def send(client: str) -> capacity_pb2.ReportSummary:
        creds = _grpc_credentials(pki, client)
        async with grpc.aio.secure_channel(f"127.0.0.1:{extender_grpc}", creds) as channel:
            stub = capacity_pb2_grpc.CapacityIngestStub(channel)
            summary: capacity_pb2.ReportSummary = await stub.Report(iter([report]), timeout=10)
            return summary

    assert (await send("valid")).accepted == 1
    for client in BAD_CLIENTS:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await send(client)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, client


@pytest.fixture
async def aggregator_port(pki: Pki) -> AsyncIterator[int]:
    service = AggregatorService(AggregatorConfig(name="agg"), AggregatorMetrics())
    await service.start()
    server, port = await start_grpc_server(
        service, "127.0.0.1:0", tls=ServerTls(pki.server[0], pki.server[1], pki.ca)
    )
    yield port
    await server.stop(None)
    await service.stop()


async def test_aggregator_refuses_clients_without_a_valid_certificate(
    pki: Pki, aggregator_port: int
) -> None:
    async def exchange(client: str) -> aggregator_pb2.GlobalModel:
        creds = _grpc_credentials(pki, client)
        async with grpc.aio.secure_channel(f"127.0.0.1:{aggregator_port}", creds) as channel:
            stub = aggregator_pb2_grpc.AggregatorStub(channel)
            # An empty model is invalid: a valid client gets INVALID_ARGUMENT, from the service.
            reply: aggregator_pb2.GlobalModel = await stub.Exchange(
                aggregator_pb2.LocalModel(), timeout=10
            )
            return reply

    with pytest.raises(grpc.aio.AioRpcError) as served:
        await exchange("valid")
    assert served.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for client in BAD_CLIENTS:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await exchange(client)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, client
