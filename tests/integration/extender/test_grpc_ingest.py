"""CapacityIngest over real gRPC: ordering, duplicates, invalid reports, restarts, mTLS."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import grpc
import pytest

from carico.tls import (
    grpc_channel_credentials,
    grpc_server_credentials,
    make_ca,
    make_leaf,
    write_pair,
)
from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc
from scheduler_ext.grpc_server import start_grpc

from .conftest import Extender, report


async def _send(port: int, reports: list[capacity_pb2.NodeCapacity]) -> capacity_pb2.ReportSummary:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = capacity_pb2_grpc.CapacityIngestStub(channel)
        summary: capacity_pb2.ReportSummary = await stub.Report(iter(reports), timeout=10)
        return summary


async def test_stream_keeps_the_latest_report_in_order(extender: Extender) -> None:
    summary = await _send(
        extender.grpc.port,
        [
            report("n1", 3.0, sequence=1, timestamp=100),
            report("n1", 2.0, sequence=2, timestamp=101),
            report("n1", 9.0, sequence=2, timestamp=101),  # duplicate
            report("n1", 8.0, sequence=1, timestamp=100),  # out of order
            report("n2", 4.0, sequence=5, timestamp=101),
        ],
    )
    assert (summary.accepted, summary.rejected, summary.last_sequence) == (3, 2, 5)
    assert "older than 2" in summary.last_rejection
    table = extender.service.table
    assert table.report("n1").avail == 2.0  # type: ignore[union-attr]
    assert table.report("n2").avail == 4.0  # type: ignore[union-attr]
    _, metrics = await extender.get("/metrics")
    assert 'carico_extender_reports_total{outcome="duplicate"} 1.0' in metrics
    assert 'carico_extender_reports_total{outcome="out_of_order"} 1.0' in metrics


async def test_invalid_reports_are_refused_and_the_stream_goes_on(extender: Extender) -> None:
    bad = [
        report("n1", math.nan, sequence=1),
        report("n1", -1.0, sequence=2),
        report("n1", math.inf, sequence=3),
        report("", 1.0, sequence=4),
        report("n1", 1.0, sequence=5, timestamp=0),
    ]
    summary = await _send(extender.grpc.port, [*bad, report("n1", 2.5, sequence=6)])
    assert (summary.accepted, summary.rejected) == (1, 5)
    assert "timestamp" in summary.last_rejection
    assert extender.service.table.report("n1").avail == 2.5  # type: ignore[union-attr]
    _, metrics = await extender.get("/metrics")
    assert 'carico_extender_reports_total{outcome="invalid"} 5.0' in metrics


async def test_restarted_agent_takes_over_with_a_new_stream(extender: Extender) -> None:
    await _send(extender.grpc.port, [report("n1", 3.0, sequence=500, timestamp=1000)])
    # The agent restarted: its sequence starts again, on a new stream, with a newer clock.
    summary = await _send(extender.grpc.port, [report("n1", 1.5, sequence=1, timestamp=1005)])
    assert summary.accepted == 1
    assert extender.service.table.report("n1").avail == 1.5  # type: ignore[union-attr]
    # A late replay of old data on yet another stream is refused.
    summary = await _send(extender.grpc.port, [report("n1", 7.0, sequence=2, timestamp=999)])
    assert (summary.accepted, summary.rejected) == (0, 1)
    assert extender.service.table.report("n1").avail == 1.5  # type: ignore[union-attr]


async def test_mtls_only_admits_agents_with_a_signed_certificate(
    extender: Extender, tmp_path: Path
) -> None:
    now = dt.datetime.now(dt.UTC)
    ca, rogue_ca = make_ca(now=now), make_ca("rogue", now=now)
    ca_file, _ = write_pair(ca, tmp_path, "ca")
    crt, key = write_pair(
        make_leaf(ca, "extender", now=now, hosts=("127.0.0.1",), client=False), tmp_path, "srv"
    )
    agent_crt, agent_key = write_pair(make_leaf(ca, "agent", now=now, server=False), tmp_path, "a")
    rogue_crt, rogue_key = write_pair(
        make_leaf(rogue_ca, "agent", now=now, server=False), tmp_path, "r"
    )
    server = await start_grpc(
        extender.service, "127.0.0.1:0", grpc_server_credentials(crt, key, ca_file)
    )
    try:

        async def send(creds: grpc.ChannelCredentials, seq: int) -> int:
            async with grpc.aio.secure_channel(f"127.0.0.1:{server.port}", creds) as channel:
                stub = capacity_pb2_grpc.CapacityIngestStub(channel)
                reply = await stub.Report(iter([report("tls", 2.0, sequence=seq)]), timeout=10)
                return int(reply.accepted)

        assert await send(grpc_channel_credentials(ca_file, agent_crt, agent_key), 1) == 1
        with pytest.raises(grpc.aio.AioRpcError):
            await send(grpc_channel_credentials(ca_file, rogue_crt, rogue_key), 2)
        with pytest.raises(grpc.aio.AioRpcError):
            await send(grpc_channel_credentials(ca_file), 3)
        assert extender.service.table.report("tls").sequence == 1  # type: ignore[union-attr]
    finally:
        await server.close(None)


async def test_a_report_that_does_not_parse_is_refused_and_the_stream_goes_on(
    extender: Extender,
) -> None:
    # Found by the fuzz tier: the byte b"\x00" (field number 0) is no NodeCapacity, and gRPC
    # ended the whole stream with UNKNOWN before the servicer saw any report.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{extender.grpc.port}") as channel:
        call = channel.stream_unary(
            "/carico.v1.CapacityIngest/Report",
            request_serializer=None,
            response_deserializer=capacity_pb2.ReportSummary.FromString,
        )
        good = report("n1", 3.0, sequence=1).SerializeToString()
        summary = await call(iter([b"\x00", good]), timeout=10)
    assert (summary.accepted, summary.rejected) == (1, 1)
    assert summary.last_rejection.startswith("not a carico.v1.NodeCapacity")
    assert extender.service.table.report("n1").avail == 3.0  # type: ignore[union-attr]
    _, metrics = await extender.get("/metrics")
    assert 'carico_extender_reports_total{outcome="invalid"} 1.0' in metrics
