"""The Pending-pods watch's parsers: raw API bytes and watch lines to what the reservation ledger
and the repack trigger each see of a pod, decoded once."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from scheduler_ext.kube import (
    PENDING,
    ApiPod,
    parse_pending_line,
    parse_pending_list,
    unscheduled_of,
)
from scheduler_ext.repack.trigger import Unscheduled, unscheduled_from_object

STUCK = {
    "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "41"},
    "spec": {"schedulerName": "carico-scheduler"},
    "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    },
}
BOUND = {
    "metadata": {"name": "web-2", "namespace": "shop", "uid": "u2", "resourceVersion": "43"},
    "spec": {"schedulerName": "carico-scheduler", "nodeName": "n1"},
    "status": {"phase": "Pending"},
}


def line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


def test_a_list_gives_each_pending_pod_to_the_ledger_or_the_trigger() -> None:
    body = {"kind": "PodList", "metadata": {"resourceVersion": "44"}, "items": [STUCK, BOUND]}
    pods, version = parse_pending_list(json.dumps(body).encode())
    assert version == "44"
    (stuck_state, stuck_view), (bound_state, bound_view) = pods
    assert stuck_state is None  # unbound: no concern of the ledger, its facts not derived
    assert stuck_view == Unscheduled("shop/web-1", "carico-scheduler", True)
    assert bound_state is not None
    assert (bound_state.facts.key, bound_state.node, bound_state.facts.uid) == (
        "shop/web-2",
        "n1",
        "u2",
    )
    # bound: gone from the trigger's view
    assert bound_view == Unscheduled("shop/web-2", "carico-scheduler", False, gone=True)


def test_watch_lines() -> None:
    kind, version, pod = parse_pending_line(line({"type": "ADDED", "object": STUCK}))
    assert (kind, version) == ("ADDED", "41") and pod is not None
    assert pod == (None, Unscheduled("shop/web-1", "carico-scheduler", True))
    # A binding arrives as MODIFIED with the node: the ledger's pod, the trigger's gone.
    bound = {**STUCK, "spec": {**STUCK["spec"], "nodeName": "n2"}}  # type: ignore[dict-item]
    _, _, pod = parse_pending_line(line({"type": "MODIFIED", "object": bound}))
    assert pod is not None and pod[0] is not None and pod[1].gone
    assert pod[0].node == "n2" and not pod[0].deleted
    # Leaving Pending arrives as DELETED: both see the pod go.
    _, _, pod = parse_pending_line(line({"type": "DELETED", "object": BOUND}))
    assert pod is not None and pod[0] is not None and pod[0].deleted and pod[1].gone
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}}
    assert parse_pending_line(line(bookmark)) == ("BOOKMARK", "9", None)
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    assert parse_pending_line(line({"type": "ERROR", "object": gone})) == ("ERROR", "", None)


def test_the_typed_view_matches_the_one_from_raw_objects() -> None:
    """The trigger's view from the watch's typed decoding and from a raw object (what a repack
    lists) follow one rule."""
    terminating = {
        **STUCK,
        "metadata": {**STUCK["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"},
    }  # type: ignore[dict-item]
    gated = {
        **STUCK,
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
            ],
        },
    }
    bare: dict[str, Any] = {"metadata": {"name": "x"}}
    for obj in (STUCK, BOUND, terminating, gated, bare, {**BOUND, "status": {"phase": "Failed"}}):
        typed = msgspec.json.decode(json.dumps(obj).encode(), type=ApiPod)
        assert unscheduled_of(typed) == unscheduled_from_object(obj)
        assert unscheduled_of(typed, deleted=True) == unscheduled_from_object(obj, deleted=True)


def test_the_watch_selects_every_pending_pod() -> None:
    assert PENDING == "status.phase=Pending"
