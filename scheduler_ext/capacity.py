"""The capacity table: the latest valid report per node, reservations, and per-node verdicts.

Reports arrive from the agents' gRPC streams (``grpc_server``); reservations come from the
``ledger``. Every change of a node's report or reservation count recomputes that node's *verdict*:
``free[node]`` = avail − reserved and, when it is below the threshold, ``failing[node]`` = the
human-readable reason. Filter and prioritize then work with set operations and C-level maps over
these dictionaries instead of per-node Python arithmetic and string formatting
(docs/architecture.md#decisions).
Staleness depends on time: nodes are kept in the order of their last report, so "is anything
stale?" is one comparison with the oldest, and the stale set is only walked when it is not empty.

Ordering rules for reports: within one stream the sequence must increase (a repeat is a duplicate,
a lower one out of order; both are ignored and counted). A report from a *different* stream than the
node's current one is accepted only when its timestamp (the agent's clock, on the same host) is
newer: that is how a reconnected or restarted agent — whose sequence may start again at 1 — takes
over, while a late report from a lingering old stream is refused. Pure logic: the clock is passed
in; the lock makes the table safe for the threads that the Kubernetes client uses.
"""

from __future__ import annotations

import enum
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

import numpy as np

from carico.footprint import (
    MAX_CLASSES_PER_REPORT,
    SOURCES,
    ClassFootprint,
    FleetSummary,
    Footprint,
)
from carico.names import MAX_SUBDOMAIN, subdomain_problem
from carico.pods import MAX_AVAIL, MAX_CLASS_NAME, MAX_COUNTED_PODS, MAX_UID, Requests
from protos.carico.v1 import capacity_pb2
from scheduler_ext.class_fit import Fit, FleetView, NodeClasses, node_fit
from scheduler_ext.workload import GlobalWorkload, validate_workload

INITIAL_SLOTS = 1024
MAX_NODE_NAME = MAX_SUBDOMAIN  # a Node name is a DNS subdomain
# A node passes the filter when this many pods of the incoming pod's class fit (avail − reserved
# for a node without per-class data).
DEFAULT_THRESHOLD = 1.0
MAX_FEATURES = 64
# The classes whose fits class_fits remembers (the most recently asked): a burst is one class.
FIT_CACHE_CLASSES = 16
NO_REQUESTS = Requests()


class Ingest(enum.Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    INVALID = "invalid"


MODE_NAMES = {
    capacity_pb2.CAPACITY_MODE_UNSPECIFIED: "unspecified",
    capacity_pb2.CAPACITY_MODE_LIVE: "live",
    capacity_pb2.CAPACITY_MODE_ESTIMATE: "estimate",
}


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One accepted report, with the extender's own receive time (its clock, not the agent's)."""

    node: str
    avail: float
    k: float
    capacity: float
    per_pod_cost: float
    pods: int
    mode: str
    psi_available: bool
    churn_hold: bool
    model_age_seconds: float
    global_model: bool
    samples_missing: int
    sequence: int
    timestamp: float
    received_at: float
    global_workload: GlobalWorkload | None = None  # the global model the agent last received
    feature_names: tuple[str, ...] = ()
    classes: NodeClasses | None = None  # per-class data (None: an agent without it)

    @classmethod
    def from_message(cls, msg: capacity_pb2.NodeCapacity, received_at: float) -> NodeReport:
        h = msg.health
        return cls(
            node=msg.node,
            # An agent's runaway one-cost estimate (older agents did not cap it) is taken at the
            # bound: refusing the report would also drop its per-class data and leave the node
            # stale, decided by the stale-data policy (docs/architecture.md#report-cadence).
            avail=min(msg.avail, MAX_AVAIL),
            k=msg.k,
            capacity=msg.capacity,
            per_pod_cost=msg.per_pod_cost,
            pods=msg.pods,
            mode=MODE_NAMES.get(msg.mode, "unspecified"),
            psi_available=h.psi_available,
            churn_hold=h.churn_hold,
            model_age_seconds=h.model_age_seconds,
            global_model=h.global_model,
            samples_missing=h.samples_missing,
            sequence=msg.sequence,
            timestamp=msg.timestamp,
            received_at=received_at,
            global_workload=GlobalWorkload.from_message(msg.global_workload),
            feature_names=tuple(msg.feature_names),
            classes=_classes(msg),
        )


def _footprint(c: capacity_pb2.ClassFootprint) -> ClassFootprint:
    return ClassFootprint(
        c.workload_class,
        Footprint(c.cpu_cores, c.memory_bytes),
        c.source,
        int(c.samples),
        Requests(c.request_cpu_cores, c.request_memory_bytes),
    )


def _classes(msg: capacity_pb2.NodeCapacity) -> NodeClasses | None:
    d = len(msg.headroom)
    if not d:
        return None
    names = tuple(msg.feature_names) or tuple(f"f{i}" for i in range(d))
    default = msg.default_footprint
    scale = np.fromiter(
        (x for s in msg.scale for x in (s.per_core, s.per_byte)), np.float64, 2 * len(msg.scale)
    )
    return NodeClasses(
        feature_names=names,
        headroom=np.fromiter(msg.headroom, np.float64, d),
        scale=scale.reshape(-1, 2),
        classes={c.workload_class: _footprint(c) for c in msg.classes},
        pods={c.workload_class: int(c.pods) for c in msg.classes},
        default=Footprint(default.cpu_cores, default.memory_bytes),
        full_level=msg.full_level,
        cores=msg.cpu_cores,
        memory_bytes=msg.memory_bytes,
    )


def _finite_not_negative(values: Iterable[float]) -> bool:
    # map and min run in C: a report is checked several times faster than with a generator
    values = tuple(values)
    return all(map(math.isfinite, values)) and (not values or min(values) >= 0)


def _validate_classes(msg: capacity_pb2.NodeCapacity) -> str | None:
    """Why the per-class part of a report must be refused, or None."""
    if not msg.headroom:
        return None
    d = len(msg.headroom)
    if d > MAX_FEATURES:
        return f"{d} headroom values: more than {MAX_FEATURES} features"
    if len(msg.scale) != d:
        return f"headroom has {d} values but scale {len(msg.scale)}"
    if msg.feature_names and len(msg.feature_names) != d:
        return "headroom and feature_names differ in length"
    numbers = [*msg.headroom, msg.full_level, msg.cpu_cores, msg.memory_bytes]
    numbers += [x for s in msg.scale for x in (s.per_core, s.per_byte)]
    if not _finite_not_negative(numbers):
        return "headroom, scale and node size must be finite and not negative"
    if not 0 < msg.full_level <= 1:
        return f"full_level {msg.full_level} is not in (0, 1]"
    if len(msg.classes) > MAX_CLASSES_PER_REPORT:
        return f"{len(msg.classes)} classes: more than {MAX_CLASSES_PER_REPORT}"
    for c in [*msg.classes, msg.default_footprint]:
        values = (c.cpu_cores, c.memory_bytes, c.request_cpu_cores, c.request_memory_bytes)
        if not _finite_not_negative(values):
            return f"class {c.workload_class[:60]!r}: footprints must be finite and not negative"
    for c in msg.classes:
        name = c.workload_class
        if not name or len(name) > MAX_CLASS_NAME:
            return f"a class name is empty or longer than {MAX_CLASS_NAME} characters"
        if c.source not in SOURCES:
            return f"class {name[:60]!r}: unknown source {c.source[:20]!r}"
    return None


def validate(msg: capacity_pb2.NodeCapacity, known_node: bool = False) -> str | None:
    """Why a report must be refused, or None when it is acceptable. ``known_node``: the node's
    name passed this check with an earlier report (its pattern is not matched again)."""
    if not known_node:
        problem = subdomain_problem(msg.node, "node name")
        if problem is not None:
            return problem
    h = msg.health
    values = (msg.avail, msg.k, msg.capacity, msg.per_pod_cost, msg.timestamp, h.model_age_seconds)
    if not _finite_not_negative(values):  # which one, and why, only for a refused report
        numbers = zip(
            ("avail", "k", "capacity", "per_pod_cost", "timestamp", "health.model_age_seconds"),
            values,
            strict=True,
        )
        for name, value in numbers:
            if not math.isfinite(value):
                return f"{name} is not finite ({value})"
            if value < 0:
                return f"{name} is negative ({value})"
    if msg.timestamp <= 0:
        return "timestamp is missing"
    if msg.mode not in MODE_NAMES:
        return f"unknown mode {msg.mode}"
    if not all(map(math.isfinite, msg.features)):
        return "features contain a non-finite value"
    if msg.feature_names and len(msg.feature_names) != len(msg.features):
        return "features and feature_names differ in length"
    counted = msg.counted_pods
    if len(counted) > MAX_COUNTED_PODS:
        return f"{len(counted)} counted pods (at most {MAX_COUNTED_PODS})"
    if counted and max(map(len, counted)) > MAX_UID:
        return f"a counted pod's uid is longer than {MAX_UID} characters"
    return _validate_classes(msg) or validate_workload(msg.global_workload)


def fmt(x: float) -> str:
    """A short human number: 0.4, 1, 12.35."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Thresholds:
    threshold: float = DEFAULT_THRESHOLD  # a node passes when this many pods fit
    stale_after: float = 10.0  # seconds without a report before a node's data is stale


# Nodes the table tracks at most (with a report, a reservation or both), unless told otherwise:
# twice the largest cluster Kubernetes supports. Every node costs memory here and in the history,
# so clients naming new nodes (reports, binds) must not be able to add them without end.
DEFAULT_MAX_NODES = 10_000


@dataclass(slots=True)
class ClassFits:
    """One class's remembered fits (``CapacityTable.class_view``), an entry per table slot: the
    vectorised per-class filter and prioritize read a candidate's verdict from these arrays and
    compute afresh only the fits whose node moved on (docs/architecture.md#decisions).
    Written only by the thread that decides; the arrays grow with the table's."""

    fleet_gen: int
    gen: np.ndarray  # int64: the node's generation the fit was computed at (-1: not computed)
    has: np.ndarray  # bool: the node reports per-class data (a Fit exists)
    count: np.ndarray  # float: the pods of the class that fit (Fit.count)
    room: np.ndarray  # float: the pods' worth of free room (Fit.room)
    fit: np.ndarray  # object: the Fit, or None
    reason: np.ndarray  # object: why the node fails for the class, once asked (None: not yet)

    @classmethod
    def empty(cls, fleet_gen: int, size: int) -> ClassFits:
        return cls(
            fleet_gen,
            np.full(size, -1, dtype=np.int64),
            np.zeros(size, dtype=bool),
            np.zeros(size),
            np.zeros(size),
            np.full(size, None, dtype=object),
            np.full(size, None, dtype=object),
        )

    def grow(self, size: int) -> None:
        """Room for ``size`` slots (the table's arrays grew)."""
        more = size - len(self.gen)
        if more <= 0:
            return
        self.gen = np.concatenate([self.gen, np.full(more, -1, dtype=np.int64)])
        self.has = np.concatenate([self.has, np.zeros(more, dtype=bool)])
        self.count = np.concatenate([self.count, np.zeros(more)])
        self.room = np.concatenate([self.room, np.zeros(more)])
        self.fit = np.concatenate([self.fit, np.full(more, None, dtype=object)])
        self.reason = np.concatenate([self.reason, np.full(more, None, dtype=object)])

    def store(self, slot: int, gen: int, fit: Fit | None) -> None:
        self.gen[slot] = gen
        self.fit[slot] = fit
        self.reason[slot] = None
        if fit is None:
            self.has[slot] = False
        else:
            self.has[slot] = True
            self.count[slot] = fit.count
            self.room[slot] = fit.room


class CapacityTable:
    def __init__(
        self, thresholds: Thresholds = Thresholds(), max_nodes: int = DEFAULT_MAX_NODES
    ) -> None:
        self.thresholds = thresholds
        self.max_nodes = max_nodes
        self.lock = threading.RLock()
        self._tracked: set[str] = set()  # nodes with a report or a reservation
        self._reports: dict[str, NodeReport] = {}
        self._streams: dict[str, Hashable] = {}
        self._reserved: dict[str, int] = {}
        # Per node, its reservations by (class, requests): priced at the class's cost when a
        # decision needs them, so a reservation made on a prior is charged what the class is
        # measured to cost as soon as it is. Reservations of no class (repack plan slots) are
        # the rest of the node's count.
        self._reserved_classes: dict[str, dict[tuple[str, Requests], int]] = {}
        self.fleet = FleetView()
        # class_view: per (class, requests), its fits per slot (ClassFits); a node's generation
        # (gen_arr, by slot) moves with every _recompute, and a fit is good while its
        # generation and the fleet's are those it was computed at.
        self._fits: OrderedDict[tuple[str, Requests], ClassFits] = OrderedDict()
        self._generations = 0
        self.class_nodes: set[str] = set()  # nodes whose last report has per-class data
        # A packing score shape holds an unmeasured class's probe cluster-wide (fleet_probing).
        self.probe_fleet_wide = False
        # The verdicts, read without the lock by the hot path (single dict operations are atomic).
        self.free: dict[str, float] = {}
        self.failing: dict[str, str] = {}
        # Node -> receive time, oldest first (a report moves its node to the end).
        self._received: OrderedDict[str, float] = OrderedDict()
        # The same verdicts as arrays indexed by a slot per reported node, for the vectorised
        # hot path: one dictionary pass maps candidate names to slots, the rest is numpy.
        self.slot: dict[str, int] = {}
        # Bumped whenever ``slot`` maps a name differently, so cached name-to-slot maps know to
        # resolve again.
        self.slots_version = 0
        self._free_slots: list[int] = []
        self.free_arr = np.zeros(INITIAL_SLOTS)
        self.failing_arr = np.zeros(INITIAL_SLOTS, dtype=bool)
        self.received_arr = np.full(INITIAL_SLOTS, -np.inf)
        self.gen_arr = np.zeros(INITIAL_SLOTS, dtype=np.int64)

    # -- reports ---------------------------------------------------------------------------

    def ingest(
        self, msg: capacity_pb2.NodeCapacity, stream: Hashable, now: float
    ) -> tuple[Ingest, str]:
        """Take a report if it is valid and newer; returns the outcome and, if refused, why."""
        problem = validate(msg, msg.node in self._reports)  # one dict read: no lock needed
        if problem is not None:
            shown = ascii(msg.node[:64])  # a refused name may be megabytes long
            return Ingest.INVALID, f"report for node {shown} refused: {problem}"
        with self.lock:
            last = self._reports.get(msg.node)
            if last is None and not self.can_track(msg.node):
                return Ingest.INVALID, self.full_reason(msg.node)
            if last is not None:
                if self._streams.get(msg.node) == stream:
                    if msg.sequence == last.sequence:
                        return Ingest.DUPLICATE, f"duplicate sequence {msg.sequence} for {msg.node}"
                    if msg.sequence < last.sequence:
                        return (
                            Ingest.OUT_OF_ORDER,
                            f"sequence {msg.sequence} for {msg.node} is older than {last.sequence}",
                        )
                elif msg.timestamp <= last.timestamp:
                    # Another stream (a reconnected or restarted agent) must bring newer data.
                    outcome = (
                        Ingest.DUPLICATE
                        if msg.sequence == last.sequence and msg.timestamp == last.timestamp
                        else Ingest.OUT_OF_ORDER
                    )
                    return (
                        outcome,
                        f"report for {msg.node} from another stream is not newer"
                        f" (timestamp {msg.timestamp} <= {last.timestamp})",
                    )
            report = NodeReport.from_message(msg, now)
            self._reports[msg.node] = report
            if report.classes is not None:
                self.class_nodes.add(msg.node)
                learned = [c for c in report.classes.classes.values() if c.source == "learned"]
                if learned:
                    known = self.fleet.summary.classes
                    self.fleet.mark(new_class=any(c.name not in known for c in learned))
            else:
                self.class_nodes.discard(msg.node)
            self._tracked.add(msg.node)
            self._streams[msg.node] = stream
            self._received[msg.node] = now
            self._received.move_to_end(msg.node)
            slot = self._slot_for(msg.node)  # may grow the arrays: index them afterwards
            self.received_arr[slot] = now
            self._recompute(msg.node)
            return Ingest.ACCEPTED, ""

    def report(self, node: str) -> NodeReport | None:
        return self._reports.get(node)

    def reports(self) -> list[NodeReport]:
        with self.lock:
            return list(self._reports.values())

    def forget_older_than(self, now: float, age: float) -> list[str]:
        """Drop nodes whose last report is older than ``age`` seconds (deleted nodes)."""
        with self.lock:
            gone: list[str] = []
            for node, at in self._received.items():  # oldest first: stop at the first recent one
                if now - at <= age:
                    break
                gone.append(node)
            for node in gone:
                del self._reports[node]
                if node not in self._reserved:
                    self._tracked.discard(node)
                self.class_nodes.discard(node)
                self._streams.pop(node, None)
                self._received.pop(node, None)
                self._recompute(node)
                slot = self.slot.pop(node)
                self.slots_version += 1
                self.received_arr[slot] = -np.inf
                self._free_slots.append(slot)
            return gone

    # -- reservations (called by the ledger, under the lock) --------------------------------

    def reserved(self, node: str) -> int:
        return self._reserved.get(node, 0)

    def reserved_counts(self) -> dict[str, int]:
        with self.lock:
            return dict(self._reserved)

    def add_reserved(
        self, node: str, delta: int, workload_class: str = "", requests: Requests = NO_REQUESTS
    ) -> None:
        """Change the reservations of ``node`` by ``delta`` pods (±1) of ``workload_class``
        (pass the same class and requests to take one back; no class: a plan slot)."""
        with self.lock:
            count = self._reserved.get(node, 0) + delta
            if count < 0:
                raise AssertionError(f"reserved count of {node} would go negative")
            if count:
                self._reserved[node] = count
                self._tracked.add(node)
            else:
                self._reserved.pop(node, None)
                if node not in self._reports:
                    self._tracked.discard(node)
            if workload_class:
                classes = self._reserved_classes.setdefault(node, {})
                key = (workload_class, requests)
                n = classes.get(key, 0) + delta
                if n > 0:
                    classes[key] = n
                else:
                    classes.pop(key, None)
                    if not classes:
                        del self._reserved_classes[node]
            self._recompute(node)

    def can_track(self, node: str) -> bool:
        """Whether ``node`` is tracked already or there is room for one more."""
        return node in self._tracked or len(self._tracked) < self.max_nodes

    def full_reason(self, node: str) -> str:
        return (
            f"node {node} is new and the table tracks its maximum of {self.max_nodes} nodes"
            " (--max-nodes)"
        )

    def fit(
        self,
        node: str,
        workload_class: str,
        requests: Requests,
        now: float,
        probing: int | None = None,
    ) -> Fit | None:
        """Pods of the class that fit on ``node`` now (None: the node reports no per-class data).
        ``probing``: the class's pods counted cluster-wide for its probe (``fleet_probing``)."""
        report = self._reports.get(node)
        if report is None or report.classes is None:
            return None
        fleet = self.fleet_summary(now)
        with self.lock:
            held = dict(self._reserved_classes.get(node, {}))
            slots = self._reserved.get(node, 0) - sum(held.values())
        return node_fit(report.classes, workload_class, requests, held, slots, fleet, probing)

    def class_view(self, workload_class: str, requests: Requests, now: float) -> ClassFits:
        """The class's remembered fits, sized to the table's slots; all of them forgotten when
        the fleet's summary changed (it is recomputed here when due)."""
        self.fleet_summary(now)  # recomputes (and bumps the fleet's generation) when due
        fleet_gen = self.fleet.generation
        key = (workload_class, requests)
        view = self._fits.get(key)
        size = len(self.gen_arr)
        if view is None or view.fleet_gen != fleet_gen:
            view = ClassFits.empty(fleet_gen, size)
            self._fits[key] = view
            while len(self._fits) > FIT_CACHE_CLASSES:
                self._fits.popitem(last=False)
        else:
            self._fits.move_to_end(key)
            view.grow(size)
        return view

    def refresh_fits(
        self,
        view: ClassFits,
        workload_class: str,
        requests: Requests,
        now: float,
        names: list[str],
        slots: np.ndarray,
        asked: np.ndarray,
    ) -> None:
        """Compute afresh the fits of the candidates ``asked`` (a mask over ``names``, whose table
        slots are ``slots``) whose node moved on since they were remembered."""
        gens = self.gen_arr[slots]  # read before the fits: a report meanwhile invalidates them
        for i in np.flatnonzero(asked & (view.gen[slots] != gens)).tolist():
            view.store(
                int(slots[i]), int(gens[i]), self.fit(names[i], workload_class, requests, now)
            )

    def class_fits(
        self, workload_class: str, requests: Requests, now: float
    ) -> Callable[[str], Fit | None]:
        """A node's ``fit`` for the class without a cluster-wide probe, remembered until the
        node's report, its reservations or the fleet's summary change: a filter and a prioritize
        ask it of every candidate, and a burst asks the same of each node many times between two
        of its reports (docs/architecture.md#decisions). A fit costs about 10 µs to compute."""
        view = self.class_view(workload_class, requests, now)
        slot_of = self.slot

        def lookup(node: str) -> Fit | None:
            slot = slot_of.get(node)
            if slot is None:  # no report: no per-class data
                return self.fit(node, workload_class, requests, now)
            gen = int(self.gen_arr[slot])  # read before the fit (see refresh_fits)
            if slot >= len(view.gen):
                view.grow(len(self.gen_arr))
            elif view.gen[slot] == gen:
                fit: Fit | None = view.fit[slot]
                return fit
            fit = self.fit(node, workload_class, requests, now)
            view.store(slot, gen, fit)
            return fit

        return lookup

    def fleet_probing(self, workload_class: str) -> int | None:
        """With ``probe_fleet_wide`` (a packing score shape): the class's pods running on any
        node plus its reservations anywhere, the count its cluster-wide probe is held to
        (scheduler_ext.class_fit.node_fit); None otherwise, and the probe is per node."""
        if not self.probe_fleet_wide or not workload_class:
            return None
        running = sum(
            r.classes.pods.get(workload_class, 0)
            for r in self._reports.values()
            if r.classes is not None
        )
        with self.lock:
            in_flight = sum(
                n
                for held in self._reserved_classes.values()
                for (name, _), n in held.items()
                if name == workload_class
            )
        return running + in_flight

    def fleet_summary(self, now: float) -> FleetSummary:
        return self.fleet.get(
            now, (r.classes for r in self._reports.values() if r.classes is not None)
        )

    # -- verdicts --------------------------------------------------------------------------

    def _slot_for(self, node: str) -> int:
        slot = self.slot.get(node)
        if slot is not None:
            return slot
        if self._free_slots:
            slot = self._free_slots.pop()
        else:
            slot = len(self.slot)
            if slot >= len(self.free_arr):
                # Grow by doubling; the hot path reads the attributes afresh on every request.
                grow = len(self.free_arr)
                self.free_arr = np.concatenate([self.free_arr, np.zeros(grow)])
                self.failing_arr = np.concatenate([self.failing_arr, np.zeros(grow, dtype=bool)])
                self.received_arr = np.concatenate([self.received_arr, np.full(grow, -np.inf)])
                self.gen_arr = np.concatenate([self.gen_arr, np.zeros(grow, dtype=np.int64)])
        self.slot[node] = slot
        self.slots_version += 1
        return slot

    def _recompute(self, node: str) -> None:
        # Whatever a fit of the node rests on changed (its report or its reservations): a
        # generation no fit was remembered at, even for a node forgotten and back.
        self._generations += 1
        slot = self.slot.get(node)
        if slot is not None:
            self.gen_arr[slot] = self._generations
        report = self._reports.get(node)
        if report is None:
            self.free.pop(node, None)
            self.failing.pop(node, None)
            return
        reserved = self._reserved.get(node, 0)
        free = report.avail - reserved
        threshold = self.thresholds.threshold
        self.free[node] = free
        assert slot is not None  # a node with a report has a slot
        self.free_arr[slot] = free
        if free >= threshold:
            self.failing.pop(node, None)
            self.failing_arr[slot] = False
        else:
            self.failing[node] = (
                f"carico: avail {fmt(report.avail)} - reserved {reserved} < {fmt(threshold)}"
            )
            self.failing_arr[slot] = True

    @property
    def received(self) -> dict[str, float]:
        """Node -> when its last report arrived (the table's clock); read-only use."""
        return self._received

    def is_fresh(self, node: str, now: float) -> bool:
        received = self._received.get(node)
        return received is not None and now - received < self.thresholds.stale_after

    def stale_nodes(self, now: float) -> set[str]:
        """Nodes whose last report is at least ``stale_after`` old (usually none: O(1) then)."""
        limit = now - self.thresholds.stale_after
        received = self._received
        if not received:
            return set()
        with self.lock:
            stale: set[str] = set()
            for node, at in received.items():
                if at > limit:
                    break
                stale.add(node)
            return stale

    def nodes(self) -> Iterable[str]:
        return list(self._reports)
