"""The executor's pure decisions: drift before a step, and when a step is done."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from repack.problem.plan import Step
from scheduler_ext.repack.executor import ExecutorOptions, backoff_delay
from scheduler_ext.repack.recheck import (
    drift,
    gone,
    landed,
    live_view,
    pod_signature,
    request_signature,
)


def node(name: str, cpu: str = "1000m", **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {}},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "2G", "pods": "110"}},
    }


def pod(
    name: str, cpu: str, node_name: str | None, owner: str | None = "rs", **meta: Any
) -> dict[str, Any]:
    refs = [{"kind": "ReplicaSet", "name": owner, "uid": f"uid-{owner}", "controller": True}]
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "ownerReferences": refs if owner else [],
            **meta,
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            "nodeName": node_name,
        },
        "status": {"phase": "Running" if node_name else "Pending"},
    }


BASE = [node("a"), node("b"), pod("m", "400m", "a"), pod("x", "500m", "b", owner="other")]
MOVE = Step("move", "default/m", "a", "b")


def view(*extra: dict[str, Any], drop: str = "") -> Any:
    items = [copy.deepcopy(i) for i in BASE if i["metadata"]["name"] != drop]
    return live_view({"items": items + list(extra)})


def planned() -> Any:
    return view().pods["default/m"]


def test_no_drift_when_the_state_is_as_planned() -> None:
    assert drift(MOVE, planned(), "uid-m", view()) is None


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"drop": "m"}, "pod default/m is gone"),
        ({"extra": pod("y", "200m", "b", owner="z")}, "node b has no room for default/m: cpu"),
    ],
)
def test_drift_reasons(change: dict[str, Any], expected: str) -> None:
    extra = [change["extra"]] if "extra" in change else []
    reason = drift(MOVE, planned(), "uid-m", view(*extra, drop=change.get("drop", "")))
    assert reason is not None and reason.startswith(expected)


def test_drift_when_the_pod_was_replaced_or_moved() -> None:
    assert "was replaced" in (drift(MOVE, planned(), "uid-old", view()) or "")
    moved = pod("m", "400m", "b")
    reason = drift(MOVE, planned(), "uid-m", view(moved, drop="m"))
    assert reason == "pod default/m is on b, planned a"


@pytest.mark.parametrize(
    ("meta", "owner", "why"),
    [
        ({"annotations": {"carico.io/do-not-move": "true"}}, "rs", "do-not-move"),
        ({"annotations": {"kubernetes.io/config.mirror": "x"}}, "rs", "mirror"),
        ({}, None, "bare"),
        ({"deletionTimestamp": "2026-01-01T00:00:00Z"}, "rs", "terminating"),
    ],
)
def test_protected_pods_are_never_evicted(
    meta: dict[str, Any], owner: str | None, why: str
) -> None:
    live = view(pod("m", "400m", "a", owner=owner, **meta), drop="m")
    assert drift(MOVE, planned(), "uid-m", live) == f"pod default/m must not be moved ({why})"


def test_daemonset_pods_are_never_evicted() -> None:
    ds = pod("m", "400m", "a")
    ds["metadata"]["ownerReferences"][0]["kind"] = "DaemonSet"
    reason = drift(MOVE, planned(), "uid-m", view(ds, drop="m"))
    assert reason == "pod default/m must not be moved (daemonset)"


def test_target_cordoned_or_gone_is_drift() -> None:
    cordoned = [node("a"), node("b", unschedulable=True), *BASE[2:]]
    reason = drift(MOVE, planned(), "uid-m", live_view({"items": copy.deepcopy(cordoned)}))
    assert reason is not None and "no longer accepts" in reason
    reason = drift(MOVE, planned(), "uid-m", view(drop="b"))
    assert reason == "node b is gone"


def test_place_step_checks_the_pending_pod() -> None:
    p = pod("p", "300m", None, owner="new")
    step = Step("place", "default/p", None, "a")
    pend = view(p).pods["default/p"]
    assert drift(step, pend, "uid-p", view(p)) is None
    elsewhere = pod("p", "300m", "b", owner="new")
    assert "was bound to b" in (drift(step, pend, "uid-p", view(elsewhere)) or "")
    assert drift(step, pend, "uid-p", view()) == "pending pod default/p is gone"
    there = pod("p", "300m", "a", owner="new")
    assert landed(step, "uid-p", "", set(), view(there)) == "uid-p"
    assert landed(step, "uid-p", "", set(), view(p)) is None


def test_move_is_done_when_a_new_pod_of_the_owner_is_bound_to_the_target() -> None:
    before = view()
    known = {p.uid for p in before.snapshot.pods}
    assert not gone(MOVE, "uid-m", before)
    after_evict = view(drop="m")
    assert gone(MOVE, "uid-m", after_evict)
    assert landed(MOVE, "uid-m", "uid-rs", known, after_evict) is None
    unbound = pod("m-r1", "400m", None)
    assert landed(MOVE, "uid-m", "uid-rs", known, view(unbound, drop="m")) is None
    bound = pod("m-r1", "400m", "b")
    assert landed(MOVE, "uid-m", "uid-rs", known, view(bound, drop="m")) == "uid-m-r1"
    # already counted for an earlier step: not this step's replacement
    assert landed(MOVE, "uid-m", "uid-rs", known | {"uid-m-r1"}, view(bound, drop="m")) is None


def test_request_signature_matches_the_planned_class() -> None:
    body = json.dumps({"Pod": pod("m-r1", "400m", None), "NodeNames": ["a"]}).encode()
    assert request_signature(body) == pod_signature(planned())
    other = json.dumps({"Pod": pod("m-r1", "401m", None)}).encode()
    assert request_signature(other) != pod_signature(planned())
    assert request_signature(b"not json") is None
    assert request_signature(b'{"Pod": {"metadata": {}}}') is None


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_delay(0.5, 3.0, n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="plan_timeout"):
        ExecutorOptions(plan_timeout=0)
    with pytest.raises(ValueError, match="backoff"):
        ExecutorOptions(backoff_initial=5, backoff_max=1)


def test_land_step_only_waits_so_a_full_target_is_no_drift() -> None:
    land = Step("land", "default/m", None, "b")
    # m left with its evict-first step and its replacement already sits on b: b looks full.
    replacement = pod("m-r1", "400m", "b")
    live = view(replacement, pod("y", "100m", "b", owner="z"), drop="m")
    assert drift(land, planned(), "uid-m", live) is None
    assert drift(land, planned(), "uid-m", view(drop="b")) == "node b is gone"
