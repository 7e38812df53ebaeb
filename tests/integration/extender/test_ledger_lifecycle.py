"""Reservations over real HTTP: taken by bind, ended by reports and pod events, expired, rebuilt,
raced."""

from __future__ import annotations

import asyncio
import json

import pytest

from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.ledger import HANDOVER_TIMEOUT
from scheduler_ext.pods import PodFacts
from scheduler_ext.service import Settings

from .conftest import Extender, MakeExtender, report
from .test_grpc_ingest import _send


def _bind(pod: str, node: str, uid: str = "") -> bytes:
    args = {"PodName": pod, "PodNamespace": "shop", "PodUID": uid or f"uid-{pod}", "Node": node}
    return json.dumps(args).encode()


async def test_released_when_counted_ended_or_deleted(extender: Extender) -> None:
    extender.feed("n1", 10.0)
    for pod in ("a", "b", "c"):
        assert (await extender.post("bind", _bind(pod, "n1")))[1] == {"Error": ""}
    assert extender.service.table.reserved("n1") == 3
    extender.cluster.set_phase("shop/a", "Running")  # handed over: held until a report counts it
    extender.cluster.set_phase("shop/b", "Failed")
    assert extender.service.table.reserved("n1") == 2
    # Deleted while Pending: the watch cannot tell it from a pod that started, so it is handed
    # over too; no report will list it, and it goes after the hand-over timeout.
    extender.cluster.delete_pod("shop/c")
    assert extender.service.table.reserved("n1") == 2
    extender.feed("n1", 9.0, sequence=2, timestamp=1.7e9 + 1, counted_pods=["uid-a"])
    assert extender.service.table.reserved("n1") == 1
    extender.clock.advance(HANDOVER_TIMEOUT)
    extender.service.sweep()
    assert extender.service.table.reserved("n1") == 0
    _, reservations = await extender.get("/api/v1/reservations")
    assert reservations == []
    assert {h.value: n for h, n in extender.service.ledger.ended.items() if n} == {
        "counted": 1,
        "released": 1,
        "uncounted": 1,
    }


async def test_a_running_pod_holds_its_room_until_a_report_counts_it(extender: Extender) -> None:
    """The pod watch says Running a moment before the node's agent reports the pod: ending the
    reservation then left the pod counted nowhere, and kube-scheduler, which retries its waiting
    pods on that very pod update, could put one more pod on the full node. Reports go over the
    real gRPC stream."""
    from .conftest import extender_args, pod_object

    async def send(avail: float, sequence: int, counted: list[str]) -> None:
        msg = report("n1", avail, sequence=sequence, timestamp=1.7e9 + sequence)
        msg.counted_pods.extend(counted)
        summary = await _send(extender.grpc.port, [msg])
        assert summary.accepted == 1, summary

    async def passes(name: str) -> bool:
        pod = pod_object(name, uid=f"uid-{name}")
        _, reply = await extender.post("filter", extender_args(pod, ["n1"]))
        return bool(reply["NodeNames"])

    await send(1.5, 1, [])  # room for one pod
    assert await passes("a")
    assert (await extender.post("bind", _bind("a", "n1")))[1] == {"Error": ""}
    assert not await passes("b")  # a holds the room
    extender.cluster.set_phase("shop/a", "Running")
    extender.clock.advance(0.25)
    _, (held,) = await extender.get("/api/v1/reservations")
    assert (held["pod"], held["handed_over_seconds"]) == ("shop/a", 0.25)
    assert not await passes("b")  # still: the last report does not count a yet
    await send(1.5, 2, [])  # a report made before the agent saw a: a still held
    assert not await passes("b")
    await send(0.5, 3, ["uid-a"])  # the agent counts a
    assert extender.service.table.reserved("n1") == 0
    assert not await passes("b")
    await send(1.5, 4, [])  # a ended
    assert await passes("b")


@pytest.mark.parametrize(
    ("phase", "deadline", "event"),
    [
        # Pending: the TTL, a safety net should the watch miss the pod's fate.
        ("Pending", 60.0, "expired"),
        # Running, and no report lists it (an agent older than the counted-pods list): the
        # hand-over timeout, counted as uncounted, without a warning.
        ("Running", HANDOVER_TIMEOUT, "uncounted"),
    ],
)
async def test_a_reservation_ends_at_its_deadline_with_the_injected_clock(
    make_extender: MakeExtender, phase: str, deadline: float, event: str
) -> None:
    ext: Extender = await make_extender(Settings(reservation_ttl=60))
    ext.feed("n1", 10.0, timestamp=1.7e9)
    await ext.post("bind", _bind("slow", "n1"))
    ext.cluster.set_phase("shop/slow", phase)
    ext.clock.advance(deadline - 0.1)
    ext.service.sweep()
    assert ext.service.table.reserved("n1") == 1
    ext.clock.advance(0.1)
    ext.service.sweep()
    assert ext.service.table.reserved("n1") == 0
    _, metrics = await ext.get("/metrics")
    assert f'carico_extender_reservations_total{{event="{event}"}} 1.0' in metrics
    assert 'carico_extender_reservations_total{event="created"} 1.0' in metrics
    ended = [line for line in metrics.splitlines() if line.endswith(" 1.0") and "event=" in line]
    assert len(ended) == 2, ended  # created and the one way it ended


async def test_rebuilt_from_the_cluster_on_start(make_extender: MakeExtender) -> None:
    cluster = InMemoryCluster()
    cluster.add_pod(PodFacts("shop", "bound-1", "u1"), node="n1")
    cluster.add_pod(PodFacts("shop", "bound-2", "u2"), node="n1")
    cluster.add_pod(PodFacts("shop", "running", "u3"), node="n1", phase="Running")
    cluster.add_pod(PodFacts("shop", "unbound", "u4"))
    cluster.add_pod(PodFacts("kube-system", "proxy", "u5"), node="n1")  # exempt
    ext: Extender = await make_extender(cluster=cluster)
    assert ext.service.readiness.ledger_rebuilt
    assert ext.service.table.reserved("n1") == 2
    _, reservations = await ext.get("/api/v1/reservations")
    assert [r["pod"] for r in reservations] == ["shop/bound-1", "shop/bound-2"]


async def test_parallel_binds_never_over_reserve(make_extender: MakeExtender) -> None:
    # The cluster takes 20 ms per binding, so all requests are in flight together.
    ext: Extender = await make_extender(cluster=InMemoryCluster(bind_delay=0.02))
    avail = {"n1": 3.0, "n2": 5.5, "n3": 0.5, "n4": 1.0}
    for node, value in avail.items():
        ext.feed(node, value)
    requests = [
        ext.post("bind", _bind(f"p{i}-{node}", node)) for i in range(60) for node in sorted(avail)
    ]
    replies = await asyncio.gather(*requests)
    assert all(status == 200 for status, _ in replies)
    bound: dict[str, int] = {}
    for b in ext.cluster.bindings:
        bound[b.node] = bound.get(b.node, 0) + 1
    # avail - reserved >= 1 allows floor(avail - 1) + 1 reservations per node.
    assert bound == {"n1": 3, "n2": 5, "n4": 1}
    assert ext.service.table.reserved_counts() == bound
    refused = [body["Error"] for _, body in replies if body["Error"]]
    assert len(refused) == 240 - 9
    assert all(e.startswith("carico: avail ") for e in refused)


async def test_unmanaged_scheduler_pods_are_bound_without_reservation(
    make_extender: MakeExtender,
) -> None:
    from .conftest import extender_args, pod_object

    ext: Extender = await make_extender()
    ext.feed("n1", 0.0)  # full: a managed pod would be refused
    pod = pod_object("plain", uid="uid-plain", spec__schedulerName="default-scheduler")
    status, reply = await ext.post("filter", extender_args(pod, ["n1"]))
    assert status == 200 and reply["NodeNames"] == ["n1"]
    assert (await ext.post("bind", _bind("plain", "n1")))[1] == {"Error": ""}
    assert ext.service.table.reserved("n1") == 0
    assert [b.name for b in ext.cluster.bindings] == ["plain"]
    # The same pod under the carico profile is decided (and refused) as before.
    managed = pod_object("mine", uid="uid-mine")
    _, reply = await ext.post("filter", extender_args(managed, ["n1"]))
    assert reply["NodeNames"] == [] and "n1" in reply["FailedNodes"]
    assert "avail" in (await ext.post("bind", _bind("mine", "n1")))[1]["Error"]


async def test_managed_schedulers_empty_manages_every_pod(make_extender: MakeExtender) -> None:
    from .conftest import extender_args, pod_object

    ext: Extender = await make_extender(Settings(managed_schedulers=frozenset()))
    ext.feed("n1", 0.0)
    pod = pod_object("plain", uid="uid-plain", spec__schedulerName="default-scheduler")
    _, reply = await ext.post("filter", extender_args(pod, ["n1"]))
    assert reply["NodeNames"] == [] and "n1" in reply["FailedNodes"]


async def test_a_refused_or_duplicate_bind_leaves_the_ledger_as_it_was(extender: Extender) -> None:
    """A bind the cluster refuses gives back only what that very call reserved: kube-scheduler
    retries a bind whose reply timed out after the binding was made, and the API answers that
    retry 409 (already assigned); the first bind's reservation must survive it."""
    extender.feed("n1", 10.0)
    assert (await extender.post("bind", _bind("r1", "n1", "u1")))[1] == {"Error": ""}

    async def state() -> object:
        _, reservations = await extender.get("/api/v1/reservations")
        return (
            [(r["pod"], r["uid"], r["node"]) for r in reservations],
            extender.service.table.reserved_counts(),
            extender.service.ledger.open_count(),
        )

    before = await state()
    assert before == ([("shop/r1", "u1", "n1")], {"n1": 1}, 1)
    # The same call again, with another uid, an empty one and none, and to another node.
    same = {"PodName": "r1", "PodNamespace": "shop", "PodUID": "u1", "Node": "n1"}
    for change in ({}, {"PodUID": "u2"}, {"PodUID": ""}, {"PodUID": None}, {"Node": "n2"}):
        args = {k: v for k, v in {**same, **change}.items() if v is not None}
        status, body = await extender.post("bind", json.dumps(args).encode())
        assert status == 200 and body["Error"], (change, body)
        assert await state() == before, change
    # The binding the cluster holds is the first one, and the reservation still counts.
    assert [(b.name, b.uid, b.node) for b in extender.cluster.bindings] == [("r1", "u1", "n1")]
    _, nodes = await extender.get("/api/v1/nodes")
    assert [(n["name"], n["reserved"]) for n in nodes] == [("n1", 1)]
