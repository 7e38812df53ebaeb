"""The cluster snapshot the repacker solves on, and its parser from Kubernetes JSON.

A snapshot is nodes, pods and PodDisruptionBudgets reduced to what placement needs: integer
resource amounts (cpu in millicores, memory and other byte quantities in bytes, everything else in
units), labels, taints, selectors and whether a running pod may be moved at all. ``parse_list``
reads what ``kubectl get nodes,pods,poddisruptionbudgets -A -o json`` prints. Eligibility of a pod
on a node lives in ``eligibility``; the solver in ``solver``. No I/O here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from carico.pods import DAEMONSET, DEFAULT_EXCLUDED_NAMESPACES, is_mirror, parse_quantity

DO_NOT_MOVE_ANNOTATION = "carico.io/do-not-move"

Resources = dict[str, int]


class SnapshotError(ValueError):
    """The input cannot be turned into a snapshot (malformed JSON objects or quantities)."""


# The largest quantity taken, in a resource's unit (2**50: a pebibyte, a million million cores):
# far above any node, and low enough that the solver's 64-bit sums over thousands of pods and
# nodes cannot overflow.
MAX_QUANTITY = 2**50
# Kubernetes priorities are 32-bit integers.
PRIORITY_RANGE = range(-(2**31), 2**31)


def parse_resource_quantity(resource: str, value: object) -> int:
    """A Kubernetes quantity as an integer in the resource's unit, rounded up like the API does.

    cpu is counted in millicores, everything else in its base unit (bytes for memory).

    >>> parse_resource_quantity("cpu", "500m"), parse_resource_quantity("cpu", "1.5")
    (500, 1500)
    >>> parse_resource_quantity("memory", "1Gi"), parse_resource_quantity("memory", "1e3")
    (1073741824, 1000)
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise SnapshotError(f"{resource}: quantity {value!r} is not a string or number")
    try:
        # every suffix (m, k, Ki, M, Mi, E, e notation), as the agent and the extender read them
        amount: Decimal = parse_quantity(value)
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise SnapshotError(f"{resource}: invalid quantity {value!r}") from exc
    if not amount.is_finite() or amount < 0:
        raise SnapshotError(f"{resource}: invalid quantity {value!r}")
    if resource == "cpu":
        amount = amount * 1000
    if amount > MAX_QUANTITY:
        raise SnapshotError(f"{resource}: quantity {value!r} is larger than any node has")
    return math.ceil(amount)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" matches every effect


@dataclass(frozen=True)
class Requirement:
    """One node selector requirement: ``key operator values`` (In, NotIn, Exists, DoesNotExist,
    Gt, Lt). ``field`` is True for matchFields (only ``metadata.name`` exists)."""

    key: str
    operator: str
    values: tuple[str, ...]
    field: bool = False


# Required node affinity: a list of terms (OR), each a tuple of requirements (AND).
AffinityTerms = tuple[tuple[Requirement, ...], ...]


@dataclass(frozen=True)
class Node:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


@dataclass(frozen=True)
class Pod:
    """A pod. ``node`` is None for a pending pod; ``immovable`` says why a bound pod must stay
    ("" when it may be moved)."""

    namespace: str
    name: str
    requests: Mapping[str, int]
    priority: int = 0
    node: str | None = None
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    owner: str = ""  # "Kind/name" of the controller, "" for a bare pod
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: AffinityTerms | None = None  # None: no required node affinity
    tolerations: tuple[Toleration, ...] = ()
    immovable: str = ""
    pdbs: tuple[str, ...] = ()  # "namespace/name" of the PDBs that select this pod

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        return self.node is None


@dataclass(frozen=True)
class Pdb:
    namespace: str
    name: str
    disruptions_allowed: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Snapshot:
    """Nodes, bound pods (``node`` set) and pending pods, plus the PDBs that cover them."""

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    pdbs: tuple[Pdb, ...] = ()

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise SnapshotError("duplicate node names")
        keys = [p.key for p in self.pods]
        if len(set(keys)) != len(keys):
            raise SnapshotError("duplicate pods (namespace/name)")

    @property
    def resources(self) -> tuple[str, ...]:
        """Every resource any pod requests (always including ``pods``), sorted."""
        names = {"pods"}
        for pod in self.pods:
            names.update(r for r, v in pod.requests.items() if v > 0)
        return tuple(sorted(names))

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def pdb(self, key: str) -> Pdb:
        for pdb in self.pdbs:
            if pdb.key == key:
                return pdb
        raise KeyError(key)


# --- request summing --------------------------------------------------------------------------


def _add(into: Resources, more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + amount


def _max_into(into: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, 0), amount)


def _container_requests(container: Mapping[str, Any]) -> Resources:
    resources = container.get("resources") or {}
    raw = resources.get("requests") or {}
    if not isinstance(raw, Mapping):
        raise SnapshotError(f"container {container.get('name')!r}: requests is not an object")
    return {str(k): parse_resource_quantity(str(k), v) for k, v in raw.items()}


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """Requests of a pod the way kube-scheduler counts them, plus ``pods: 1``.

    Per resource: the sum over containers and restartable (sidecar) init containers, or the
    largest single init container together with the sidecars started before it, whichever is
    larger; then the pod overhead is added.
    """
    total: Resources = {}
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        reqs = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, reqs)
            _add(sidecars, reqs)
            _max_into(init_peak, sidecars)
        else:
            during = dict(reqs)
            _add(during, sidecars)
            _max_into(init_peak, during)
    _max_into(total, init_peak)
    overhead = spec.get("overhead") or {}
    _add(total, {str(k): parse_resource_quantity(str(k), v) for k, v in overhead.items()})
    total["pods"] = 1
    return {k: v for k, v in total.items() if v > 0}


# --- selectors --------------------------------------------------------------------------------


def _requirements(raw: Iterable[Mapping[str, Any]], is_field: bool) -> list[Requirement]:
    out = []
    for expr in raw:
        operator = str(expr.get("operator", ""))
        if operator not in {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}:
            raise SnapshotError(f"unknown node selector operator {operator!r}")
        values = tuple(str(v) for v in expr.get("values") or [])
        out.append(Requirement(str(expr.get("key", "")), operator, values, is_field))
    return out


def _affinity(spec: Mapping[str, Any]) -> AffinityTerms | None:
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is None:
        return None
    terms = []
    for term in required.get("nodeSelectorTerms") or []:
        reqs = _requirements(term.get("matchExpressions") or [], False)
        reqs += _requirements(term.get("matchFields") or [], True)
        terms.append(tuple(reqs))
    return tuple(terms)


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels AND matchExpressions. None selects nothing, {} all."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = set(expr.get("values") or [])
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


# --- parsing ----------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise SnapshotError(f"{obj.get('kind', 'object')} without metadata.name")
    return meta


def parse_node(obj: Mapping[str, Any]) -> Node:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    return Node(
        name=str(meta["name"]),
        allocatable={str(k): parse_resource_quantity(str(k), v) for k, v in allocatable.items()},
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        taints=tuple(
            Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
            for t in spec.get("taints") or []
        ),
        unschedulable=bool(spec.get("unschedulable", False)),
    )


def _movability(meta: Mapping[str, Any], owner_kind: str, excluded: frozenset[str]) -> str:
    annotations = meta.get("annotations") or {}
    if str(annotations.get(DO_NOT_MOVE_ANNOTATION, "")).lower() not in {"", "false"}:
        return "do-not-move"
    if is_mirror(annotations, (owner_kind,)):
        return "mirror"
    if owner_kind == DAEMONSET:
        return "daemonset"
    if not owner_kind:
        return "bare"
    if meta.get("namespace", "default") in excluded:
        return "excluded-namespace"
    if meta.get("deletionTimestamp"):
        return "terminating"
    return ""


def parse_pod(obj: Mapping[str, Any], excluded: frozenset[str]) -> Pod | None:
    """A pod, or None when it holds no resources and cannot be scheduled (finished, gated)."""
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    phase = status.get("phase", "Pending")
    if phase in {"Succeeded", "Failed"}:
        return None
    node = spec.get("nodeName") or None
    if node is None and (spec.get("schedulingGates") or meta.get("deletionTimestamp")):
        return None
    owners = meta.get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    owner_kind = str(controller.get("kind", "")) if controller else ""
    owner = f"{owner_kind}/{controller.get('name', '')}" if controller else ""
    try:
        priority = int(spec.get("priority") or 0)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SnapshotError(f"pod {meta['name']}: priority is not an integer") from exc
    if priority not in PRIORITY_RANGE:
        raise SnapshotError(f"pod {meta['name']}: priority {priority} is not a 32-bit integer")
    return Pod(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta["name"]),
        requests=pod_requests(spec),
        priority=priority,
        node=str(node) if node else None,
        uid=str(meta.get("uid", "")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        owner=owner,
        node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
        affinity=_affinity(spec),
        tolerations=tuple(
            Toleration(
                str(t.get("key", "")),
                str(t.get("operator") or "Equal"),
                str(t.get("value", "")),
                str(t.get("effect", "")),
            )
            for t in spec.get("tolerations") or []
        ),
        immovable=_movability(meta, owner_kind, excluded),
    )


def parse_list(
    document: Mapping[str, Any], excluded_namespaces: Iterable[str] = DEFAULT_EXCLUDED_NAMESPACES
) -> Snapshot:
    """A snapshot from a Kubernetes ``List`` (or any object with ``items``) of Nodes, Pods, PDBs.

    Other kinds are ignored. A pod selected by a PDB that allows no disruption right now is
    immovable ("pdb"); the PDBs of every pod are recorded so a plan can respect their budgets.
    """
    if not isinstance(document, Mapping) or not isinstance(document.get("items"), list):
        raise SnapshotError("expected a Kubernetes List object with an 'items' array")
    excluded = frozenset(excluded_namespaces)
    nodes: list[Node] = []
    pods: list[Pod] = []
    raw_pdbs: list[tuple[Pdb, Mapping[str, Any] | None]] = []
    for i, item in enumerate(document["items"]):
        if not isinstance(item, Mapping):
            raise SnapshotError("List item is not an object")
        kind = item.get("kind")
        try:
            if kind == "Node":
                nodes.append(parse_node(item))
            elif kind == "Pod":
                pod = parse_pod(item, excluded)
                if pod is not None:
                    pods.append(pod)
            elif kind == "PodDisruptionBudget":
                meta = _meta(item)
                allowed = int((item.get("status") or {}).get("disruptionsAllowed") or 0)
                pdb = Pdb(str(meta.get("namespace", "default")), str(meta["name"]), allowed)
                raw_pdbs.append((pdb, (item.get("spec") or {}).get("selector")))
        except (TypeError, AttributeError, KeyError, IndexError, OverflowError) as exc:
            # The objects' shapes are checked as they are read, not by a schema up front: a
            # field of the wrong type surfaces here, and is the input's fault.
            raise SnapshotError(
                f"item {i} ({str(kind)[:40]}): a field has the wrong type or is missing: {exc!r}"
            ) from None
    try:
        pods = [_with_pdbs(pod, raw_pdbs) for pod in pods]
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        raise SnapshotError(f"a PodDisruptionBudget's selector is malformed: {exc!r}") from None
    return Snapshot(tuple(nodes), tuple(pods), tuple(p for p, _ in raw_pdbs))


def _with_pdbs(pod: Pod, raw_pdbs: Sequence[tuple[Pdb, Mapping[str, Any] | None]]) -> Pod:
    covering = [
        pdb
        for pdb, selector in raw_pdbs
        if pdb.namespace == pod.namespace and label_selector_matches(selector, pod.labels)
    ]
    if not covering:
        return pod
    immovable = pod.immovable
    if not immovable and any(p.disruptions_allowed <= 0 for p in covering):
        immovable = "pdb"
    return Pod(
        **{
            **pod.__dict__,
            "pdbs": tuple(sorted(p.key for p in covering)),
            "immovable": immovable,
        }
    )
