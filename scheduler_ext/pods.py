"""Which pods Carico leaves alone, and the few facts about a pod the extender keeps.

Design: docs/architecture.md#decisions.

Pods that must never be blocked by measured capacity pass every decision untouched: DaemonSet pods
(they belong on every node by design), static/mirror pods (the kubelet runs them whatever the
scheduler says), pods of the critical priority classes, pods in excluded namespaces, and pods of
scheduler profiles Carico does not manage (kube-scheduler calls an extender for the pods of every
profile, so a ``default-scheduler`` pod reaches it too and must pass through). Pure logic:
no I/O, no clock. Neighbours: ``wire`` (decoded pods), ``decisions`` and ``ledger`` (users).
"""

from __future__ import annotations

from dataclasses import dataclass

from carico.pods import (
    CRITICAL_PRIORITY_CLASSES,
    DEFAULT_EXCLUDED_NAMESPACES,
    DEFAULT_MANAGED_SCHEDULERS,
    DEFAULT_SCHEDULER,
    is_mirror,
    node_bound_reason,
)
from scheduler_ext import wire


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the extender needs to know about a pod, from the API or from a request."""

    namespace: str
    name: str
    uid: str = ""
    owner_kinds: tuple[str, ...] = ()
    mirror: bool = False
    priority_class: str = ""
    scheduler: str = ""  # spec.schedulerName; "" when unknown (a bind of a pod never filtered)
    owner_uid: str = ""  # uid of the controlling owner (repack plan slots match replacements by it)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def facts_from_wire(pod: wire.Pod) -> PodFacts:
    meta = pod.metadata or wire.ObjectMeta()
    spec = pod.spec or wire.PodSpec()
    annotations = meta.annotations or {}
    owners = meta.ownerReferences or ()
    controller = next((ref for ref in owners if ref.controller), None)
    return PodFacts(
        namespace=meta.namespace or "default",
        name=meta.name,
        uid=meta.uid,
        owner_kinds=tuple(ref.kind for ref in meta.ownerReferences or ()),
        mirror=is_mirror(annotations, [ref.kind for ref in owners]),
        priority_class=spec.priorityClassName or "",
        scheduler=spec.schedulerName or DEFAULT_SCHEDULER,
        owner_uid=controller.uid if controller is not None else "",
    )


@dataclass(frozen=True)
class ExemptionPolicy:
    """The configurable part of the exemption rule: excluded namespaces and managed schedulers.

    ``managed_schedulers`` empty means every scheduler profile is managed. A pod whose scheduler is
    unknown ("", as for a bind of a pod no filter call described) is treated as managed: reserving
    for a pod that needed none costs one unit until the watch releases it, while letting a managed
    pod through unreserved could over-commit the node.
    """

    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES
    managed_schedulers: frozenset[str] = DEFAULT_MANAGED_SCHEDULERS

    def reason(self, pod: PodFacts) -> str | None:
        """Why ``pod`` is exempt from capacity decisions, or None when it is not."""
        if (
            pod.scheduler
            and self.managed_schedulers
            and pod.scheduler not in self.managed_schedulers
        ):
            return f"scheduler {pod.scheduler} is not managed by Carico"
        bound = node_bound_reason(pod.owner_kinds, pod.mirror)
        if bound is not None:
            return bound
        if pod.priority_class in CRITICAL_PRIORITY_CLASSES:
            return f"priority class {pod.priority_class}"
        if pod.namespace in self.excluded_namespaces:
            return f"namespace {pod.namespace} is excluded"
        return None
