"""Counting the workload pods running on this node, from pod events. Pure.

Design: docs/architecture.md#pod-counting.

A workload pod is one the scheduler placed: DaemonSet pods (one per node whatever the capacity) and
mirror pods of static manifests are excluded (the rule is :func:`carico.pods.is_workload_pod`, the
same the extender applies). Only pods in phase Running count — a Pending pod uses
nothing yet. :mod:`agent.kube_watch` turns API objects into :class:`PodInfo` and feeds the table;
the table says whether an event changed anything, which starts the churn hold.

Each workload pod also carries its workload class and requests (:func:`carico.pods.class_of_pod`,
the function the extender applies to the same pod), so that the pods' measured usage is learned
per class (docs/architecture.md#cost-and-capacity); :attr:`PodTable.classes` gives the running
ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from carico.pods import PodClass, class_of_pod, is_workload_pod


@dataclass(frozen=True)
class PodInfo:
    """What the agent needs to know about one pod on its node."""

    uid: str
    workload: bool
    running: bool
    pod_class: PodClass | None = None  # a workload pod's class and requests


def pod_info_from_dict(pod: Mapping[str, Any]) -> PodInfo:
    """A :class:`PodInfo` from a pod as JSON (the API's wire form)."""
    meta = pod.get("metadata") or {}
    owners = [str(o.get("kind", "")) for o in meta.get("ownerReferences") or []]
    phase = (pod.get("status") or {}).get("phase")
    workload = is_workload_pod(owners, meta.get("annotations"))
    return PodInfo(
        uid=str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
        workload=workload,
        running=phase == "Running",
        pod_class=class_of_pod(pod) if workload else None,
    )


class PodTable:
    """The pods on this node by uid; ``count`` is the number of running workload pods.

    >>> t = PodTable()
    >>> t.apply("ADDED", PodInfo("a", workload=True, running=False)), t.count
    (True, 0)
    >>> t.apply("MODIFIED", PodInfo("a", workload=True, running=True)), t.count
    (True, 1)
    >>> t.apply("MODIFIED", PodInfo("a", workload=True, running=True))
    False
    >>> t.apply("DELETED", PodInfo("a", workload=True, running=True)), t.count
    (True, 0)
    """

    def __init__(self) -> None:
        self._pods: dict[str, PodInfo] = {}

    @property
    def count(self) -> int:
        return sum(1 for p in self._pods.values() if p.workload and p.running)

    @property
    def classes(self) -> dict[str, PodClass]:
        """The running workload pods by uid, with their classes (a new dict: the caller's)."""
        return {
            uid: p.pod_class
            for uid, p in self._pods.items()
            if p.workload and p.running and p.pod_class is not None
        }

    def replace(self, pods: Iterable[PodInfo]) -> bool:
        """Reset from a full list (start, or a relist after the watch expired); True if changed."""
        new = {p.uid: p for p in pods}
        changed = _workload_view(new) != _workload_view(self._pods)
        self._pods = new
        return changed

    def apply(self, event_type: str, pod: PodInfo) -> bool:
        """Apply a watch event; True when a workload pod appeared, left, or changed running state
        or class (a controller adopting a bare pod)."""
        old = self._pods.get(pod.uid)
        if event_type == "DELETED":
            self._pods.pop(pod.uid, None)
            return old is not None and old.workload
        if event_type not in ("ADDED", "MODIFIED"):
            raise ValueError(f"unknown pod event type {event_type!r}")
        self._pods[pod.uid] = pod
        if not pod.workload and (old is None or not old.workload):
            return False
        return old != pod


def _workload_view(pods: Mapping[str, PodInfo]) -> dict[str, tuple[bool, PodClass | None]]:
    return {uid: (p.running, p.pod_class) for uid, p in pods.items() if p.workload}
