"""The score shape over the real servers: per-class reports arrive on the gRPC ingest, filter and
prioritize come over HTTP as kube-scheduler sends them, and /api/v1/explain shows each node's
utilisation and shape score (docs/architecture.md#score-shape)."""

from __future__ import annotations

import grpc

from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc
from scheduler_ext.service import Settings
from scheduler_ext.shape import ScoreShape

from .conftest import Extender, MakeExtender, extender_args, pod_object
from .test_classes_http import per_class_report

NODES = ["empty", "half", "busy", "full"]
# cpu headroom of the 4-core nodes (full level 0.85); a web pod needs 0.125 of it. "full" has
# room for 0.2 pod: it fails the filter, so the busiest *feasible* node is "busy".
HEADROOM = {"empty": 0.75, "half": 0.45, "busy": 0.15, "full": 0.025}


async def _report_all(ext: Extender) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ext.grpc.port}") as channel:
        stub = capacity_pb2_grpc.CapacityIngestStub(channel)
        for node, headroom in HEADROOM.items():
            reports: list[capacity_pb2.NodeCapacity] = [per_class_report(node, headroom)]
            summary = await stub.Report(iter(reports), timeout=10)
            assert summary.accepted == 1, summary.last_rejection


async def _schedule(ext: Extender, name: str) -> list[tuple[str, int]]:
    """Filter, then prioritize the passing nodes: the scores, best first."""
    pod = pod_object(name)
    status, passed = await ext.post("filter", extender_args(pod, NODES))
    assert status == 200
    assert passed["NodeNames"] == ["empty", "half", "busy"], passed
    status, scores = await ext.post("prioritize", extender_args(pod, passed["NodeNames"]))
    assert status == 200
    return sorted(((s["Host"], s["Score"]) for s in scores), key=lambda hs: -hs[1])


async def test_packing_ranks_the_busiest_feasible_node_first(
    make_extender: MakeExtender,
) -> None:
    ext: Extender = await make_extender(Settings(score_shape=ScoreShape.parse("0:0,100:10")))
    await _report_all(ext)
    ranked = await _schedule(ext, "web-0")
    assert [host for host, _ in ranked] == ["busy", "half", "empty"]
    assert ranked[0][1] > ranked[1][1] > ranked[2][1]
    status, why = await ext.get("/api/v1/explain?pod=shop/web-0")
    assert status == 200
    shape = why["shape"]
    assert shape["shape"] == "0:0,100:10" and shape["weights"] == {"cpu": 1, "memory": 1}
    # busy: cpu 0.85 - 0.15 + 0.125 of 0.85 = 97 %; memory 0.25 + 0.0125 of 0.85 = 30 %
    assert shape["nodes"]["busy"] == {"utilisation": {"cpu": 97, "memory": 30}, "score": 6}
    assert set(shape["nodes"]) == {"empty", "half", "busy"}
    assert why["prioritize"]["scores"]["busy"] == 6


async def test_spreading_ranks_the_emptiest_node_first(make_extender: MakeExtender) -> None:
    ext: Extender = await make_extender(Settings(score_shape=ScoreShape.parse("0:10,100:0")))
    await _report_all(ext)
    ranked = await _schedule(ext, "web-0")
    assert [host for host, _ in ranked] == ["empty", "half", "busy"]
    assert ranked[0][1] > ranked[1][1] > ranked[2][1]
    # busy, cpu 97 % and memory 30 %: 10 - 9 (Go truncates -9.7) and 10 - 3, mean 4
    assert dict(ranked)["busy"] == 4
    status, why = await ext.get("/api/v1/explain?pod=shop/web-0")
    assert why["shape"]["nodes"]["busy"]["score"] == 4


async def test_without_a_shape_explain_shows_none_and_the_roomiest_node_scores_ten(
    extender: Extender,
) -> None:
    await _report_all(extender)
    ranked = await _schedule(extender, "web-0")
    assert ranked[0] == ("empty", 10) and [h for h, _ in ranked] == ["empty", "half", "busy"]
    status, why = await extender.get("/api/v1/explain?pod=shop/web-0")
    assert status == 200 and "shape" not in why
