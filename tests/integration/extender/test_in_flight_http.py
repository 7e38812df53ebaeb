"""Pods in flight over the real HTTP server: kube-scheduler binds asynchronously, so the next
pod's filter can arrive before the last pod's bind. It must not pass a node on room that pod is
about to take (an ignorable extender's bind refusal would be skipped and the pod bound anyway)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from scheduler_ext.pods import PodFacts

from .conftest import Extender, extender_args, pod_object
from .test_classes_http import WEB, _stream, per_class_report


async def _filter(ext: Extender, name: str, nodes: list[str]) -> dict[str, Any]:
    status, reply = await ext.post("filter", extender_args(pod_object(name), nodes))
    assert status == 200, reply
    return dict(reply)


async def _bind(ext: Extender, name: str, node: str) -> str:
    args = {"PodName": name, "PodNamespace": "shop", "PodUID": f"uid-shop-{name}", "Node": node}
    status, reply = await ext.post("bind", json.dumps(args).encode())
    assert status == 200
    error: str = reply["Error"]
    return error


async def _still_waiting(task: asyncio.Task[Any]) -> bool:
    await asyncio.sleep(0.1)  # long enough for a reply on loopback, short next to the TTL
    return not task.done()


def _metric(ext: Extender, outcome: str) -> float:
    value = ext.service.metrics.registry.get_sample_value(
        "carico_extender_in_flight_waits_total", {"outcome": outcome}
    )
    return value or 0.0


async def test_the_next_filter_waits_for_the_bind_and_then_counts_its_reservation(
    extender: Extender,
) -> None:
    extender.feed("n1", 1.5)  # room for one pod
    extender.feed("n2", 9.0)
    assert (await _filter(extender, "a", ["n1", "n2"]))["NodeNames"] == ["n1", "n2"]
    # b's filter comes before a's bind: n1 has room for b only if a is not counted, so it waits
    b = asyncio.create_task(_filter(extender, "b", ["n1", "n2"]))
    assert await _still_waiting(b)
    assert await _bind(extender, "a", "n1") == ""
    reply = await asyncio.wait_for(b, 5)
    assert reply["NodeNames"] == ["n2"]
    assert reply["FailedNodes"] == {"n1": "carico: avail 1.5 - reserved 1 < 1"}
    assert _metric(extender, "bound") == 1


async def test_a_node_with_room_for_both_does_not_wait(extender: Extender) -> None:
    extender.feed("n1", 2.5)
    await _filter(extender, "a", ["n1"])
    reply = await asyncio.wait_for(_filter(extender, "b", ["n1"]), 0.5)
    assert reply["NodeNames"] == ["n1"]
    assert _metric(extender, "bound") == _metric(extender, "expired") == 0


async def test_a_pod_bound_by_another_binder_ends_its_hold(extender: Extender) -> None:
    """Without Carico binding (kube-scheduler's binder), the pod watch says the pod is bound."""
    extender.feed("n1", 1.5)
    await _filter(extender, "a", ["n1"])
    b = asyncio.create_task(_filter(extender, "b", ["n1"]))
    assert await _still_waiting(b)
    extender.cluster.add_pod(PodFacts("shop", "a", "uid-shop-a"), node="n1")
    reply = await asyncio.wait_for(b, 5)
    assert reply["NodeNames"] == [] and "reserved 1" in reply["FailedNodes"]["n1"]


async def test_a_hold_whose_bind_never_comes_ends_by_its_ttl(extender: Extender) -> None:
    extender.feed("n1", 1.5)
    await _filter(extender, "a", ["n1"])  # a's cycle then fails: no bind ever comes
    b = asyncio.create_task(_filter(extender, "b", ["n1"]))
    assert await _still_waiting(b)
    extender.clock.advance(extender.service.in_flight.ttl)  # the service's clock, not the wait's
    reply = await asyncio.wait_for(b, 5)  # the wait ends at its real-time timeout (the TTL)
    assert reply["NodeNames"] == ["n1"]
    assert _metric(extender, "expired") == 1


async def test_a_filter_tried_again_drops_the_pods_own_earlier_hold(extender: Extender) -> None:
    extender.feed("n1", 1.5)
    await _filter(extender, "a", ["n1"])
    reply = await asyncio.wait_for(_filter(extender, "a", ["n1"]), 0.5)
    assert reply["NodeNames"] == ["n1"]


@pytest.mark.parametrize("exempt_first", [True, False])
async def test_exempt_pods_neither_hold_nor_wait(extender: Extender, exempt_first: bool) -> None:
    extender.feed("n1", 1.5)
    system = pod_object("dns", namespace="kube-system")
    if exempt_first:
        await extender.post("filter", extender_args(system, ["n1"]))
        reply = await asyncio.wait_for(_filter(extender, "b", ["n1"]), 0.5)
        assert reply["NodeNames"] == ["n1"]
    else:
        await _filter(extender, "a", ["n1"])
        status, reply = await asyncio.wait_for(
            extender.post("filter", extender_args(system, ["n1"])), 0.5
        )
        assert status == 200 and reply["NodeNames"] == ["n1"]


async def test_per_class_counts_hold_too(extender: Extender) -> None:
    # room for 1.2 web pods of a learned class (a core each on a 4-core node)
    await _stream(extender.grpc.port, [per_class_report("n1", 0.15)])
    assert (await _filter(extender, "web-a", ["n1"]))["NodeNames"] == ["n1"]
    b = asyncio.create_task(_filter(extender, "web-b", ["n1"]))
    assert await _still_waiting(b)
    assert await _bind(extender, "web-a", "n1") == ""
    reply = await asyncio.wait_for(b, 5)
    assert reply["NodeNames"] == [] and WEB in reply["FailedNodes"]["n1"]
