"""The unbound-pod watch's parsers (raw API bytes and watch events to the repack trigger's view)."""

from __future__ import annotations

import json

from scheduler_ext.kube import UNBOUND_PENDING, parse_unscheduled_event, parse_unscheduled_list
from scheduler_ext.repack.trigger import Unscheduled

STUCK = {
    "metadata": {"name": "web-1", "namespace": "shop", "resourceVersion": "41"},
    "spec": {"schedulerName": "carico-scheduler"},
    "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    },
}


def test_a_pod_list_gives_the_pods_and_the_resource_version() -> None:
    body = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "42"}, "items": [STUCK]})
    pods, version = parse_unscheduled_list(body.encode())
    assert version == "42"
    assert pods == [Unscheduled("shop/web-1", "carico-scheduler", True)]


def test_watch_events() -> None:
    added = parse_unscheduled_event({"type": "ADDED", "object": STUCK})
    assert added == Unscheduled("shop/web-1", "carico-scheduler", True)
    # Leaving the unbound-Pending selection (bound, here) arrives as DELETED.
    gone = parse_unscheduled_event({"type": "DELETED", "object": STUCK})
    assert gone is not None and gone.gone
    assert parse_unscheduled_event({"type": "BOOKMARK", "object": STUCK}) is None


def test_the_watch_selects_unbound_pending_pods() -> None:
    assert set(UNBOUND_PENDING.split(",")) == {"status.phase=Pending", "spec.nodeName="}
