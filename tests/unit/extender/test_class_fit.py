"""The extender's per-class decision: how many pods of the incoming pod's class fit a node."""

from __future__ import annotations

import numpy as np
import pytest

from carico.footprint import EMPTY_FLEET, ClassFootprint, FleetSummary, Footprint
from carico.pods import Requests
from scheduler_ext.class_fit import MAX_FIT, PROBE_PODS, NodeClasses, fit_count, node_fit

GI = 2**30
NONE: dict[tuple[str, Requests], int] = {}
SCALE = np.array([[1 / 8, 0.0], [0.0, 1 / (8 * GI)]])  # 4 cores with PSI, 8 GiB


def node(
    headroom: tuple[float, float],
    classes: dict[str, ClassFootprint] | None = None,
    pods: dict[str, int] | None = None,
) -> NodeClasses:
    return NodeClasses(
        feature_names=("cpu", "memory"),
        headroom=np.array(headroom),
        scale=SCALE,
        classes=classes or {},
        pods=pods or {},
        default=Footprint(0.05, 0.01 * GI),
        full_level=0.85,
        cores=4.0,
        memory_bytes=8 * GI,
    )


def learned(name: str, cpu: float, mem: float) -> ClassFootprint:
    return ClassFootprint(name, Footprint(cpu, mem), "learned", 20)


def test_the_scarcest_feature_limits_and_a_full_feature_stops_everything() -> None:
    assert fit_count(np.array([0.5, 0.5]), np.array([0.125, 0.01])) == 4.0
    assert fit_count(np.array([0.5, 0.02]), np.array([0.125, 0.01])) == 2.0
    assert fit_count(np.array([0.5, 0.0]), np.array([0.0, 0.0])) == 0.0
    assert fit_count(np.array([0.5, 0.5]), np.array([0.0, 0.0])) == MAX_FIT


def test_a_memory_heavy_class_fits_a_cpu_busy_node_and_a_cpu_class_does_not() -> None:
    """The orthogonal case: a node busy on CPU takes memory-heavy pods, not CPU-heavy ones."""
    kinds = {"cpu": learned("cpu", 1.0, 0.06 * GI), "mem": learned("mem", 0.1, 1.5 * GI)}
    busy = node((0.1, 0.7), kinds, {"cpu": 6})
    cpu = node_fit(busy, "cpu", Requests(), NONE, 0, EMPTY_FLEET)
    mem = node_fit(busy, "mem", Requests(), NONE, 0, EMPTY_FLEET)
    assert cpu.room == pytest.approx(0.8) and cpu.count == 1  # more than half of one fits
    assert mem.room == pytest.approx(0.7 / (1.5 / 8)) and mem.count == 3  # memory: whole pods
    full = node_fit(node((0.05, 0.7), kinds, {"cpu": 6}), "cpu", Requests(), NONE, 0, EMPTY_FLEET)
    assert full.count == 0
    assert "needs cpu 0.125" in full.reason(("cpu", "memory"), 1.0)


def test_memory_is_never_overcommitted_cpu_is_rounded() -> None:
    """1.4 pods of CPU room is one pod, 1.6 is two; 1.9 pods of memory room is one."""
    kinds = {"c": learned("c", 1.0, 0.0), "m": learned("m", 0.0, 1.0 * GI)}
    assert node_fit(node((0.175, 0.7), kinds), "c", Requests(), NONE, 0, EMPTY_FLEET).count == 1
    assert node_fit(node((0.2, 0.7), kinds), "c", Requests(), NONE, 0, EMPTY_FLEET).count == 2
    mem = node_fit(node((0.8, 1.9 / 8), kinds, {"c": 1}), "m", Requests(), NONE, 0, EMPTY_FLEET)
    assert mem.room == pytest.approx(1.9) and mem.count == 1


def test_reservations_take_room_at_their_class_cost_as_known_now() -> None:
    n = node((0.5, 0.7), {"cpu": learned("cpu", 1.0, 0.0)}, {"cpu": 1})
    free = node_fit(n, "cpu", Requests(), NONE, 0, EMPTY_FLEET)
    one_held = node_fit(n, "cpu", Requests(), {("cpu", Requests()): 1}, 0, EMPTY_FLEET)
    slot_held = node_fit(n, "cpu", Requests(), NONE, 1, FleetSummary.of({"x": Footprint(2, 0)}))
    assert (free.room, one_held.room, slot_held.room) == pytest.approx((4.0, 3.0, 2.0))
    # a pod reserved while its class was a prior is charged what the fleet now knows it costs
    held = {("mem", Requests(0.1, 0.5 * GI)): 2}
    prior = FleetSummary.of({"x": Footprint(0.1, 0.1 * GI)}, memory_ratio=1.0)
    measured = FleetSummary.of({"mem": Footprint(0.1, 1.5 * GI)}, memory_ratio=1.0)
    before = node_fit(n, "cpu", Requests(), held, 0, prior)
    after = node_fit(n, "cpu", Requests(), held, 0, measured)
    assert before.free[1] == pytest.approx(0.7 - 2 * 0.5 / 8)
    assert after.free[1] == pytest.approx(0.7 - 2 * 1.5 / 8)


def test_a_class_nobody_measured_is_probed_a_few_pods_at_a_time() -> None:
    n = node((0.8, 0.7))
    first = node_fit(n, "new", Requests(cpu=0.1), NONE, 0, EMPTY_FLEET)
    assert first.cost.source == "default" and first.count == PROBE_PODS
    one = {("new", Requests(cpu=0.1)): 1}
    assert node_fit(n, "new", Requests(cpu=0.1), one, 0, EMPTY_FLEET).count == PROBE_PODS - 1
    full = {("new", Requests(cpu=0.1)): PROBE_PODS}
    in_flight = node_fit(n, "new", Requests(cpu=0.1), full, 0, EMPTY_FLEET)
    assert in_flight.count == 0 and "probing" in in_flight.reason(("cpu", "memory"), 1.0)
    assert in_flight.probe_capped and in_flight.filter_reason(("cpu", "memory"), 1.0) == (
        f"carico: new is being measured: {PROBE_PODS} unmeasured pods at a time per node"
    )
    running = node(n.headroom, pods={"new": PROBE_PODS})
    assert node_fit(running, "new", Requests(), NONE, 0, EMPTY_FLEET).count == 0
    # once any node measured it, the fleet's value applies and the node fills
    fleet = FleetSummary.of({"new": Footprint(1.0, 0.0)})
    assert node_fit(running, "new", Requests(), NONE, 0, fleet).count == 6


def test_an_idle_node_takes_one_pod_larger_than_its_room() -> None:
    """A 16-thread pod on 4 cores is 2.0 of the cpu feature: less than half of it fits even an
    empty node, yet it must run somewhere."""
    big = {"big": learned("big", 16.0, 0.0)}
    idle = node_fit(node((0.8, 0.7), big), "big", Requests(), NONE, 0, EMPTY_FLEET)
    assert idle.room == pytest.approx(0.4) and idle.count == 1
    busy = node((0.8, 0.7), big, {"other": 1})
    assert node_fit(busy, "big", Requests(), NONE, 0, EMPTY_FLEET).count == 0
    held = node_fit(
        node((0.8, 0.7), big), "big", Requests(), {("x", Requests()): 1}, 0, EMPTY_FLEET
    )
    assert held.count == 0  # a reservation on it: not idle


def test_nodes_failing_the_same_way_share_one_filter_reason() -> None:
    """kube-scheduler counts identical reasons in the pod's condition: two nodes short of CPU by
    different amounts give the same words, a node whose memory is full other words, and the
    detailed reason keeps each node's numbers."""
    web = learned("shop/Deployment/web", 1.0, 0.25 * GI)  # 1/8 of the CPU feature a pod
    names = ("cpu", "memory")
    tight = node_fit(node((0.05, 0.7), {web.name: web}), web.name, Requests(), NONE, 0, EMPTY_FLEET)
    tighter = node_fit(
        node((0.02, 0.7), {web.name: web}), web.name, Requests(), NONE, 0, EMPTY_FLEET
    )
    no_memory = node_fit(
        node((0.5, 0.0), {web.name: web}), web.name, Requests(), NONE, 0, EMPTY_FLEET
    )
    assert tight.count == tighter.count == no_memory.count == 0
    assert not tight.probe_capped
    assert (
        tight.filter_reason(names, 1.0)
        == tighter.filter_reason(names, 1.0)
        == ("carico: no room for a pod of shop/Deployment/web (cpu)")
    )
    assert no_memory.filter_reason(names, 1.0) == (
        "carico: no room for a pod of shop/Deployment/web (memory full)"
    )
    assert tight.filter_reason(names, 2.0) == (
        "carico: no room for 2 pods of shop/Deployment/web (cpu)"
    )
    assert tight.reason(names, 1.0) != tighter.reason(names, 1.0)  # the numbers stay there
    assert tight.filter_reason((), 1.0).endswith("(?)")  # feature names not known
