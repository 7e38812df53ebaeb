"""Pod counting: workload pods that run, DaemonSet and mirror pods excluded, changes reported."""

from __future__ import annotations

from typing import Any

import pytest

from agent.pods import PodInfo, PodTable, pod_info_from_dict
from carico.pods import MIRROR_ANNOTATION


def pod(
    uid: str, phase: str = "Running", owner: str | None = "ReplicaSet", mirror: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": uid, "namespace": "default"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "uid": "o"}]
    if mirror:
        meta["annotations"] = {MIRROR_ANNOTATION: "hash"}
    return {"metadata": meta, "status": {"phase": phase}}


def test_only_running_workload_pods_count() -> None:
    table = PodTable()
    changed = table.replace(
        pod_info_from_dict(p)
        for p in [
            pod("a"),
            pod("b", phase="Pending"),
            pod("c", owner="DaemonSet"),
            pod("d", owner=None, mirror=True),
            pod("e", owner=None),  # a bare pod is a workload too
            pod("f", phase="Succeeded", owner="Job"),
        ]
    )
    assert changed and table.count == 2


def test_events_report_changes_that_start_the_churn_hold() -> None:
    table = PodTable()
    assert table.apply("ADDED", pod_info_from_dict(pod("a", phase="Pending")))  # created
    assert table.count == 0
    assert table.apply("MODIFIED", pod_info_from_dict(pod("a")))  # started
    assert table.count == 1
    assert not table.apply("MODIFIED", pod_info_from_dict(pod("a")))  # a status heartbeat
    assert not table.apply("ADDED", pod_info_from_dict(pod("ds", owner="DaemonSet")))
    assert table.count == 1
    assert table.apply("DELETED", pod_info_from_dict(pod("a")))
    assert table.count == 0
    assert not table.apply("DELETED", pod_info_from_dict(pod("ds", owner="DaemonSet")))
    with pytest.raises(ValueError):
        table.apply("BOOKMARK", PodInfo("x", True, True))


def test_relist_reports_change_only_when_workload_pods_differ() -> None:
    table = PodTable()
    table.replace([PodInfo("a", True, True), PodInfo("ds", False, True)])
    assert not table.replace([PodInfo("a", True, True), PodInfo("ds2", False, True)])
    assert table.replace([PodInfo("a", True, False)])
    assert table.count == 0
