"""/api/v1/model over real HTTP, fed over the real CapacityIngest gRPC stream."""

from __future__ import annotations

import grpc

from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc

from .conftest import Extender, report


async def _send(port: int, reports: list[capacity_pb2.NodeCapacity]) -> capacity_pb2.ReportSummary:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = capacity_pb2_grpc.CapacityIngestStub(channel)
        summary: capacity_pb2.ReportSummary = await stub.Report(iter(reports), timeout=10)
        return summary


def _with_model(node: str, w: list[float], **kw: object) -> capacity_pb2.NodeCapacity:
    msg = report(node, 3.0, **kw)  # type: ignore[arg-type]
    msg.health.global_model = True
    msg.global_workload.CopyFrom(
        capacity_pb2.GlobalWorkload(
            has_model=True,
            expected_workload=w,
            feature_names=["cpu", "memory"],
            version=9,
            computed_at=1.7e9,
            age_seconds=0.5,
            contributing_nodes=2,
            aggregator="agg-it",
        )
    )
    return msg


async def test_the_model_endpoint_serves_what_the_agents_stream(extender: Extender) -> None:
    status, body = await extender.get("/api/v1/model")
    assert (status, body) == (200, {"available": False, "nodes": {}})

    bad = _with_model("n2", [0.2, 7.0], sequence=1)  # 7 > √2: impossible for telemetry in [0,1]
    summary = await _send(extender.grpc.port, [_with_model("n1", [0.25, 0.5]), bad])
    assert (summary.accepted, summary.rejected) == (1, 1)
    assert "memory = 7.0 is outside" in summary.last_rejection

    status, body = await extender.get("/api/v1/model")
    assert status == 200
    assert body["available"] and not body["stale"]
    assert body["feature_names"] == ["cpu", "memory"]
    assert body["expected_workload"] == [0.25, 0.5]
    assert (body["version"], body["contributing_nodes"], body["aggregator"]) == (9, 2, "agg-it")
    assert body["reported_by"] == "n1" and body["age_seconds"] == 0.5
    assert body["nodes"] == {"n1": {"version": 9, "age_seconds": 0.5}}

    extender.clock.advance(11.0)  # past the default stale_after of 10 s: the carrier is stale
    status, body = await extender.get("/api/v1/model")
    assert body["stale"] and body["age_seconds"] == 11.5
