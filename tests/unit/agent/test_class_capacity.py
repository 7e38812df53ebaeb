"""Per-class capacity in the agent: footprints from pods' own usage, and the headroom reported."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.class_capacity import COUNTED_WINDOW, ClassCapacity
from agent.telemetry import PodUsage
from carico.footprint import FleetSummary, Footprint
from carico.pods import MAX_COUNTED_PODS, PodClass, Requests

GI = 2**30
BPI = PodClass("sim/Job/bpi", Requests(0.1, 0.0))
ML = PodClass("sim/Job/ml", Requests(0.2, 0.75 * GI))
NAMES = ("cpu", "memory")
DEFAULT = Footprint(0.05, 0.01 * GI)


def node(level: float = 0.8) -> ClassCapacity:
    cc = ClassCapacity(NAMES, level, max_classes=8, lag=0.4)
    cc.set_node(4.0, 8 * GI)
    return cc


def test_demand_is_usage_scaled_by_contention_and_learned_per_class() -> None:
    """Six 1-thread pods on 4 cores: each gets 4/6 of a core; utilisation 1 and pressure 0.5
    say the node gave out 1/1.5 of what was asked, so each pod demands one core."""
    cc = node()
    pods = {f"p{i}": BPI for i in range(6)}
    cc.set_running(0.0, pods)
    used = {uid: PodUsage(0.0, 60e6) for uid in pods}
    cc.measure(0.0, used, 1.0, 0.5, True)  # the first reading is the baseline only
    assert cc.learner.learned(BPI.name) is None
    used = {uid: PodUsage(2.0 / 3.0, 60e6) for uid in pods}  # one second later
    cc.measure(1.0, used, 1.0, 0.5, True)
    learned = cc.learner.learned(BPI.name)
    assert learned is not None
    assert learned.footprint == Footprint(pytest.approx(1.0), pytest.approx(60e6))
    assert learned.requests == BPI.requests


def test_a_reading_taken_before_the_pod_ran_is_no_baseline() -> None:
    """The pod's cgroup is read while its containers start (the watch has not said Running):
    the first measurement spans only time the pod was running, so the start does not pull its
    class's cost down."""
    cc = node()
    cc.measure(0.0, {"p": PodUsage(0.0, 1e6)}, 0.1, 0.0, True)  # sandbox only, starting
    cc.set_running(1.0, {"p": BPI})
    cc.measure(1.0, {"p": PodUsage(0.2, 60e6)}, 0.3, 0.0, True)  # started within that second
    assert cc.learner.learned(BPI.name) is None  # that reading is the baseline, not a measure
    cc.measure(2.0, {"p": PodUsage(1.2, 60e6)}, 0.3, 0.0, True)
    learned = cc.learner.learned(BPI.name)
    assert learned is not None and learned.footprint.cpu == pytest.approx(1.0)


def test_a_saturated_node_gives_lower_bounds_that_do_not_pull_the_cost_down() -> None:
    cc = node()
    cc.set_running(0.0, {"a": ML, "b": ML})
    cc.measure(0.0, {"a": PodUsage(0, 7e8), "b": PodUsage(0, 7e8)}, 1.0, 0.0, True)
    # alone: 4 cores each (one ML pod per node before the other started, say)
    cc.measure(1.0, {"a": PodUsage(4.0, 7e8), "b": PodUsage(4.0, 7e8)}, 1.0, 0.0, True)
    # then three on the node: 4/3 core each, pressure at 1: demand at least 2.67, censored
    cc.measure(2.0, {"a": PodUsage(4 + 4 / 3, 7e8), "b": PodUsage(4 + 4 / 3, 7e8)}, 1.0, 1.0, True)
    assert cc.learner.learned(ML.name).footprint.cpu == pytest.approx(4.0)  # type: ignore[union-attr]


def test_headroom_counts_a_new_pod_at_once_and_the_telemetry_for_what_pods_do_not_explain() -> None:
    cc = node(level=0.8)
    fleet = FleetSummary.of({BPI.name: Footprint(1.0, 0.0)})
    cc.fleet = fleet
    y_idle = np.array([0.0125, 0.1])  # 0.1 thread of daemons on 4 cores (with PSI: /8), 10 % mem
    v = cc.view(0.0, y_idle, True, DEFAULT, learn_base=True)
    assert v.headroom == pytest.approx((0.8 - 0.0125, 0.7))
    # two pods start at t = 10: the telemetry has not seen them yet, the footprints have
    cc.set_running(10.0, {"a": BPI, "b": BPI})
    v = cc.view(10.1, y_idle, True, DEFAULT, learn_base=False)
    assert v.headroom[0] == pytest.approx(0.8 - 0.0125 - 2 * 0.125)
    assert [(c.footprint.name, c.footprint.source, c.pods) for c in v.classes] == [
        (BPI.name, "fleet", 2)
    ]
    # once the telemetry shows them, nothing is counted twice
    y_busy = y_idle + np.array([0.25, 0.0])
    v = cc.view(11.0, y_busy, True, DEFAULT, learn_base=True)
    assert v.headroom[0] == pytest.approx(0.8 - 0.0125 - 0.25)
    # a daemon the footprints do not explain takes room too
    v = cc.view(12.0, y_busy + np.array([0.1, 0.0]), True, DEFAULT, learn_base=True)
    assert v.headroom[0] == pytest.approx(0.8 - 0.0125 - 0.25 - 0.1)
    # the pods end: their room is back at once, although the telemetry still shows them
    cc.set_running(13.0, {})
    v = cc.view(13.1, None, True, DEFAULT, learn_base=False)
    assert v.headroom[0] == pytest.approx(0.8 - 0.0125 - 0.1)


def test_the_pods_that_began_to_count_lately_are_listed_newest_first() -> None:
    cc = node()
    cc.set_running(0.0, {"a": BPI})
    cc.set_running(5.0, {"a": BPI, "b": ML})
    cc.set_running(6.0, {"a": BPI, "b": ML, "c": BPI})
    assert cc.counted_recently(6.0) == ("c", "b", "a")
    # a pod keeps the time it began to count while it runs; one that ends is no longer listed
    cc.set_running(7.0, {"a": BPI, "c": BPI})
    assert cc.counted_recently(COUNTED_WINDOW) == ("c", "a")
    assert cc.counted_recently(COUNTED_WINDOW + 0.5) == ("c",)
    assert cc.counted_recently(COUNTED_WINDOW + 6.5) == ()
    # bounded: a node starting more pods at once than a report lists gives the newest
    cc.set_running(40.0, {f"p{i:03d}": BPI for i in range(MAX_COUNTED_PODS + 10)})
    cc.set_running(41.0, {**cc.running, "late": BPI})
    listed = cc.counted_recently(41.0)
    assert len(listed) == MAX_COUNTED_PODS and listed[0] == "late"


def test_a_full_node_has_no_headroom_and_the_scale_follows_the_cpu_feature() -> None:
    cc = node(level=0.8)
    v = cc.view(0.0, np.array([0.95, 0.5]), True, DEFAULT, learn_base=True)
    assert v.headroom == (0.0, pytest.approx(0.3))
    assert v.scale == ((0.125, 0.0), (0.0, 1.0 / (8 * GI)))
    assert cc.view(0.0, np.array([0.95, 0.5]), False, DEFAULT, True).scale[0] == (0.25, 0.0)


def test_a_pods_last_readings_before_the_watch_says_it_ended_are_not_learned_from() -> None:
    """The process exits before the pod watch says so: the readings in between show the pod
    idle. Held ``exit_lag`` seconds, they are dropped when the pod ends meanwhile; the readings
    of the pods still running are learned from once that time has passed."""
    cc = ClassCapacity(NAMES, 0.8, max_classes=8, lag=0.4, exit_lag=2.0)
    cc.set_node(4.0, 8 * GI)
    pods = {"a": BPI, "b": BPI}
    cc.set_running(0.0, pods)
    cpu = {"a": 0.0, "b": 0.0}

    def read(t: float, used: dict[str, float]) -> None:
        for uid, cores in used.items():
            cpu[uid] += cores * 0.5
        cc.measure(t, {uid: PodUsage(cpu[uid], 60e6) for uid in used}, 0.5, 0.0, True)

    read(0.0, {"a": 0.0, "b": 0.0})  # the baseline
    for i in range(1, 9):  # both pods use a core for 4 s, 0.5 s apart
        read(i * 0.5, {"a": 1.0, "b": 1.0})
    # the class's first reading (t = 0.5) at once, the next ones held 2 s: the readings up to
    # t = 2.0 are learned from by t = 4.0
    assert cc.measurements == 2 * 4
    assert cc.learner.learned(BPI.name).footprint.cpu == pytest.approx(1.0)  # type: ignore[union-attr]
    # "a" exits at t = 4.0; its readings show it idle until the watch says it ended at 5.5 (the
    # pipeline passes a sample's running pods before its usage)
    for i in range(9, 11):
        read(i * 0.5, {"a": 0.0, "b": 1.0})
    cc.set_running(5.5, {"b": BPI})
    for i in range(11, 20):
        read(i * 0.5, {"b": 1.0})
    # of "a", the readings at 2.5 and 3.0 were learned from (released at 4.5 and 5.0, it still
    # ran then); those from 3.5 on, the idle ones among them, were dropped
    assert cc.learner.learned(BPI.name).footprint.cpu == pytest.approx(1.0)  # type: ignore[union-attr]
    assert cc.measurements == 2 * 4 + 2 + 11  # "b": t = 2.5 .. 7.5, released by t = 9.5


def test_without_the_hold_the_idle_tail_pulls_the_cost_down() -> None:
    """The same exit with ``exit_lag`` 0: the check above can fail."""
    cc = node()
    cc.set_running(0.0, {"a": BPI})
    cc.measure(0.0, {"a": PodUsage(0.0, 60e6)}, 0.5, 0.0, True)
    cc.measure(1.0, {"a": PodUsage(1.0, 60e6)}, 0.5, 0.0, True)
    cc.measure(2.0, {"a": PodUsage(1.0, 60e6)}, 0.1, 0.0, True)  # exited, still "Running"
    assert cc.learner.learned(BPI.name).footprint.cpu < 1.0  # type: ignore[union-attr]


@pytest.mark.parametrize("exit_lag", [-1.0, math.nan, math.inf])
def test_the_exit_lag_must_be_seconds(exit_lag: float) -> None:
    with pytest.raises(ValueError, match="exit_lag"):
        ClassCapacity(NAMES, 0.8, max_classes=8, exit_lag=exit_lag)
