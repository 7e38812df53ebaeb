"""A pod the filter turned away is annotated once one of its candidates has room, through the real
HTTP server (docs/architecture.md#waking-turned-away-pods); the cluster is the in-memory one, whose
``annotations`` record what the Kubernetes cluster would be asked to patch (that the patch wakes
kube-scheduler is checked on the real control plane: tests/e2e/test_carico_e2e.py)."""

from __future__ import annotations

import asyncio

from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.pods import PodFacts
from scheduler_ext.waiting import WAKE_ANNOTATION

from .conftest import Extender, MakeExtender, extender_args, pod_object

NAMES = ["n0", "n1"]


async def _settle(ext: Extender) -> None:
    """Until the wake tasks wake_waiting started have run (the in-memory patch is immediate)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def _filter(ext: Extender, pod: dict[str, object]) -> list[str]:
    status, body = await ext.post("filter", extender_args(pod, NAMES))
    assert status == 200, body
    return list(body["NodeNames"] or [])


def _woken_metric(text: str, outcome: str) -> float:
    prefix = f'carico_extender_pods_woken_total{{outcome="{outcome}"}} '
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(lines[0][len(prefix) :]) if lines else 0.0


async def _cluster_with(pod: dict[str, object]) -> InMemoryCluster:
    cluster = InMemoryCluster()
    meta = pod["metadata"]
    assert isinstance(meta, dict)
    cluster.add_pod(PodFacts(meta["namespace"], meta["name"], meta["uid"]))
    return cluster


async def test_a_turned_away_pod_is_annotated_once_when_room_appears(
    make_extender: MakeExtender,
) -> None:
    pod = pod_object()
    ext: Extender = await make_extender(cluster=await _cluster_with(pod))
    ext.feed("n0", 0.3)
    ext.feed("n1", 0.2)
    assert await _filter(ext, pod) == []  # both below one pod of room
    ext.clock.advance(2.0)
    ext.service.wake_waiting()
    await _settle(ext)
    assert ext.cluster.annotations == []  # no room yet: nothing to wake it for

    ext.feed("n1", 3.0, sequence=2, timestamp=1.7e9 + 2)  # room appears: no pod event with it
    ext.service.wake_waiting()
    await _settle(ext)
    key = "shop/web-7d4b9c8f6d-x2kqp"
    assert ext.cluster.annotations == [(key, WAKE_ANNOTATION, f"{ext.clock():.3f}")]

    # kube-scheduler has not come back yet: the pod is not annotated twice for one refusal.
    ext.clock.advance(5.0)
    ext.service.wake_waiting()
    await _settle(ext)
    assert len(ext.cluster.annotations) == 1
    status, text = await ext.get("/metrics")
    assert status == 200 and _woken_metric(text, "annotated") == 1.0

    # It comes back and passes: nothing is left waiting.
    assert await _filter(ext, pod) == ["n1"]
    assert len(ext.service.waiting) == 0


async def test_a_bound_pod_is_no_longer_woken(make_extender: MakeExtender) -> None:
    pod = pod_object()
    ext: Extender = await make_extender(cluster=await _cluster_with(pod))
    ext.feed("n0", 0.3)
    ext.feed("n1", 0.2)
    assert await _filter(ext, pod) == []
    assert len(ext.service.waiting) == 1
    # Bound elsewhere (by another scheduler or by hand): the pod watch says so.
    ext.cluster.add_pod(PodFacts("shop", "web-7d4b9c8f6d-x2kqp", pod["metadata"]["uid"]), node="n9")
    assert len(ext.service.waiting) == 0
    ext.feed("n1", 3.0, sequence=2, timestamp=1.7e9 + 2)
    ext.clock.advance(2.0)
    ext.service.wake_waiting()
    await _settle(ext)
    assert ext.cluster.annotations == []


async def test_a_pod_gone_meanwhile_is_counted_and_forgotten(make_extender: MakeExtender) -> None:
    pod = pod_object()
    ext: Extender = await make_extender()  # the cluster does not know the pod: the patch fails
    ext.feed("n0", 0.3)
    ext.feed("n1", 0.2)
    assert await _filter(ext, pod) == []
    ext.feed("n0", 2.0, sequence=2, timestamp=1.7e9 + 2)
    ext.clock.advance(2.0)
    ext.service.wake_waiting()
    await _settle(ext)
    assert ext.cluster.annotations == []
    assert len(ext.service.waiting) == 0
    status, text = await ext.get("/metrics")
    assert status == 200 and _woken_metric(text, "failed") == 1.0
    assert ext.service.waiting.woken == 1
