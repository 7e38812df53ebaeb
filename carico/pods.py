"""The Kubernetes pod rules every part of Carico applies, in one place.

Design: docs/architecture.md#pod-counting.

The agent counts a node's *workload* pods, the extender decides which pods capacity may block,
and the repacker decides which pods may move; all three must agree on what a DaemonSet pod, a
static (mirror) pod, the default excluded namespace and the default scheduler are, so those
rules live here and nowhere else. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

# The kubelet marks the API copy of a static pod with this annotation (its owner is the Node).
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DAEMONSET = "DaemonSet"
# Namespaces whose pods Carico never blocks, counts against capacity decisions or moves.
DEFAULT_EXCLUDED_NAMESPACES: frozenset[str] = frozenset({"kube-system"})
# What the API server fills in when a pod names no scheduler.
DEFAULT_SCHEDULER = "default-scheduler"
# The scheduler profile the shipped configuration gives Carico.
DEFAULT_MANAGED_SCHEDULERS: frozenset[str] = frozenset({"carico-scheduler"})
CRITICAL_PRIORITY_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})


def is_mirror(annotations: Mapping[str, str] | None, owner_kinds: Collection[str] = ()) -> bool:
    """True for the API copy of a static pod: the mirror annotation, or owned by its Node.

    >>> is_mirror({MIRROR_ANNOTATION: "abc"}), is_mirror({}, ["Node"]), is_mirror(None)
    (True, True, False)
    """
    return bool(annotations and MIRROR_ANNOTATION in annotations) or "Node" in owner_kinds


def node_bound_reason(owner_kinds: Collection[str], mirror: bool) -> str | None:
    """Why a pod runs on its node whatever the scheduler says, or None for a workload pod.

    DaemonSet pods belong on every node by design and static pods are run by the kubelet itself:
    neither is placed by a scheduler, so neither counts as a workload pod, is blocked by capacity
    or is moved by a repack.

    >>> node_bound_reason(["ReplicaSet"], False) is None
    True
    >>> node_bound_reason(["DaemonSet"], False), node_bound_reason([], True)
    ('owned by a DaemonSet', 'static (mirror) pod')
    """
    if DAEMONSET in owner_kinds:
        return "owned by a DaemonSet"
    if mirror:
        return "static (mirror) pod"
    return None


def is_workload_pod(owner_kinds: Collection[str], annotations: Mapping[str, str] | None) -> bool:
    """A pod a scheduler placed: not a DaemonSet pod, not a static (mirror) pod.

    >>> is_workload_pod(["ReplicaSet"], {}), is_workload_pod(["DaemonSet"], None)
    (True, False)
    >>> is_workload_pod([], {MIRROR_ANNOTATION: "abc"}), is_workload_pod(["Node"], None)
    (False, False)
    """
    return node_bound_reason(owner_kinds, is_mirror(annotations, owner_kinds)) is None
