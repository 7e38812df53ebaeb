"""Per-class decisions over the real servers: reports with per-class data arrive on the gRPC
ingest, kube-scheduler's verbs come over HTTP, reservations are held in the reserved pods' own
costs, and a node whose agent sends no per-class data (an older agent) is decided as before."""

from __future__ import annotations

import logging

import grpc
import pytest

from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc

from .conftest import Extender, extender_args, pod_object, report

GI = 2**30
WEB = "shop/Deployment/web"  # the class of the conftest's pod (a Deployment's ReplicaSet)


def per_class_report(
    node: str, cpu_headroom: float, *, sequence: int = 1
) -> capacity_pb2.NodeCapacity:
    """A 4-core, 8 GiB node whose agent learned that a ``web`` pod keeps one core busy (a later
    sequence is a later report: each test stream is a new one, so its timestamp must be newer)."""
    msg = report(
        node, 10.0, sequence=sequence, timestamp=1.7e9 + sequence, feature_names=["cpu", "memory"]
    )
    msg.features.extend([0.3, 0.2])
    msg.headroom.extend([cpu_headroom, 0.6])
    msg.scale.extend(
        [
            capacity_pb2.FeatureScale(per_core=1 / 8),
            capacity_pb2.FeatureScale(per_byte=1 / (8 * GI)),
        ]
    )
    msg.classes.add(
        workload_class=WEB, cpu_cores=1.0, memory_bytes=0.1 * GI, source="learned", pods=2,
        samples=40, request_cpu_cores=0.1, request_memory_bytes=128 * 2**20,
    )  # fmt: skip
    msg.full_level = 0.85
    msg.cpu_cores, msg.memory_bytes = 4.0, 8 * GI
    return msg


async def _stream(port: int, reports: list[capacity_pb2.NodeCapacity]) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = capacity_pb2_grpc.CapacityIngestStub(channel)
        summary = await stub.Report(iter(reports), timeout=10)
        assert summary.accepted == len(reports), summary.last_rejection


async def _bind(ext: Extender, name: str, node: str) -> str:
    body = (
        f'{{"PodName":"{name}","PodNamespace":"shop","PodUID":"uid-shop-{name}","Node":"{node}"}}'
    )
    status, reply = await ext.post("bind", body.encode())
    assert status == 200
    error: str = reply["Error"]
    return error


async def test_reservations_are_held_in_the_pods_class_cost(
    extender: Extender, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="scheduler_ext.service")
    # n1: room for 0.3 / 0.125 = 2.4 web pods; legacy: an older agent's avail 3
    await _stream(extender.grpc.port, [per_class_report("n1", 0.3)])
    await _stream(extender.grpc.port, [report("legacy", 3.0)])
    for i in range(2):
        pod = pod_object(f"web-{i}")
        status, reply = await extender.post("filter", extender_args(pod, ["n1", "legacy"]))
        assert status == 200 and reply["NodeNames"] == ["n1", "legacy"], reply
        assert await _bind(extender, f"web-{i}", "n1") == ""
    # two web pods are reserved on n1: 0.4 pod of room is left, less than half a pod
    status, reply = await extender.post(
        "filter", extender_args(pod_object("web-2"), ["n1", "legacy"])
    )
    assert reply["NodeNames"] == ["legacy"]
    # the filter's words are those of every node short of CPU for the class (kube-scheduler
    # counts identical reasons); the bind's refusal carries this node's numbers
    assert reply["FailedNodes"]["n1"] == f"carico: no room for a pod of {WEB} (cpu)"
    # bind re-checks: the same refusal, and the ledger holds only the two
    error = await _bind(extender, "web-2", "n1")
    assert WEB in error and "cpu 0.125" in error and "(learned)" in error, error
    assert extender.service.table.reserved("n1") == 2
    # each bind's log line says what the pod was charged: its class's cost, one pod's share of
    # the node and the free room the check saw (the second pod's: the first's share less)
    binds = [r for r in caplog.records if getattr(r, "decision", "") == "bind"]
    assert [(r.room, r.cost, r.need, r.free) for r in binds] == [  # type: ignore[attr-defined]
        (
            room,
            {"cpu_cores": 1.0, "memory_bytes": 0.1 * GI, "source": "learned"},
            {"cpu": 0.125, "memory": pytest.approx(0.0125)},
            {"cpu": pytest.approx(cpu), "memory": pytest.approx(memory)},
        )
        for room, cpu, memory in ((2, 0.3, 0.6), (1, 0.175, 0.5875))
    ]
    # the legacy node counts pod-units: three fit, each bind takes one
    for i in range(3, 6):
        assert await _bind(extender, f"web-{i}", "legacy") == ""
    status, reply = await extender.post("filter", extender_args(pod_object("web-6"), ["legacy"]))
    assert reply["NodeNames"] == [] and reply["FailedNodes"]["legacy"].startswith(
        "carico: avail 3 - reserved 3 < 1"
    )


async def test_a_pod_counted_releases_its_class_cost_and_explain_shows_the_costs(
    extender: Extender,
) -> None:
    await _stream(extender.grpc.port, [per_class_report("n1", 0.15)])  # 1.2 pods of room
    status, _ = await extender.post("filter", extender_args(pod_object("web-0"), ["n1"]))
    assert await _bind(extender, "web-0", "n1") == ""
    status, reply = await extender.post("filter", extender_args(pod_object("web-1"), ["n1"]))
    assert reply["NodeNames"] == []  # 0.2 pod left: rounded, nothing fits
    extender.cluster.set_phase("shop/web-0", "Running")  # handed over: held until counted
    assert extender.service.table.reserved("n1") == 1
    # the agent now counts the pod: its next report has the room it leaves and lists the pod
    counting = per_class_report("n1", 0.075, sequence=2)
    counting.counted_pods.append("uid-shop-web-0")
    await _stream(extender.grpc.port, [counting])
    assert extender.service.table.reserved("n1") == 0
    status, reply = await extender.post("filter", extender_args(pod_object("web-1"), ["n1"]))
    assert reply["NodeNames"] == ["n1"]  # 0.6 pods of room rounds to one
    status, why = await extender.get("/api/v1/explain?pod=shop/web-1")
    assert status == 200
    assert why["class"]["class"] == WEB
    assert why["class"]["nodes"]["n1"] == {
        "fits": 1, "room": 0.6, "cpu_cores": 1.0, "memory_bytes": round(0.1 * GI),
        "source": "learned",
    }  # fmt: skip
    status, nodes = await extender.get("/api/v1/nodes")
    [n1] = [n for n in nodes if n["name"] == "n1"]
    assert n1["classes"]["classes"][0]["class"] == WEB
    assert n1["classes"]["headroom"] == {"cpu": 0.075, "memory": 0.6}
    assert n1["decided_by"] == "class"  # its one-cost avail is shown for reference only


async def test_a_report_without_per_class_data_means_one_cost_for_every_pod(
    extender: Extender,
) -> None:
    """An agent older than the per-class fields: its report parses as before, its node is
    decided on avail − reserved, and /api/v1/nodes shows no classes for it."""
    old = report("n1", 1.4)
    assert not old.headroom and not old.classes
    await _stream(extender.grpc.port, [old])
    status, reply = await extender.post("filter", extender_args(pod_object("web-0"), ["n1"]))
    assert reply["NodeNames"] == ["n1"]
    assert await _bind(extender, "web-0", "n1") == ""
    status, reply = await extender.post("filter", extender_args(pod_object("web-1"), ["n1"]))
    assert reply["FailedNodes"] == {"n1": "carico: avail 1.4 - reserved 1 < 1"}
    status, nodes = await extender.get("/api/v1/nodes")
    assert nodes[0]["classes"] is None and nodes[0]["decided_by"] == "avail"
