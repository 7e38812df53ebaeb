"""Which pods Carico leaves alone, and the few facts about a pod the extender keeps (DESIGN §4.2).

Pods that must never be blocked by measured capacity pass every decision untouched: DaemonSet pods
(they belong on every node by design), static/mirror pods (the kubelet runs them whatever the
scheduler says), pods of the critical priority classes, and pods in excluded namespaces. Pure logic:
no I/O, no clock. Neighbours: ``wire`` (decoded pods), ``decisions`` and ``ledger`` (users).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_ext import wire

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CRITICAL_PRIORITY_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})
DEFAULT_EXCLUDED_NAMESPACES = ("kube-system",)


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the extender needs to know about a pod, from the API or from a request."""

    namespace: str
    name: str
    uid: str = ""
    owner_kinds: tuple[str, ...] = ()
    mirror: bool = False
    priority_class: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def facts_from_wire(pod: wire.Pod) -> PodFacts:
    meta = pod.metadata or wire.ObjectMeta()
    spec = pod.spec or wire.PodSpec()
    annotations = meta.annotations or {}
    return PodFacts(
        namespace=meta.namespace or "default",
        name=meta.name,
        uid=meta.uid,
        owner_kinds=tuple(ref.kind for ref in meta.ownerReferences or ()),
        mirror=MIRROR_ANNOTATION in annotations,
        priority_class=spec.priorityClassName or "",
    )


@dataclass(frozen=True)
class ExemptionPolicy:
    """The configurable part of the exemption rule: which namespaces are excluded."""

    excluded_namespaces: frozenset[str] = frozenset(DEFAULT_EXCLUDED_NAMESPACES)

    def reason(self, pod: PodFacts) -> str | None:
        """Why ``pod`` is exempt from capacity decisions, or None when it is not."""
        if "DaemonSet" in pod.owner_kinds:
            return "owned by a DaemonSet"
        if pod.mirror:
            return "static (mirror) pod"
        if pod.priority_class in CRITICAL_PRIORITY_CLASSES:
            return f"priority class {pod.priority_class}"
        if pod.namespace in self.excluded_namespaces:
            return f"namespace {pod.namespace} is excluded"
        return None
