"""The repack trigger: debounce, cooldown, no rerun of a solved state, managed schedulers only."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_ext.repack.trigger import Trigger, Unscheduled, unscheduled_from_object


def stuck(key: str, scheduler: str = "carico-scheduler") -> Unscheduled:
    return Unscheduled(key, scheduler, unschedulable=True)


def pod_object(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"schedulerName": "carico-scheduler"},
        "status": {"phase": "Pending", **status},
    }


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def test_a_pod_counts_only_once_past_the_debounce_window() -> None:
    t = Trigger(debounce=30, cooldown=60, managed_schedulers={"carico-scheduler"})
    t.observe(stuck("shop/a"), now=100)
    assert t.unschedulable == 1
    assert t.due(129.9) == []
    assert t.due(130) == ["shop/a"]
    # Repeated events (kube-scheduler retries the pod) do not restart its window.
    t.observe(stuck("shop/a"), now=125)
    assert t.due(130) == ["shop/a"]


def test_a_pod_that_gets_scheduled_or_deleted_stops_counting() -> None:
    t = Trigger(debounce=10, cooldown=0)
    t.observe(stuck("shop/a"), now=0)
    t.observe(stuck("shop/b"), now=0)
    t.observe(Unscheduled("shop/a", "carico-scheduler", unschedulable=True, gone=True), now=5)
    t.observe(Unscheduled("shop/b", "carico-scheduler", unschedulable=False), now=5)
    assert t.unschedulable == 0 and t.due(100) == []
    # Unschedulable again later: a new window starts.
    t.observe(stuck("shop/a"), now=200)
    assert t.due(205) == [] and t.due(210) == ["shop/a"]


def test_pods_of_unmanaged_schedulers_never_trigger() -> None:
    t = Trigger(debounce=0, cooldown=0, managed_schedulers={"carico-scheduler"})
    t.observe(stuck("shop/a", scheduler="default-scheduler"), now=0)
    assert t.due(100) == []
    everyone = Trigger(debounce=0, cooldown=0)  # empty: every scheduler is managed
    everyone.observe(stuck("shop/a", scheduler="default-scheduler"), now=0)
    assert everyone.due(100) == ["shop/a"]


def test_cooldown_separates_runs() -> None:
    t = Trigger(debounce=0, cooldown=60)
    t.observe(stuck("shop/a"), now=0)
    assert t.due(1) == ["shop/a"]
    t.ran(1, "state-1")
    assert t.due(60.9) == []
    assert t.due(61) == ["shop/a"]


def test_the_state_last_solved_is_remembered_so_it_is_not_solved_again() -> None:
    t = Trigger(debounce=0, cooldown=0)
    assert t.last_fingerprint is None
    t.ran(0, "state-1")
    assert t.last_fingerprint == "state-1"
    # A run that never reached a snapshot (API down) keeps the old state: it is retried.
    t.ran(5)
    assert t.last_fingerprint == "state-1"


def test_relist_keeps_the_windows_of_pods_still_stuck() -> None:
    t = Trigger(debounce=30, cooldown=0)
    t.observe(stuck("shop/a"), now=0)
    t.observe(stuck("shop/b"), now=0)
    t.relist([stuck("shop/a"), stuck("shop/c")], now=20)
    assert t.unschedulable == 2
    assert t.due(30) == ["shop/a"]  # b is gone; c's window started at the relist
    assert t.due(50) == ["shop/a", "shop/c"]


def test_bad_windows_are_refused() -> None:
    with pytest.raises(ValueError):
        Trigger(debounce=-1, cooldown=0)
    with pytest.raises(ValueError):
        Trigger(debounce=0, cooldown=float("nan"))


def test_pod_objects_are_read_as_the_api_sends_them() -> None:
    pod = unscheduled_from_object(pod_object(conditions=[UNSCHEDULABLE]))
    assert pod == Unscheduled("shop/web-1", "carico-scheduler", True, False)
    # A pod the scheduler has not tried yet, or one it failed for another reason, is not stuck.
    fresh = unscheduled_from_object(pod_object())
    assert not fresh.unschedulable
    gated = {**UNSCHEDULABLE, "reason": "SchedulingGated"}
    assert not unscheduled_from_object(pod_object(conditions=[gated])).unschedulable
    # Bound, terminating, finished or deleted pods are gone from the trigger's view.
    bound = pod_object(conditions=[UNSCHEDULABLE])
    bound["spec"]["nodeName"] = "n1"
    assert unscheduled_from_object(bound).gone
    assert unscheduled_from_object(pod_object(conditions=[UNSCHEDULABLE]), deleted=True).gone
    assert unscheduled_from_object(pod_object(phase="Failed")).gone
    # No schedulerName: the API server's default.
    bare = {"metadata": {"name": "x"}, "status": {"conditions": [UNSCHEDULABLE]}}
    assert unscheduled_from_object(bare) == Unscheduled("default/x", "default-scheduler", True)
