"""Pod counting: workload pods that run, DaemonSet and mirror pods excluded, changes reported."""

from __future__ import annotations

from typing import Any

import pytest

from agent.pods import PodInfo, PodTable, pod_info_from_dict
from carico.pods import MIRROR_ANNOTATION, PodClass, Requests


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


def web_pod(uid: str, phase: str = "Running", owned: bool = True) -> dict[str, Any]:
    """A pod of the Deployment ``web`` (its ReplicaSet ``web-5d8f9``) as the API serves it."""
    meta: dict[str, Any] = {
        "uid": uid,
        "name": f"web-5d8f9-{uid}",
        "namespace": "shop",
        "labels": {"app": "web", "pod-template-hash": "5d8f9"},
    }
    if owned:
        meta["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": "web-5d8f9", "uid": "rs", "controller": True}
        ]
    container = {"name": "main", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}
    sidecar = {"name": "log", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}}
    return {
        "metadata": meta,
        "spec": {"containers": [container], "initContainers": [sidecar]},
        "status": {"phase": phase},
    }


WEB = PodClass("shop/Deployment/web", Requests(0.3, 64 * 2**20))


def test_running_workload_pods_come_with_their_class_and_requests() -> None:
    table = PodTable()
    table.replace(
        pod_info_from_dict(p)
        for p in [
            web_pod("a"),
            web_pod("b", phase="Pending"),  # not running: not in the classes
            pod("ds", owner="DaemonSet"),  # not a workload pod: no class
            pod("bare", owner=None),
        ]
    )
    # The class and the requests are those the extender computes for the same pod.
    assert table.classes == {
        "a": WEB,
        "bare": PodClass("bare/best-effort", Requests()),
    }
    assert pod_info_from_dict(pod("ds", owner="DaemonSet")).pod_class is None
    assert table.apply("MODIFIED", pod_info_from_dict(web_pod("b")))
    assert set(table.classes) == {"a", "b", "bare"}
    classes = table.classes
    table.apply("DELETED", pod_info_from_dict(web_pod("a")))
    assert "a" in classes and "a" not in table.classes  # each call gives a dict of its own


def test_a_pod_adopted_by_a_controller_changes_class() -> None:
    table = PodTable()
    table.replace([pod_info_from_dict(web_pod("a", owned=False))])
    assert table.classes["a"].name.startswith("bare/")
    assert table.apply("MODIFIED", pod_info_from_dict(web_pod("a")))  # adopted
    assert table.classes == {"a": WEB} and table.count == 1
    assert not table.replace([pod_info_from_dict(web_pod("a"))])
