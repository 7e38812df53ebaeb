"""May a pod be placed on a node? The node-level filters of kube-scheduler the repacker honours.

nodeSelector, required node affinity (matchExpressions and matchFields, terms ORed), taints with
effect NoSchedule/NoExecute against tolerations, and cordoned (unschedulable) nodes. Resource fit
is not checked here; the model and the checker do that. The checker has its own implementation of
the same rules on purpose, so that a bug here cannot hide a bad plan.
"""

from __future__ import annotations

from repack.problem.snapshot import Node, Pod, Requirement, Taint, Toleration

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def requirement_matches(req: Requirement, node: Node) -> bool:
    if req.field:
        value: str | None = node.name if req.key == "metadata.name" else None
    else:
        value = node.labels.get(req.key)
    if req.operator == "In":
        return value is not None and value in req.values
    if req.operator == "NotIn":
        return value is None or value not in req.values
    if req.operator == "Exists":
        return value is not None
    if req.operator == "DoesNotExist":
        return value is None
    if req.operator in {"Gt", "Lt"}:
        if value is None or len(req.values) != 1:
            return False
        try:
            have, bound = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > bound if req.operator == "Gt" else have < bound
    return False


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


def eligible(pod: Pod, node: Node) -> bool:
    """True when kube-scheduler's node-level filters would let ``pod`` onto ``node``."""
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return False
    if pod.affinity is not None and not any(
        term and all(requirement_matches(r, node) for r in term) for term in pod.affinity
    ):
        return False
    for taint in node.taints:
        if taint.effect in {"NoSchedule", "NoExecute"} and not any(
            tolerates(t, taint) for t in pod.tolerations
        ):
            return False
    return not node.unschedulable or any(tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations)
