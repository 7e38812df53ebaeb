"""How many pods of a class still fit on a node: the extender's per-class decision.

A node whose agent reports per-class data (``headroom``, ``scale``, ``classes``) is decided per
pod (docs/architecture.md#decisions): the pod's class costs the node f = S·a in its feature units,
where a is the class's footprint (CPU demand in cores, memory in bytes) and S the node's scale;
the node's free room is its headroom minus what its reservations will use; the pods of the class
that fit are min over features of free / f. The footprint a comes, in order, from the node's own
report of the class (learned there, or the fleet's value the agent holds), the fleet's median
over every node that learned the class, the pod's requests scaled by the fleet's ratio of
measured use to requests, the fleet's typical pod, or the node's reported default.

The fleet view is computed here from the nodes' reports (the same rule as the aggregator's:
``carico.footprint.fleet_summary``), at most once per ``FLEET_EVERY`` seconds. Pure: the clock is
passed in. Neighbours: ``capacity`` (keeps the reports and reservations), ``decisions``, ``ledger``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from carico.footprint import (
    EMPTY_FLEET,
    ClassFootprint,
    FleetSummary,
    Footprint,
    fleet_summary,
    footprint_moved,
    resolve,
    value_moved,
)
from carico.pods import Requests

# Seconds between recomputations of the fleet's class medians (every report could change them).
FLEET_EVERY = 1.0
# A recomputed fleet view replaces the last one when a median moved by this fraction or more
# of itself: the dead band the agents' report gate gives a class's footprint (2 %), halved.
FLEET_MOVED = 0.01
# The most classes the fleet view keeps (those learned on the most nodes).
MAX_FLEET_CLASSES = 1024
# A pod that costs nothing on any feature fits this many times (a number, not infinity).
MAX_FIT = 1e6
_EPS = 1e-12


@dataclass(frozen=True, slots=True)
class NodeClasses:
    """A node's per-class data from its last report."""

    feature_names: tuple[str, ...]
    headroom: np.ndarray  # (d,) per feature, >= 0
    scale: np.ndarray  # (d, 2): per core, per byte
    classes: Mapping[str, ClassFootprint]  # what the node reports (learned or fleet)
    pods: Mapping[str, int]  # running pods per class
    default: Footprint  # the node's cost of a pod nothing is known of
    full_level: float
    cores: float
    memory_bytes: float


@dataclass(frozen=True, slots=True)
class Fit:
    """The pods of a class that fit on a node, and why.

    ``room`` is how many pods' worth of free room the node has for the class (a real number);
    ``count`` the pods that fit, a pod counting when more than half of it fits under the full
    level (``room`` rounded to the nearest pod, half down): the node's use then meets its full
    level on average instead of never reaching it, and a pod a little larger than the free room
    (a 4-thread pod on a 4-core node) is not held to one a node. Measured in the simulator
    against rounding down (docs/architecture.md#decisions).
    """

    room: float
    cost: ClassFootprint  # the footprint used, with its source
    need: tuple[float, ...]  # per feature: one pod's share of the node
    free: tuple[float, ...]  # per feature: headroom minus reservations
    count: int = 0  # the pods that fit (see node_fit)
    probe_capped: bool = False  # the class's probe, not the room, held the count down

    def filter_reason(self, names: tuple[str, ...], threshold: float) -> str:
        """Why the node fails for the class, in the words every node failing the same way
        shares. kube-scheduler counts identical reasons in the pod's condition and events
        ("0/900 nodes are available: 312 carico: ..."); a reason carrying each node's numbers
        would list every node there. The numbers are in ``reason`` (bind refusals, the log)
        and in the filter's explanation (GET /api/v1/explain)."""
        pods = "a pod" if threshold <= 1.0 else f"{_short(threshold)} pods"
        if self.probe_capped:
            return (
                f"carico: {self.cost.name} is being measured: {PROBE_PODS} unmeasured pods"
                " at a time per node"
            )
        return f"carico: no room for {pods} of {self.cost.name} ({self.limit(names)})"

    def limit(self, names: tuple[str, ...]) -> str:
        """The feature that holds the count down: the first full one, else the scarcest for
        the class (``names``: the node's feature names; "?" if they are not known)."""
        if len(names) != len(self.free) or not names:
            return "?"
        full = [n for n, f in zip(names, self.free, strict=True) if f <= 0.0]
        if full:
            return f"{full[0]} full"
        ratios = [
            (f / x, n) for n, f, x in zip(names, self.free, self.need, strict=True) if x > _EPS
        ]
        return min(ratios)[1] if ratios else "?"

    def reason(self, names: tuple[str, ...], threshold: float) -> str:
        need = ", ".join(f"{n} {_short(x)}" for n, x in zip(names, self.need, strict=True) if x)
        free = ", ".join(f"{n} {_short(x)}" for n, x in zip(names, self.free, strict=True))
        probe = (
            ""
            if self.cost.source in MEASURED
            else f", probing: {PROBE_PODS} unmeasured pods at a time"
        )
        return (
            f"carico: a pod of {self.cost.name} needs {need or 'nothing'}"
            f" ({self.cost.source}{probe}); free {free}: room for {_short(self.room)},"
            f" {_short(self.count)} fit < {_short(threshold)}"
        )


def _short(x: float) -> str:
    return f"{x:.3g}"


def fit_count(free: Sequence[float], need: Sequence[float]) -> float:
    """Pods' worth of room of cost ``need`` in ``free`` (per feature); 0 when a feature is full.
    Plain floats: with two to four features numpy's per-call cost is most of the work.

    >>> fit_count([0.25, 0.5], [0.125, 0.0625])
    2.0
    >>> fit_count([0.3, 0.0], [0.1, 0.0])  # full on the second feature
    0.0
    """
    if any(f <= 0.0 for f in free):
        return 0.0
    ratios = [f / n for f, n in zip(free, need, strict=True) if n > _EPS]
    if not ratios:
        return MAX_FIT
    return float(min(min(ratios), MAX_FIT))


class FleetView:
    """The fleet's class medians, recomputed from the reports at most every FLEET_EVERY s, and
    replaced only when they moved by FLEET_MOVED or more (or a class came or went): every fit
    the table remembers rests on them, and agents' learned footprints move a little with every
    report (docs/architecture.md#decisions)."""

    def __init__(self) -> None:
        self.summary: FleetSummary = EMPTY_FLEET
        self.generation = 0  # bumped whenever ``summary`` is replaced
        self._at = -math.inf
        self._dirty = False

    def mark(self, new_class: bool = False) -> None:
        """A report changed what the nodes learned; ``new_class``: a class the fleet view does
        not know yet (recomputed at once: pods of that class are waiting on it)."""
        self._dirty = True
        if new_class:
            self._at = -math.inf

    def get(self, now: float, nodes: Iterable[NodeClasses]) -> FleetSummary:
        if self._dirty and now - self._at >= FLEET_EVERY:
            summary = fleet_summary(
                (c for n in nodes for c in n.classes.values()), MAX_FLEET_CLASSES
            )
            self._at, self._dirty = now, False
            if fleet_moved(self.summary, summary):
                self.summary = summary
                self.generation += 1
        return self.summary


def _moved(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return value_moved(a, b, FLEET_MOVED)


def _footprint_moved(a: Footprint | None, b: Footprint | None) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return footprint_moved(a, b, FLEET_MOVED)


def fleet_moved(old: FleetSummary, new: FleetSummary) -> bool:
    """Whether ``new`` differs from ``old`` by FLEET_MOVED or more anywhere: a class median,
    a measured-to-requested ratio or the typical pod; or a class came or went.

    >>> a = FleetSummary.of({"x": Footprint(1.0, 1e9)}, 0.5)
    >>> fleet_moved(a, FleetSummary.of({"x": Footprint(1.005, 1e9)}, 0.5))
    False
    >>> fleet_moved(a, FleetSummary.of({"x": Footprint(1.02, 1e9)}, 0.5))
    True
    >>> fleet_moved(a, FleetSummary.of({"x": Footprint(1.0, 1e9), "y": Footprint(1.0, 1e9)}, 0.5))
    True
    """
    if old.classes.keys() != new.classes.keys():
        return True
    return (
        _moved(old.cpu_ratio, new.cpu_ratio)
        or _moved(old.memory_ratio, new.memory_ratio)
        or _footprint_moved(old.typical, new.typical)
        or any(_footprint_moved(f, new.classes[name]) for name, f in old.classes.items())
    )


# Where a footprint is measured (on this node, or the fleet's median of nodes that measured it);
# the other sources are priors.
MEASURED = frozenset({"learned", "fleet"})
# Pods of a class nobody has measured that a node takes at a time (until one is measured).
PROBE_PODS = 2
# Features a node cannot overcommit: past them the kernel kills pods, where CPU only slows them.
# A pod must fit them whole; on the others a pod counts when more than half of it fits.
INCOMPRESSIBLE = frozenset({"memory"})


def node_fit(
    node: NodeClasses,
    workload_class: str,
    requests: Requests,
    reserved: Mapping[tuple[str, Requests], int],
    unknown_units: int,
    fleet: FleetSummary,
    probing: int | None = None,
) -> Fit:
    """How many pods of ``workload_class`` fit on ``node`` after its reservations.

    ``reserved`` counts the node's reservations by (class, requests), each charged its class's
    cost as it is known now; ``unknown_units`` the reservations of no class (repack plan slots),
    each charged the fleet's typical pod (or the node's default).

    A class whose cost nobody has measured yet (its footprint is a prior: requests, typical,
    default) is *probed*: a node takes PROBE_PODS pods of it at a time, until they have run long
    enough to be measured (the node then reports the class learned, and the fleet knows it).
    A prior can be wrong by an order of magnitude (a 4-thread pod that requests 200m), and a
    burst placed on it would pile up on one node before the first measurement. ``probing``,
    when given, is the class's unmeasured pods counted over the whole cluster (running and in
    flight) instead of on this node: with a packing score shape the probe is the cluster's, so
    that a burst of a new class does not take two pods to every node before it is measured.
    """
    cost = resolve(workload_class, requests, node.classes.get(workload_class), fleet, node.default)
    typical = fleet.typical or node.default
    held = typical.scaled(unknown_units)
    class_in_flight = 0
    for (name, req), n in reserved.items():
        if name == workload_class:
            class_in_flight += n
        held_cost = resolve(name, req, node.classes.get(name), fleet, node.default)
        held = held.plus(held_cost.footprint.scaled(n))
    held_cpu, held_memory = held.cpu, held.memory
    cpu, memory = cost.footprint.cpu, cost.footprint.memory
    scale = node.scale.tolist()
    free = [
        h - (per_core * held_cpu + per_byte * held_memory)
        for h, (per_core, per_byte) in zip(node.headroom.tolist(), scale, strict=True)
    ]
    need = [per_core * cpu + per_byte * memory for per_core, per_byte in scale]
    room = fit_count(free, need)
    # Pods that fit: a pod counts when more than half of it fits, except on an incompressible
    # feature, where it must fit whole.
    count = math.ceil(room - 0.5)
    hard = [
        i for i, name in enumerate(node.feature_names) if name in INCOMPRESSIBLE and need[i] > _EPS
    ]
    if hard:
        # a thousandth of a pod of slack: footprints are estimates, and an exact fit computed in
        # floating point must not round down to one pod less
        count = min(count, math.floor(min(free[i] / need[i] for i in hard) + 1e-3))
    count = max(count, 0)
    if count < 1 and not (unknown_units or reserved or any(node.pods.values())):
        # An idle node takes one pod of any size while at least half its full level is free on
        # every feature the pod needs: a pod whose demand exceeds the node runs slower there, but
        # it must run somewhere (a node full of load no pod explains is not idle).
        half = 0.5 * node.full_level
        roomy = all(f > 0.0 for f in free) and all(
            f >= half for f, n in zip(free, need, strict=True) if n > _EPS
        )
        count = 1 if roomy else 0
    capped = False
    if cost.source not in MEASURED:
        if probing is None:
            probing = class_in_flight + node.pods.get(workload_class, 0)
        probe = max(PROBE_PODS - probing, 0)
        capped = probe < count
        count = min(count, probe)
    return Fit(room, cost, tuple(need), tuple(free), count, capped)
