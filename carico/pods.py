"""The Kubernetes pod rules every part of Carico applies, in one place.

Design: docs/architecture.md#pod-counting.

The agent counts a node's *workload* pods, the extender decides which pods capacity may block,
and the repacker decides which pods may move; all three must agree on what a DaemonSet pod, a
static (mirror) pod, the default excluded namespace and the default scheduler are, so those
rules live here and nowhere else. Pure: no I/O, no clock.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

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


# -- requests and workload classes ------------------------------------------------------------

# A Kubernetes quantity: a decimal number, then an exponent or a suffix. Parsed here rather than
# with the Kubernetes client's parse_quantity so that the core (and the agent's hot path) does not
# load that client for one function.
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))([eE][+-]?\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024**i) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)},
}


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes resource quantity as a Decimal in its base unit (cores, bytes).

    >>> str(parse_quantity("500m")), str(parse_quantity("1.5")), str(parse_quantity("2Ki"))
    ('0.500', '1.5', '2048')
    >>> str(parse_quantity("1e3")), str(parse_quantity("1E")), str(parse_quantity(3))
    ('1E+3', '1E+18', '3')
    >>> str(parse_quantity("1e3m"))  # an exponent and a suffix, as the Kubernetes client reads it
    '1'

    >>> parse_quantity("1 Gi")
    Traceback (most recent call last):
    ...
    ValueError: invalid quantity '1 Gi'
    """
    if isinstance(value, str):
        return _parse_text(value) if len(value) <= MAX_CACHED_QUANTITY else _parse(value, value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"invalid quantity {value!r}")
    return _parse(str(value).strip(), value)


# Every pod the extender decides, and every pod event, parses its quantities: they repeat
# ("100m", "64Mi"), and the regex and Decimal arithmetic were a third of a bare pod's class.
# Short texts only, so that the cache stays small whatever requests bring.
MAX_CACHED_QUANTITY = 64


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal:
    return _parse(text, text)


def _parse(text: str, value: object) -> Decimal:
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"invalid quantity {value!r}")
    number, exponent, suffix = match.groups()
    amount = Decimal(number)
    if exponent:
        amount = amount.scaleb(int(exponent[1:]))
    amount *= _SUFFIX[suffix or ""]
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"invalid quantity {value!r}")
    return amount


@dataclass(frozen=True, slots=True)
class Requests:
    """A pod's CPU (cores) and memory (bytes) requests, summed as kube-scheduler sums them."""

    cpu: float = 0.0
    memory: float = 0.0


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """One container's ``resources``: requests and limits by resource name, as quantity strings."""

    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    sidecar: bool = False  # an init container with restartPolicy Always


def _amounts(quantities: Mapping[str, str]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name in ("cpu", "memory"):
        if name in quantities:
            out[name] = parse_quantity(quantities[name])
    return out


def pod_requests(
    containers: Sequence[ContainerResources],
    init_containers: Sequence[ContainerResources] = (),
    overhead: Mapping[str, str] | None = None,
) -> Requests:
    """CPU and memory requests the way kube-scheduler counts them.

    Per resource: the sum over containers and sidecars (restartable init containers), or the
    largest ordinary init container together with the sidecars started before it, whichever is
    larger; then the pod overhead.

    >>> app = ContainerResources({"cpu": "250m", "memory": "64Mi"})
    >>> init = ContainerResources({"cpu": "1"})
    >>> pod_requests([app, app], [init], {"cpu": "100m"})
    Requests(cpu=1.1, memory=134217728.0)
    """
    total = {"cpu": Decimal(0), "memory": Decimal(0)}
    for container in containers:
        for name, amount in _amounts(container.requests).items():
            total[name] += amount
    sidecars = {"cpu": Decimal(0), "memory": Decimal(0)}
    peak = {"cpu": Decimal(0), "memory": Decimal(0)}
    for container in init_containers:
        amounts = _amounts(container.requests)
        for name in total:
            amount = amounts.get(name, Decimal(0))
            if container.sidecar:
                total[name] += amount
                sidecars[name] += amount
                peak[name] = max(peak[name], sidecars[name])
            else:
                peak[name] = max(peak[name], amount + sidecars[name])
    for name, amount in _amounts(overhead or {}).items():
        total[name] = max(total[name], peak[name]) + amount
        peak[name] = Decimal(0)
    return Requests(
        float(max(total["cpu"], peak["cpu"])), float(max(total["memory"], peak["memory"]))
    )


# The label the Deployment controller puts on the pods of each of its ReplicaSets; the ReplicaSet
# is named <deployment>-<hash>.
TEMPLATE_HASH_LABEL = "pod-template-hash"
# A class name longer than this (a bare pod with very many containers) is shortened to a digest.
MAX_CLASS_NAME = 320
# A report lists at most this many pods that began to count on its node (a node runs at most a few
# hundred pods, and only the last half minute's starts are listed), each uid at most MAX_UID long
# (a Kubernetes uid is a 36-character UUID).
MAX_COUNTED_PODS = 256
MAX_UID = 128
# More free pods than any node holds (kubelet's max-pods tops out far lower): the agent sends no
# more than this, and the extender takes a larger avail as this (an older agent's one-cost
# estimate could run away; docs/architecture.md#report-cadence).
MAX_AVAIL = 1e6


def workload_class(
    namespace: str,
    controller: tuple[str, str] | None,
    labels: Mapping[str, str] | None,
    containers: Sequence[ContainerResources],
) -> str:
    """The workload class of a pod: the unit per-pod costs are learned in.

    Pods of one controller share a class, ``<namespace>/<Kind>/<name>``; the pods of a
    Deployment's successive ReplicaSets are one class (the ReplicaSet's template-hash suffix is
    dropped). A pod without a controller is classed by what it asks for: its containers' requests
    and limits, whatever its namespace or name, so bare pods of the same size learn together.
    The agent and the extender both call this, so they always agree on a pod's class
    (docs/architecture.md#cost-and-capacity).

    >>> workload_class("ml", ("Job", "train-7"), {}, [])
    'ml/Job/train-7'
    >>> workload_class("web", ("ReplicaSet", "shop-5d8f9"), {"pod-template-hash": "5d8f9"}, [])
    'web/Deployment/shop'
    >>> workload_class("x", None, None, [ContainerResources({"cpu": "100m"}, {"memory": "1Gi"})])
    'bare/requests cpu=0.1/limits memory=1073741824'
    """
    if controller is not None and controller[0] and controller[1]:
        kind, name = controller
        template_hash = (labels or {}).get(TEMPLATE_HASH_LABEL, "")
        if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
            kind, name = "Deployment", name[: -len(template_hash) - 1]
        return f"{namespace}/{kind}/{name}"
    parts = []
    for label, pick in (("requests", "requests"), ("limits", "limits")):
        total: dict[str, Decimal] = {}
        for container in containers:
            for res, amount in _amounts(getattr(container, pick)).items():
                total[res] = total.get(res, Decimal(0)) + amount
        if total:
            text = " ".join(f"{res}={_plain(total[res])}" for res in sorted(total))
            parts.append(f"{label} {text}")
    name = "bare/" + ("/".join(parts) if parts else "best-effort")
    if len(name) > MAX_CLASS_NAME:
        name = "bare/" + hashlib.sha256(name.encode()).hexdigest()[:16]
    return name


def _plain(amount: Decimal) -> str:
    """A Decimal without exponent or trailing zeros: 0.1, 1073741824."""
    text = format(amount.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def owner_controller(owners: Sequence[Mapping[str, Any]] | None) -> tuple[str, str] | None:
    """The (kind, name) of the controlling owner reference in a pod's JSON, if any."""
    for ref in owners or ():
        if ref.get("controller"):
            return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return None


def containers_of(spec: Mapping[str, Any], key: str = "containers") -> list[ContainerResources]:
    """The containers (or ``initContainers``) of a pod spec in JSON, as ContainerResources."""
    out = []
    for container in spec.get(key) or ():
        if not isinstance(container, Mapping):
            continue
        resources = container.get("resources") or {}
        out.append(
            ContainerResources(
                dict(resources.get("requests") or {}),
                dict(resources.get("limits") or {}),
                sidecar=container.get("restartPolicy") == "Always",
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class PodClass:
    """A pod's workload class and its requests (the prior for a class never measured)."""

    name: str
    requests: Requests


def class_of_pod(pod: Mapping[str, Any]) -> PodClass:
    """Workload class and requests of a pod given as the API's JSON (a dict)."""
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    spec: Mapping[str, Any] = pod.get("spec") or {}
    containers = containers_of(spec)
    name = workload_class(
        str(meta.get("namespace") or "default"),
        owner_controller(meta.get("ownerReferences")),
        meta.get("labels"),
        containers,
    )
    try:
        inits = containers_of(spec, "initContainers")
        requests = pod_requests(containers, inits, spec.get("overhead"))
    except ValueError:
        requests = Requests()  # the API server never stores a bad quantity; a test might
    return PodClass(name, requests)
