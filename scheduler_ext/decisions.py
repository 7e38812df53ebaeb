"""Filter, prioritize and preempt decisions over the capacity table.

Design: docs/architecture.md#decisions.

* filter: a node passes iff avail − reserved ≥ threshold; a failed node gets a reason such as
  ``carico: avail 0.4 - reserved 1 < 1``.
* prioritize: score = round(10 · (avail − reserved) / best), clamped to 0..10, where best is the
  largest avail − reserved among the fresh candidates; with a score shape (``shape``), the shape
  of each node's measured utilisation once the pod runs instead.
* preempt: a node stays a candidate only if avail − reserved plus one pod-unit per victim reaches
  the threshold; its victims are then passed back unchanged. A node with no victims is never
  passed back (kube-scheduler rejects that answer).
* exempt pods (see ``pods``) pass every node, score 0 everywhere and keep every preemption
  candidate; stale or missing data follows the stale-data policy (fail-open: pass, score 0;
  fail-closed: the node fails as unresolvable, since preempting pods there cannot help).

Pure logic: the clock is passed in and nothing here does I/O. The per-node work is done by set
operations, C-level maps and numpy over the precomputed verdicts rather than Python loops, since it
runs for every pod over up to thousands of candidates. Neighbours: ``capacity`` (verdicts),
``service`` (callers).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat

import numpy as np

from scheduler_ext.capacity import CapacityTable, ClassFits, fmt
from scheduler_ext.class_fit import Fit
from scheduler_ext.ledger import StaleData
from scheduler_ext.pods import ExemptionPolicy, PodFacts
from scheduler_ext.shape import ScoreShape, class_utilisation, pods_utilisation
from scheduler_ext.wire import HostPriority, MetaVictims

MAX_SCORE = 10  # extenderv1.MaxExtenderPriority
NO_VICTIMS = "carico: no victims given for this node"
# Up to this many candidates a plain loop is cheaper than numpy's fixed per-call overhead; above
# it the vectorised path wins (measured in-process with fresh request strings: the filter loop
# breaks even near 200 candidates, the prioritize loop near 50).
SMALL_FILTER = 200
SMALL_PRIORITIZE = 64
# The per-class loops cost more per candidate (a remembered fit's lookup): measured in-process
# with 1,000 nodes reporting per class, the filter loop took 1.1 µs a candidate and the vector
# path 22 µs plus 0.13 µs a candidate (470 against 76 µs for 420 candidates; prioritize 278
# against 66), breaking even near 16 candidates for the filter and 30 for prioritize.
SMALL_CLASSES = 24


@dataclass
class FilterDecision:
    passed: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    exempt: str | None = None
    stale: int = 0  # candidates decided by the stale-data policy because their data was old
    missing: int = 0  # ... or because no report exists
    # Per-class decisions: the fit on each node decided by its class, built when asked (for
    # the explanation), and the passed nodes with room for fewer than ``limit`` pods of the
    # class, with that room (the nodes pods in flight may hold).
    fits: Callable[[], dict[str, Fit]] | None = None
    little_room: Callable[[float], list[tuple[str, float]]] | None = None
    # The passed nodes' table slots, whether each has a report, and the slot layout's version
    # (``Candidates``), when the filter looked them up.
    passed_slots: tuple[np.ndarray, np.ndarray, int] | None = field(
        default=None, compare=False, repr=False
    )

    def fail(self, reasons: Mapping[str, str]) -> None:
        """Fail these passed nodes after all, with their reasons (the passed nodes' slots follow,
        so the two stay aligned)."""
        keep = [name not in reasons for name in self.passed]
        self.passed = list(compress(self.passed, keep))
        if self.passed_slots is not None:
            safe, known, version = self.passed_slots
            mask = np.asarray(keep, dtype=bool)
            self.passed_slots = (safe[mask], known[mask], version)
        self.failed.update(reasons)


@dataclass
class PrioritizeDecision:
    scores: list[HostPriority]
    exempt: str | None = None
    stale: int = 0
    missing: int = 0
    # With a score shape: each fresh node's utilisation per feature (%) once the pod runs.
    utilisation: dict[str, dict[str, int]] | None = None


@dataclass
class PreemptDecision:
    kept: dict[str, MetaVictims]
    dropped: dict[str, str] = field(default_factory=dict)  # node -> why it is no candidate
    exempt: str | None = None
    stale: int = 0
    missing: int = 0


# Candidate lists remembered by their request bytes. kube-scheduler sends the same NodeNames to
# filter for pod after pod, and to prioritize the list the filter passed (remembered by the
# filter, ``Decider.expect``), so a remembered list skips both decoding the names and hashing each
# of them into the table. At most
# CANDIDATE_CACHE_SIZE lists are kept, and at most CANDIDATE_CACHE_BYTES in all by
# ``candidates_cost``: a list of 80,000 short names is 1 MB of JSON but ~7 MB decoded, so a bound
# on the request bytes alone is no bound. A list costing more than a quarter is not kept at all.
CANDIDATE_CACHE_SIZE = 32
CANDIDATE_CACHE_BYTES = 32 << 20
# Per name: a str object without its characters (49 bytes), its slot in the list (8) and its cells
# in the two per-candidate arrays (8 + 1).
PER_NAME_BYTES = 66


def candidates_cost(raw: bytes, count: int) -> int:
    """The memory a remembered list of ``count`` names, decoded from ``raw``, takes at most: the
    key, the names (their characters are fewer than the JSON's bytes) and the arrays."""
    return 2 * (len(raw) + 33) + PER_NAME_BYTES * count + 200  # 200: list, arrays, entry


@dataclass(slots=True)
class Candidates:
    """A candidate list with its table slots, resolved once per ``CapacityTable.slots_version``."""

    names: list[str]
    version: int = -1
    safe: np.ndarray | None = None  # table slot per candidate (0 where unknown)
    known: np.ndarray | None = None  # the candidate has a report


@dataclass(frozen=True, slots=True)
class _Lookup:
    safe: np.ndarray  # table slot per candidate (0 where unknown: mask with ``known``)
    known: np.ndarray  # the candidate has a report
    fresh: np.ndarray  # ... and it is not stale


class Decider:
    def __init__(
        self,
        table: CapacityTable,
        exemptions: ExemptionPolicy,
        stale_policy: StaleData = StaleData.FAIL_OPEN,
        shape: ScoreShape | None = None,
    ) -> None:
        self.table = table
        self.exemptions = exemptions
        self.stale_policy = stale_policy
        self.shape = shape  # None: spreading on room (the default)
        # Packing: a class nobody has measured is probed on PROBE_PODS pods of the cluster, not
        # of every node, or a burst of it would take pods to every node before it is measured.
        table.probe_fleet_wide = shape is not None and shape.packs
        self._candidates: OrderedDict[bytes, tuple[Candidates, int]] = OrderedDict()
        self.candidate_bytes = 0  # the cost of the lists remembered (``candidates_cost``)

    def candidates(
        self,
        raw: bytes,
        decode: Callable[[bytes], list[str]],
        check: Callable[[list[str]], None],
    ) -> Candidates:
        """The candidate list whose JSON is ``raw``: remembered, or ``decode(raw)``, mapped to
        table slots at once. ``check`` is given the names without a report and raises for a bad
        one (names with a report passed the same check at ingest, so a list is not looked up
        twice); nothing is remembered then."""
        cache = self._candidates
        found = cache.get(raw)
        if found is not None:
            cache.move_to_end(raw)
            return found[0]
        made = Candidates(decode(raw))
        known = self._resolve(made)[1]
        if not known.all():
            names = made.names
            check([names[i] for i in np.flatnonzero(~known).tolist()])
        self._keep(raw, made)
        return made

    def expect(self, raw: bytes, passed: FilterDecision) -> None:
        """Remember the nodes a filter passed, under ``raw``, the JSON of the list its reply
        carries: kube-scheduler sends prioritize that very list (in that order, and encoded
        alike), which then skips decoding, checking and looking up the names again. The names
        were checked as the filter's candidates."""
        made = Candidates(passed.passed)
        slots = passed.passed_slots
        if slots is not None and len(slots[0]) == len(passed.passed):  # else resolved again
            made.safe, made.known, made.version = slots
        self._keep(raw, made)

    def _keep(self, raw: bytes, made: Candidates) -> None:
        cache = self._candidates
        if raw in cache:
            return
        cost = candidates_cost(raw, len(made.names))
        if cost <= CANDIDATE_CACHE_BYTES // 4:
            cache[raw] = (made, cost)
            self.candidate_bytes += cost
            while len(cache) > CANDIDATE_CACHE_SIZE or self.candidate_bytes > CANDIDATE_CACHE_BYTES:
                self.candidate_bytes -= cache.popitem(last=False)[1][1]

    def remembered_candidates(self) -> list[Candidates]:
        """The candidate lists remembered now, oldest first (for tests and introspection)."""
        return [cands for cands, _ in self._candidates.values()]

    def _stale_reason(self, node: str, now: float) -> str:
        report = self.table.report(node)
        if report is None:
            return f"carico: no capacity report for node {node}"
        age = now - report.received_at
        return (
            f"carico: capacity data of node {node} is {fmt(age)}s old"
            f" (stale after {fmt(self.table.thresholds.stale_after)}s)"
        )

    def _unknown(self, names: set[str], now: float) -> tuple[set[str], int, int]:
        """The candidates decided by the stale-data policy, and how many are stale / missing."""
        missing = names.difference(self.table.free)
        stale = self.table.stale_nodes(now)
        stale_here = names.intersection(stale) if stale else set()
        return missing | stale_here, len(stale_here), len(missing)

    def _resolve(self, cands: Candidates) -> tuple[np.ndarray, np.ndarray]:
        """The candidates' table slots (0 where unknown) and which have a report, mapped once
        per slot layout."""
        table = self.table
        safe, known = cands.safe, cands.known
        if safe is None or known is None or cands.version != table.slots_version:
            names = cands.names
            slots = np.fromiter(
                map(table.slot.get, names, repeat(-1)), dtype=np.intp, count=len(names)
            )
            known = slots >= 0
            safe = np.where(known, slots, 0)
            cands.safe, cands.known, cands.version = safe, known, table.slots_version
        return safe, known

    def _lookup(self, cands: Candidates, now: float) -> _Lookup:
        """Map the candidates to table slots (once per slot layout); the rest is vectorised."""
        table = self.table
        safe, known = self._resolve(cands)
        fresh = known & (table.received_arr[safe] > now - table.thresholds.stale_after)
        return _Lookup(safe, known, fresh)

    def filter(
        self, pod: PodFacts, candidates: list[str] | Candidates, now: float
    ) -> FilterDecision:
        cands = candidates if isinstance(candidates, Candidates) else Candidates(candidates)
        names = cands.names
        exempt = self.exemptions.reason(pod)
        if exempt is not None:
            return FilterDecision(list(names), {}, {}, exempt=exempt)
        if not names:
            return FilterDecision([], {}, {})
        if self.table.class_nodes and pod.workload_class:
            probing = self.table.fleet_probing(pod.workload_class)
            if len(names) <= SMALL_CLASSES or probing is not None:  # a probe is not remembered
                return self._filter_classes(pod, names, now)
            return self._filter_classes_vector(pod, cands, now)
        if len(names) <= SMALL_FILTER:
            return self._filter_small(names, now)
        return self._filter_vector(cands, now)

    def _filter_classes(self, pod: PodFacts, names: list[str], now: float) -> FilterDecision:
        """Per node: the pod's class must fit (docs/architecture.md#decisions); nodes without
        per-class data are decided on avail − reserved as before."""
        table = self.table
        failing = table.failing
        threshold = table.thresholds.threshold
        fits: dict[str, Fit] = {}
        probing = table.fleet_probing(pod.workload_class)

        # A cluster-wide probe depends on every node's count: computed afresh, not remembered.
        fit_of = (
            table.class_fits(pod.workload_class, pod.requests, now)
            if probing is None
            else lambda name: table.fit(name, pod.workload_class, pod.requests, now, probing)
        )

        def reason(name: str) -> str | None:
            fit = fit_of(name)
            if fit is None:
                return failing.get(name)
            fits[name] = fit
            if fit.count >= threshold:
                return None
            report = table.report(name)
            return fit.filter_reason(
                report.classes.feature_names if report and report.classes else (), threshold
            )

        decision = self._filter_small(names, now, reason)
        failed = decision.failed
        decision.fits = lambda: fits
        decision.little_room = lambda limit: (
            [(n, float(f.count)) for n, f in fits.items() if f.count < limit and n not in failed]
            + _little_pods(self.table, [n for n in decision.passed if n not in fits], limit)
        )
        return decision

    def _filter_classes_vector(
        self, pod: PodFacts, cands: Candidates, now: float
    ) -> FilterDecision:
        """``_filter_classes`` over the candidates' table slots: each node's verdict for the
        class comes from the class's remembered fits (``CapacityTable.class_view``), and only
        the fits of nodes that moved on since are computed."""
        table = self.table
        names = cands.names
        look = self._lookup(cands, now)
        safe, fresh = look.safe, look.fresh
        klass, requests = pod.workload_class, pod.requests
        view = table.class_view(klass, requests, now)
        table.refresh_fits(view, klass, requests, now, names, safe, fresh)
        threshold = table.thresholds.threshold
        by_class = fresh & view.has[safe]
        counts = view.count[safe]
        fail = (by_class & (counts < threshold)) | (fresh & ~by_class & table.failing_arr[safe])
        failed: dict[str, str] = {}
        failing = table.failing
        for i in np.flatnonzero(fail).tolist():
            name, slot = names[i], int(safe[i])
            if by_class[i]:
                failed[name] = self._class_reason(view, slot, name, threshold)
            elif (why := failing.get(name)) is not None:  # else its report just moved it
                failed[name] = why
            else:
                fail[i] = False
        unresolvable, stale, missing = self._unknown_candidates(names, look, now)
        keep = ~fail & fresh if unresolvable else ~fail
        passed = list(compress(names, keep.tolist()))  # in the input order: a subsequence
        # What the two callbacks need, taken now: the remembered fits move on with the table.
        decided = np.flatnonzero(by_class)
        fit_objs = view.fit[safe[decided]]
        short = keep & look.known  # stale nodes passed fail-open count by avail − reserved
        frees = np.where(by_class, counts, table.free_arr[safe])

        def fits() -> dict[str, Fit]:
            return dict(zip([names[i] for i in decided.tolist()], fit_objs.tolist(), strict=True))

        def little_room(limit: float) -> list[tuple[str, float]]:
            # ``failed`` as it is when asked: a pod that waited for pods in flight fails the
            # nodes they still hold afterwards (ExtenderService._filter_after_in_flight)
            idx = np.flatnonzero(short & (frees < limit)).tolist()
            return [(names[i], float(frees[i])) for i in idx if names[i] not in failed]

        return FilterDecision(
            passed,
            failed,
            unresolvable,
            stale=stale,
            missing=missing,
            fits=fits,
            little_room=little_room,
            passed_slots=(safe[keep], look.known[keep], cands.version),
        )

    def _class_reason(self, view: ClassFits, slot: int, name: str, threshold: float) -> str:
        """Why the node in ``slot`` fails for the class (remembered with its fit)."""
        why: str | None = view.reason[slot]
        if why is None:
            fit: Fit = view.fit[slot]
            report = self.table.report(name)
            why = fit.filter_reason(
                report.classes.feature_names if report and report.classes else (), threshold
            )
            view.reason[slot] = why
        return why

    def _unknown_candidates(
        self, names: list[str], look: _Lookup, now: float
    ) -> tuple[dict[str, str], int, int]:
        """The candidates without fresh data under the stale-data policy: those failed as
        unresolvable (fail-closed; none fail-open), and how many are stale and missing."""
        unknown = ~look.fresh
        if not unknown.any():
            return {}, 0, 0
        missing = int(np.count_nonzero(~look.known))
        stale = int(np.count_nonzero(unknown)) - missing
        if self.stale_policy is not StaleData.FAIL_CLOSED:
            return {}, stale, missing
        unresolvable = {
            names[i]: self._stale_reason(names[i], now) for i in np.flatnonzero(unknown).tolist()
        }
        return unresolvable, stale, missing

    def _filter_small(
        self, names: list[str], now: float, reason: Callable[[str], str | None] | None = None
    ) -> FilterDecision:
        """One node at a time: the stale-data policy for stale or missing data, else ``reason``
        (the node's precomputed verdict by default) says why a fresh node fails, or None."""
        table = self.table
        received = table.received
        why = reason if reason is not None else table.failing.get
        limit = now - table.thresholds.stale_after
        fail_open = self.stale_policy is StaleData.FAIL_OPEN
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        stale = missing = 0
        for name in names:
            at = received.get(name)
            if at is None or at <= limit:
                if at is None:
                    missing += 1
                else:
                    stale += 1
                if fail_open:
                    passed.append(name)
                else:
                    unresolvable[name] = self._stale_reason(name, now)
                continue
            fails = why(name)
            if fails is None:
                passed.append(name)
            else:
                failed[name] = fails
        return FilterDecision(passed, failed, unresolvable, stale=stale, missing=missing)

    def _filter_vector(self, candidates: list[str] | Candidates, now: float) -> FilterDecision:
        cands = candidates if isinstance(candidates, Candidates) else Candidates(candidates)
        names = cands.names
        look = self._lookup(cands, now)
        fail = look.fresh & self.table.failing_arr[look.safe]
        if not fail.any() and look.fresh.all():
            return FilterDecision(list(names), {}, {})
        failing = self.table.failing
        failed = {names[i]: failing[names[i]] for i in np.flatnonzero(fail).tolist()}
        unresolvable, stale, missing = self._unknown_candidates(names, look, now)
        keep = ~fail & look.fresh if unresolvable else ~fail
        # Keep the input order, so the reply is a subsequence of the request.
        passed = list(compress(names, keep.tolist()))
        slots = (look.safe[keep], look.known[keep], cands.version)
        return FilterDecision(
            passed, failed, unresolvable, stale=stale, missing=missing, passed_slots=slots
        )

    def prioritize(
        self, pod: PodFacts, candidates: list[str] | Candidates, now: float
    ) -> PrioritizeDecision:
        cands = candidates if isinstance(candidates, Candidates) else Candidates(candidates)
        names = cands.names
        exempt = self.exemptions.reason(pod)
        if exempt is not None:
            return PrioritizeDecision(list(map(HostPriority, names, repeat(0))), exempt=exempt)
        if not names:
            return PrioritizeDecision([])
        if self.shape is not None:
            return self._prioritize_shape(self.shape, names, now, pod)
        if self.table.class_nodes and pod.workload_class:
            if len(names) <= SMALL_CLASSES:
                return self._prioritize_small(names, now, pod)
            return self._prioritize_vector(cands, now, pod)
        if len(names) <= SMALL_PRIORITIZE:
            return self._prioritize_small(names, now)
        return self._prioritize_vector(cands, now)

    def _prioritize_small(
        self, names: list[str], now: float, pod: PodFacts | None = None
    ) -> PrioritizeDecision:
        """Spreading: the room left for the pod, as pods of its class where the node reports
        per-class data, else avail − reserved; scaled so that the roomiest node scores 10."""
        table = self.table
        received, free = table.received, table.free
        limit = now - table.thresholds.stale_after
        fit_of = table.class_fits(pod.workload_class, pod.requests, now) if pod else None
        frees: list[float] = []
        stale = missing = 0
        for name in names:
            at = received.get(name)
            if at is None:
                missing += 1
                frees.append(-1.0)
            elif at <= limit:
                stale += 1
                frees.append(-1.0)
            else:
                fit = fit_of(name) if fit_of is not None else None
                frees.append(free[name] if fit is None else fit.room)
        best = max(frees)
        if best <= 0:
            scores = [0] * len(names)
        else:
            scale = MAX_SCORE / best
            # f <= best, so f * scale + 0.5 < 10.5 and int() never exceeds MAX_SCORE.
            scores = [int(f * scale + 0.5) if f > 0 else 0 for f in frees]
        return PrioritizeDecision(
            list(map(HostPriority, names, scores)), stale=stale, missing=missing
        )

    def _prioritize_shape(
        self, shape: ScoreShape, names: list[str], now: float, pod: PodFacts
    ) -> PrioritizeDecision:
        """The score shape of each node's measured utilisation once the pod runs
        (docs/architecture.md#score-shape): per feature from the pod's class fit where the node
        reports per-class data, else in pods from avail; stale or missing nodes score 0."""
        table = self.table
        received = table.received
        limit = now - table.thresholds.stale_after
        per_class = bool(table.class_nodes and pod.workload_class)
        fit_of = table.class_fits(pod.workload_class, pod.requests, now) if per_class else None
        utilisation: dict[str, dict[str, int]] = {}
        scores: list[int] = []
        stale = missing = 0
        for name in names:
            at = received.get(name)
            report = table.report(name)
            if at is None or report is None:
                missing += 1
                scores.append(0)
                continue
            if at <= limit:
                stale += 1
                scores.append(0)
                continue
            fit = fit_of(name) if fit_of is not None else None
            if fit is not None and report.classes is not None:
                used = class_utilisation(
                    report.classes.feature_names, report.classes.full_level, fit.need, fit.free
                )
            else:
                used = pods_utilisation(report.pods, report.avail, table.reserved(name))
            utilisation[name] = used
            scores.append(shape.node_score(used))
        return PrioritizeDecision(
            list(map(HostPriority, names, scores)),
            stale=stale,
            missing=missing,
            utilisation=utilisation,
        )

    def _prioritize_vector(
        self, candidates: list[str] | Candidates, now: float, pod: PodFacts | None = None
    ) -> PrioritizeDecision:
        """``_prioritize_small`` over the candidates' table slots (with ``pod``: per class, by
        the class's remembered fits where the node reports per-class data)."""
        cands = candidates if isinstance(candidates, Candidates) else Candidates(candidates)
        names = cands.names
        table = self.table
        look = self._lookup(cands, now)
        frees = table.free_arr[look.safe]
        if pod is not None:
            klass, requests = pod.workload_class, pod.requests
            view = table.class_view(klass, requests, now)
            table.refresh_fits(view, klass, requests, now, names, look.safe, look.fresh)
            frees = np.where(view.has[look.safe], view.room[look.safe], frees)
        unknown = ~look.fresh
        stale = missing = 0
        if unknown.any():
            missing = int(np.count_nonzero(~look.known))
            stale = int(np.count_nonzero(unknown)) - missing
            frees[unknown] = -1.0
        best = float(frees.max())
        if best <= 0:
            scores = [0] * len(names)
        else:
            # floor(x + 0.5) rounds halves up; negative frees (and unknown nodes) clamp to 0.
            scaled = np.floor(frees * (MAX_SCORE / best) + 0.5)
            scores = scaled.clip(0, MAX_SCORE).astype(np.int64).tolist()
        return PrioritizeDecision(
            list(map(HostPriority, names, scores)), stale=stale, missing=missing
        )

    def little_room(self, d: FilterDecision, limit: float) -> list[tuple[str, float]]:
        """The passed nodes with room for fewer than ``limit`` pods, with that room: pods of the
        filtered pod's class where it was decided by class, else avail − reserved."""
        if d.little_room is not None:
            return d.little_room(limit)
        return _little_pods(self.table, d.passed, limit)

    def preempt(
        self, pod: PodFacts, victims: dict[str, MetaVictims], now: float
    ) -> PreemptDecision:
        # kube-scheduler treats a node returned with no victims as an error (unless the extender
        # is ignorable), so such nodes are never passed back.
        empty = {n: NO_VICTIMS for n, m in victims.items() if not any(p for p in m.Pods or ())}
        if empty:
            victims = {n: m for n, m in victims.items() if n not in empty}
        if (exempt := self.exemptions.reason(pod)) is not None:
            return PreemptDecision(dict(victims), empty, exempt=exempt)
        free = self.table.free
        threshold = self.table.thresholds.threshold
        unknown, stale, missing = self._unknown(set(victims), now)
        kept: dict[str, MetaVictims] = {}
        dropped: dict[str, str] = dict(empty)
        for node, meta in victims.items():
            if node in unknown:
                if self.stale_policy is StaleData.FAIL_OPEN:
                    kept[node] = meta
                else:
                    dropped[node] = self._stale_reason(node, now)
                continue
            freed = len([p for p in meta.Pods or () if p is not None])
            if free[node] + freed >= threshold:
                kept[node] = meta
            else:
                dropped[node] = (
                    f"carico: avail - reserved {fmt(free[node])} + {freed} victim(s)"
                    f" < {fmt(threshold)}"
                )
        return PreemptDecision(kept, dropped, stale=stale, missing=missing)


def _little_pods(table: CapacityTable, passed: list[str], limit: float) -> list[tuple[str, float]]:
    """The ``passed`` nodes whose avail − reserved is below ``limit``, with it."""
    free = table.free
    return [(n, c) for n in passed if (c := free.get(n)) is not None and c < limit]
