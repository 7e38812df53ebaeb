"""Validation of the models nodes send to the aggregator: pure, no I/O, no clock.

Design: docs/architecture.md#security.

Every ``LocalModel`` is checked here before it may reach the store: node name, weight, fleet-prior
costs, the learned class footprints, and the factor itself (dimensions, feature names, NaN/inf,
orthonormal U, σ descending and within range). A failure raises :class:`ValidationError` whose
message names the problem; the gRPC layer turns it into ``INVALID_ARGUMENT``. The checkpoint
loader reuses the same checks.

A sender's influence is bounded by what it can honestly claim (docs/architecture.md#aggregation):
a node is one node (weight 1, at most one per-pod cost); only a child aggregator this one was told
about (:class:`SenderPolicy`) stands for more, and for at most ``max_child_weight`` nodes, with at
most one cost per node; once the fleet's median cost is known, a cost more than
``COST_SPREAD`` times away from it is absurd and refused (:func:`cost_band`); and a sender names
each class at most once (one vote per class in the fleet's medians), a node at most
``MAX_CLASSES_PER_REPORT`` classes, a child aggregator at most ``MAX_FLEET_CLASSES``.

The aggregator validates thousands of models a second, so for the usual small factors (d·r ≤ 64)
the checks run as plain Python loops: for a 2×2 factor that is several times cheaper than the
fixed overhead of a handful of numpy calls, and the default two-feature full-rank factor has an
unrolled check of its own. Larger factors take the vectorised path; all paths apply the same
rules (tests compare them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Sequence
from dataclasses import dataclass
from math import isfinite
from operator import mul
from typing import NamedTuple

import numpy as np

from carico.footprint import MAX_CLASSES_PER_REPORT, ClassFootprint, Footprint
from carico.names import MAX_SUBDOMAIN, SUBDOMAIN, subdomain_problem
from carico.pods import MAX_CLASS_NAME, Requests
from carico.subspace import MAX_DIMS, ORTHONORMAL_ATOL
from protos.carico.v1 import aggregator_pb2, capacity_pb2

# Kubernetes node names are DNS-1123 subdomains (carico.names).
MAX_NODE_NAME = MAX_SUBDOMAIN
_NODE_NAME = SUBDOMAIN
MAX_FEATURE_NAME = 63
_FEATURE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")
# The range of --max-child-weight: far above any real fleet.
MAX_WEIGHT = 1_000_000
# What one child aggregator may stand for unless told otherwise: twice the largest cluster
# Kubernetes supports.
DEFAULT_MAX_CHILD_WEIGHT = 10_000
# Per-pod costs are in units of the capacity signal per pod; anything this large is a broken
# estimator, not a real workload.
MAX_PER_POD_COST = 1e6
# Once the fleet's median cost rests on this many costs, a cost more than COST_SPREAD times above
# or below it is refused: workloads differ between nodes by far less than three orders of
# magnitude, and the median must not be movable by a few senders' absurd values.
COST_SPREAD = 1000.0
MIN_FLEET_COSTS = 10
# The most classes the fleet's summary holds, and so what a child aggregator may send (its own
# per-class medians).
MAX_FLEET_CLASSES = 1024
# A class footprint (and what its pods request) above these is a broken sender, not a workload: no
# machine has 10,000 cores (the largest have a few hundred) or a petabyte of memory (tens of
# terabytes), and a pod cannot use or be given more than its node has.
MAX_CLASS_CPU = 10_000.0
MAX_CLASS_MEMORY = 1e15
LEARNED = "learned"  # the only source a sender may report: what its node (or its fleet) measured
# σ₁ ≤ √d holds exactly for data in [0,1]^d; allow rounding of the sender's SVD.
SIGMA_RANGE_RTOL = 1e-9
_SMALL_FACTOR = 64  # d·r up to which the pure-Python checks are used
fsum_plain = sum  # plain (not compensated) summation: the checks' tolerances are far above rounding


class ValidationError(ValueError):
    """A model or its envelope is malformed; the message says what is wrong."""


@dataclass(frozen=True)
class SenderPolicy:
    """Who may stand for more than one node: the child aggregators named here, each for at most
    ``max_child_weight`` nodes. Every other sender is one node."""

    children: frozenset[str] = frozenset()
    max_child_weight: int = DEFAULT_MAX_CHILD_WEIGHT


LEAVES_ONLY = SenderPolicy()
# The costs a fleet accepts, (low, high); None while the fleet's median is not known well enough.
CostBand = tuple[float, float] | None


def cost_band(median: float | None, costs_seen: int) -> CostBand:
    """The band of acceptable costs around the fleet's ``median`` of ``costs_seen`` costs."""
    if median is None or costs_seen < MIN_FLEET_COSTS or not median > 0:
        return None
    return median / COST_SPREAD, median * COST_SPREAD


class NodeEntry(NamedTuple):
    """One sender's latest model as the store keeps it (U row-major, d×r).

    A named tuple rather than a frozen dataclass: it is built on every exchange, and a frozen
    dataclass's ``__init__`` costs several times more.
    """

    node: str
    sequence: int
    sent_at: float  # sender's wall clock
    received_at: float  # aggregator's clock when it arrived
    weight: int  # nodes this model stands for
    d: int
    r: int
    u: tuple[float, ...]
    sigma: tuple[float, ...]
    per_pod_costs: tuple[float, ...]
    classes: tuple[ClassFootprint, ...] = ()  # the classes the sender learned (source learned)


def check_node_name(node: str, what: str = "node name") -> None:
    problem = subdomain_problem(node, what)
    if problem is not None:
        raise ValidationError(problem)


def check_feature_names(names: Sequence[str], d: int) -> tuple[str, ...]:
    """The feature names as a tuple, after checking there are ``d`` distinct well-formed ones."""
    result = tuple(names)
    if len(result) != d:
        raise ValidationError(f"model has d={d} but {len(result)} feature names")
    for name in result:
        if len(name) > MAX_FEATURE_NAME or _FEATURE_NAME.fullmatch(name) is None:
            raise ValidationError(
                f"feature name {name[:80]!r} is invalid (1-{MAX_FEATURE_NAME} characters: "
                "letters, digits, '_', '.', ':', '-')"
            )
    if len(set(result)) != d:
        raise ValidationError(f"feature names are not distinct: {list(result)}")
    return result


def check_factor(d: int, r: int, u: Sequence[float], sigma: Sequence[float]) -> None:
    """Check a row-major d×r factor U and its σ (shape, finiteness, orthonormality, σ range)."""
    if not 1 <= d <= MAX_DIMS:
        raise ValidationError(f"model dimension d={d} out of range 1..{MAX_DIMS}")
    if not 1 <= r <= d:
        raise ValidationError(f"model rank r={r} out of range 1..d={d}")
    if len(u) != d * r:
        raise ValidationError(f"U has {len(u)} values, expected d*r = {d}*{r} = {d * r}")
    if len(sigma) != r:
        raise ValidationError(f"sigma has {len(sigma)} values, expected r = {r}")
    if d == 2 and r == 2:
        _check_factor_2x2(u, sigma)
    elif d * r <= _SMALL_FACTOR:
        _check_factor_small(d, r, u, sigma)
    else:
        _check_factor_numpy(d, r, u, sigma)


_SQRT2_LIMIT = math.sqrt(2.0) * (1.0 + SIGMA_RANGE_RTOL)


def _check_factor_2x2(u: Sequence[float], sigma: Sequence[float]) -> None:
    """The default two-feature, full-rank case, unrolled: no loops, no temporaries.

    Whatever it does not accept outright goes through the general path, which decides and
    produces the detailed message.
    """
    a, b, c, e = u  # rows (a, b) and (c, e)
    s0, s1 = sigma
    if (
        isfinite(a + b + c + e + s0 + s1)
        and s0 >= 0.0
        and 0.0 <= s1 <= s0 + ORTHONORMAL_ATOL * (s0 if s0 > 1.0 else 1.0)
        and s0 <= _SQRT2_LIMIT
        and abs(a * a + c * c - 1.0) <= ORTHONORMAL_ATOL
        and abs(b * b + e * e - 1.0) <= ORTHONORMAL_ATOL
        and abs(a * b + c * e) <= ORTHONORMAL_ATOL
    ):
        return
    _check_factor_small(2, 2, u, sigma)


def _sigma_limit(d: int) -> float:
    return math.sqrt(d) * (1.0 + SIGMA_RANGE_RTOL)


def _check_factor_small(d: int, r: int, u: Sequence[float], sigma: Sequence[float]) -> None:
    # A sum is finite only if every term is (finite values large enough to overflow are not
    # orthonormal anyway), so one C-level sum replaces a Python loop over isfinite.
    if not isfinite(fsum_plain(u)):
        raise ValidationError("U contains NaN or inf")
    if not isfinite(fsum_plain(sigma)):
        raise ValidationError("sigma contains NaN or inf")
    if min(sigma) < 0.0:
        raise ValidationError(f"sigma must be non-negative, got {list(sigma)}")
    s0 = sigma[0]
    tolerance = ORTHONORMAL_ATOL * (s0 if s0 > 1.0 else 1.0)
    for k in range(1, r):
        if sigma[k] > sigma[k - 1] + tolerance:
            raise ValidationError(f"sigma must be in descending order, got {list(sigma)}")
    if s0 > _sigma_limit(d):
        raise ValidationError(
            f"sigma_1 = {s0:.6g} exceeds sqrt(d) = {math.sqrt(d):.6g}: "
            "telemetry in [0,1]^d cannot produce it"
        )
    columns = [u[i::r] for i in range(r)]
    for i in range(r):
        column = columns[i]
        for j in range(i, r):
            error = abs(fsum_plain(map(mul, column, columns[j])) - (1.0 if i == j else 0.0))
            if error > ORTHONORMAL_ATOL:
                raise ValidationError(
                    f"U is not orthonormal: |(U^T U)[{i},{j}] - I| = {error:.3g} "
                    f"(tolerance {ORTHONORMAL_ATOL:g})"
                )


def _check_factor_numpy(d: int, r: int, u: Sequence[float], sigma: Sequence[float]) -> None:
    u_arr = np.asarray(u, dtype=np.float64).reshape(d, r)
    s_arr = np.asarray(sigma, dtype=np.float64)
    if not np.all(np.isfinite(u_arr)):
        raise ValidationError("U contains NaN or inf")
    if not np.all(np.isfinite(s_arr)):
        raise ValidationError("sigma contains NaN or inf")
    if np.any(s_arr < 0):
        raise ValidationError(f"sigma must be non-negative, got {s_arr.tolist()}")
    if np.any(np.diff(s_arr) > ORTHONORMAL_ATOL * max(1.0, float(s_arr[0]))):
        raise ValidationError(f"sigma must be in descending order, got {s_arr.tolist()}")
    if s_arr[0] > _sigma_limit(d):
        raise ValidationError(
            f"sigma_1 = {s_arr[0]:.6g} exceeds sqrt(d) = {math.sqrt(d):.6g}: "
            "telemetry in [0,1]^d cannot produce it"
        )
    gram = np.abs(u_arr.T @ u_arr - np.eye(r))
    i, j = np.unravel_index(int(np.argmax(gram)), gram.shape)
    if gram[i, j] > ORTHONORMAL_ATOL:
        i, j = min(i, j), max(i, j)
        raise ValidationError(
            f"U is not orthonormal: |(U^T U)[{i},{j}] - I| = {gram[i, j]:.3g} "
            f"(tolerance {ORTHONORMAL_ATOL:g})"
        )


def check_weight(weight: int) -> int:
    """The number of nodes a model stands for; 0 (proto3's unset) means a single node."""
    if weight == 0:
        return 1
    if weight > MAX_WEIGHT:
        raise ValidationError(f"weight {weight} out of range 1..{MAX_WEIGHT}")
    return weight


def check_claim(node: str, weight: int, policy: SenderPolicy, classes: int = 0) -> None:
    """A weight above 1 only from a child aggregator of ``policy``, and within its bound; more
    than ``MAX_CLASSES_PER_REPORT`` classes only from a child, and at most ``MAX_FLEET_CLASSES``."""
    if classes > MAX_CLASSES_PER_REPORT:
        limit = MAX_FLEET_CLASSES if node in policy.children else MAX_CLASSES_PER_REPORT
        if classes > limit:
            who = "child aggregator" if node in policy.children else "node"
            raise ValidationError(f"{classes} classes: more than {limit} for a {who}")
    if weight <= 1:
        return
    if node not in policy.children:
        raise ValidationError(
            f"weight {weight}: a node is one node, and {node} is not a child aggregator of this "
            "one (--children)"
        )
    if weight > policy.max_child_weight:
        raise ValidationError(
            f"weight {weight} of child aggregator {node} is above --max-child-weight "
            f"{policy.max_child_weight}"
        )


def check_costs(costs: Sequence[float], weight: int, band: CostBand = None) -> tuple[float, ...]:
    if len(costs) > weight:
        raise ValidationError(
            f"{len(costs)} per-pod costs for a model standing for {weight} node(s)"
        )
    low, high = band if band is not None else (0.0, MAX_PER_POD_COST)
    for c in costs:
        if not (math.isfinite(c) and 0.0 < c <= MAX_PER_POD_COST):
            raise ValidationError(f"per-pod cost {c!r} is not in (0, {MAX_PER_POD_COST:g}]")
        if not low <= c <= high:
            raise ValidationError(
                f"per-pod cost {c:g} is absurd for this fleet: more than {COST_SPREAD:g} times "
                f"away from its median {(low * COST_SPREAD):g}"
            )
    return tuple(costs)


def check_class(
    name: str, source: str, cpu: float, memory: float, request_cpu: float, request_memory: float
) -> None:
    """One learned class footprint: a printable name, source learned, sane amounts."""
    if not name or len(name) > MAX_CLASS_NAME or not name.isprintable():
        raise ValidationError(
            f"class name {name[:80]!r} is invalid (1-{MAX_CLASS_NAME} printable characters)"
        )
    if source != LEARNED:
        raise ValidationError(f"class {name[:80]!r}: source {source[:20]!r} is not {LEARNED!r}")
    for what, value, high, unit in (
        ("cpu", cpu, MAX_CLASS_CPU, "cores"),
        ("memory", memory, MAX_CLASS_MEMORY, "bytes"),
        ("request cpu", request_cpu, MAX_CLASS_CPU, "cores"),
        ("request memory", request_memory, MAX_CLASS_MEMORY, "bytes"),
    ):
        if not 0.0 <= value <= high:  # NaN fails too
            raise ValidationError(
                f"class {name[:80]!r}: {what} {value:g} is not in [0, {high:g}] {unit}"
            )


# The pods of a class request the same on every node, so the requests of the classes held are
# few distinct values: sharing them saves an object per class and sender (and its construction, a
# third of a class's cost). Bounded: hostile senders can only make it start over.
_REQUESTS: dict[tuple[float, float], Requests] = {}
_MAX_SHARED_REQUESTS = 4096


def class_footprint(
    name: str, cpu: float, memory: float, samples: int, request_cpu: float, request_memory: float
) -> ClassFootprint:
    key = (request_cpu, request_memory)
    requests = _REQUESTS.get(key)
    if requests is None:
        if len(_REQUESTS) >= _MAX_SHARED_REQUESTS:
            _REQUESTS.clear()
        requests = _REQUESTS[key] = Requests(request_cpu, request_memory)
    return ClassFootprint(name, Footprint(cpu, memory), LEARNED, samples, requests)


# A class as read from the wire: name, cpu, memory, samples, request cpu, request memory.
RawClass = tuple[str, float, float, int, float, float]


def check_classes(
    raw: Sequence[capacity_pb2.ClassFootprint], node: str, policy: SenderPolicy
) -> list[RawClass]:
    """The ``class_footprints`` of a ``LocalModel``, read once and checked: each well-formed,
    each class named once, no more than the sender may send."""
    check_claim(node, 1, policy, len(raw))
    result = []
    for m in raw:
        name = m.workload_class
        cpu, memory = m.cpu_cores, m.memory_bytes
        request_cpu, request_memory = m.request_cpu_cores, m.request_memory_bytes
        if not (
            0.0 <= cpu <= MAX_CLASS_CPU
            and 0.0 <= request_cpu <= MAX_CLASS_CPU
            and 0.0 <= memory <= MAX_CLASS_MEMORY
            and 0.0 <= request_memory <= MAX_CLASS_MEMORY
            and 0 < len(name) <= MAX_CLASS_NAME
            and name.isprintable()
            and m.source == LEARNED
        ):
            check_class(name, m.source, cpu, memory, request_cpu, request_memory)
        result.append((name, cpu, memory, m.samples, request_cpu, request_memory))
    check_distinct([c[0] for c in result])
    return result


def check_distinct(names: Sequence[str]) -> None:
    """Each class at most once: a sender has one vote per class in the fleet's medians."""
    if len(set(names)) != len(names):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValidationError(f"class {name[:80]!r} appears more than once")
            seen.add(name)


def classes_of(raw: Sequence[capacity_pb2.ClassFootprint]) -> tuple[ClassFootprint, ...]:
    """The classes of a ``LocalModel`` that passed :func:`check_classes` already."""
    return tuple(
        class_footprint(
            m.workload_class,
            m.cpu_cores,
            m.memory_bytes,
            m.samples,
            m.request_cpu_cores,
            m.request_memory_bytes,
        )
        for m in raw
    )


def check_timestamp(timestamp: float) -> None:
    if not (math.isfinite(timestamp) and timestamp >= 0.0):
        raise ValidationError(f"timestamp {timestamp!r} is not a finite non-negative number")


def validate_local_model(
    message: aggregator_pb2.LocalModel,
    expected_features: tuple[str, ...] | None,
    received_at: float,
    known_nodes: Container[str] = (),
    policy: SenderPolicy = LEAVES_ONLY,
    band: CostBand = None,
    keep_classes: bool = True,
) -> tuple[NodeEntry, tuple[str, ...]]:
    """Check ``message``; return the entry to store and its feature names.

    With ``expected_features`` set, a model over any other feature set is refused (naming both),
    so that two parties never mix dimensions. Names in ``known_nodes`` passed this check before
    and are not matched again. ``policy`` says who may stand for more than one node, ``band``
    which costs the fleet accepts. Every protobuf field is read once: each access crosses into
    the protobuf runtime. ``keep_classes`` false checks the classes without building them (a
    worker process only checks; building a class costs several times what checking it does).
    """
    node = message.node
    if node not in known_nodes and (
        len(node) > MAX_NODE_NAME or _NODE_NAME.fullmatch(node) is None
    ):
        check_node_name(node)
    timestamp = message.timestamp
    if not 0.0 <= timestamp < math.inf:
        check_timestamp(timestamp)
    if not message.HasField("model"):
        raise ValidationError("message carries no model")
    model = message.model
    d = model.d
    r = model.r
    raw_names = model.feature_names
    if expected_features is None:
        names = check_feature_names(raw_names, d)
    else:
        if raw_names != list(expected_features):
            raise ValidationError(
                f"feature set {list(raw_names)} differs from this aggregator's "
                f"{list(expected_features)}"
            )
        if len(expected_features) != d:
            raise ValidationError(f"model has d={d} but {len(expected_features)} feature names")
        names = expected_features
    u = tuple(model.u)
    sigma = tuple(model.sigma)
    check_factor(d, r, u, sigma)
    weight = message.weight
    if weight != 1:
        weight = check_weight(weight)
        check_claim(node, weight, policy)
    raw_costs = message.per_pod_costs
    costs = check_costs(raw_costs, weight, band) if raw_costs else ()
    raw_classes = message.class_footprints
    classes: tuple[ClassFootprint, ...] = ()
    if raw_classes:
        read = check_classes(raw_classes, node, policy)
        if keep_classes:
            classes = tuple(class_footprint(*c) for c in read)
    entry = NodeEntry(
        node, message.sequence, timestamp, received_at, weight, d, r, u, sigma, costs, classes
    )
    return entry, names


def checked_entry(
    message: aggregator_pb2.LocalModel, received_at: float
) -> tuple[NodeEntry, tuple[str, ...]]:
    """The entry of a model that has already passed :func:`validate_local_model` (in a worker
    process of the same aggregator, against the same feature set): built without the checks."""
    model = message.model
    entry = NodeEntry(
        message.node,
        message.sequence,
        message.timestamp,
        received_at,
        message.weight or 1,
        model.d,
        model.r,
        tuple(model.u),
        tuple(model.sigma),
        tuple(message.per_pod_costs),
        classes_of(message.class_footprints),
    )
    return entry, tuple(model.feature_names)
