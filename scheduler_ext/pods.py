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

from collections.abc import Iterable
from dataclasses import dataclass

from carico.names import label_problem, subdomain_problem, uid_problem
from carico.pods import (
    CRITICAL_PRIORITY_CLASSES,
    DAEMONSET,
    DEFAULT_EXCLUDED_NAMESPACES,
    DEFAULT_MANAGED_SCHEDULERS,
    DEFAULT_SCHEDULER,
    ContainerResources,
    Requests,
    is_mirror,
    node_bound_reason,
    pod_requests,
    workload_class,
)
from scheduler_ext import wire

# The owner kinds the rules look at. A request's pod may list any number of owners: the facts
# keep these, and a few others of sane length, so that what is remembered of a pod stays small.
RULE_OWNER_KINDS = frozenset({DAEMONSET, "Node"})
MAX_OWNER_KINDS = 8
MAX_KIND = 63


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
    workload_class: str = ""  # carico.pods.workload_class ("" when unknown: a bare bind)
    requests: Requests = Requests()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _owner_kinds(owners: Iterable[wire.OwnerReference]) -> tuple[str, ...]:
    kinds = dict.fromkeys(ref.kind for ref in owners)
    if len(kinds) <= MAX_OWNER_KINDS and all(len(k) <= MAX_KIND for k in kinds):
        return tuple(kinds)
    ruled = [k for k in kinds if k in RULE_OWNER_KINDS]
    others = [k for k in kinds if k not in RULE_OWNER_KINDS and len(k) <= MAX_KIND]
    return (*ruled, *others[: MAX_OWNER_KINDS - len(ruled)])


def _containers(items: list[wire.Container] | None) -> list[ContainerResources]:
    out = []
    for c in items or ():
        res = c.resources or wire.ResourceRequirements()
        out.append(
            ContainerResources(
                {k: str(v) for k, v in (res.requests or {}).items()},
                {k: str(v) for k, v in (res.limits or {}).items()},
                sidecar=c.restartPolicy == "Always",
            )
        )
    return out


def facts_from_wire(pod: wire.Pod, *, strict: bool = True) -> PodFacts:
    """The facts of a pod in a request or from the API.

    A resource quantity that is not one raises ValueError when ``strict`` (a request the
    extender must refuse); otherwise (objects from the API server, which validates them) the pod
    is classed as if it requested nothing.
    """
    meta = pod.metadata or wire.ObjectMeta()
    spec = pod.spec or wire.PodSpec()
    annotations = meta.annotations or {}
    owners = meta.ownerReferences or ()
    controller = next((ref for ref in owners if ref.controller), None)
    namespace = meta.namespace or "default"
    containers = _containers(spec.containers)
    overhead = {k: str(v) for k, v in (spec.overhead or {}).items()}
    owner = (controller.kind, controller.name) if controller is not None else None
    try:
        klass = workload_class(namespace, owner, meta.labels, containers)
        requests = pod_requests(containers, _containers(spec.initContainers), overhead)
    except ValueError:
        if strict:
            raise
        klass, requests = workload_class(namespace, owner, meta.labels, []), Requests()
    return PodFacts(
        namespace=namespace,
        name=meta.name,
        uid=meta.uid,
        owner_kinds=_owner_kinds(owners),
        mirror=is_mirror(annotations, [ref.kind for ref in owners]),
        priority_class=spec.priorityClassName or "",
        scheduler=spec.schedulerName or DEFAULT_SCHEDULER,
        owner_uid=controller.uid if controller is not None else "",
        workload_class=klass,
        requests=requests,
    )


def facts_problem(pod: PodFacts) -> str | None:
    """Why a pod described by a request cannot exist in a cluster (a name, namespace or uid
    Kubernetes would refuse), or None: what the extender remembers of it stays small."""
    return (
        subdomain_problem(pod.name, "pod name")
        or label_problem(pod.namespace, "pod namespace")
        or uid_problem(pod.uid, "pod uid")
        or uid_problem(pod.owner_uid, "owner uid")
        or (pod.priority_class and subdomain_problem(pod.priority_class, "priority class"))
        or (pod.scheduler and subdomain_problem(pod.scheduler, "scheduler name"))
        or None
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
