"""Filter, prioritize and preempt decisions over the capacity table (DESIGN §4.2).

* filter: a node passes iff avail − reserved ≥ threshold; a failed node gets a reason such as
  ``carico: avail 0.4 - reserved 1 < 1``.
* prioritize: score = round(10 · (avail − reserved) / best), clamped to 0..10, where best is the
  largest avail − reserved among the fresh candidates.
* preempt: a node stays a candidate only if avail − reserved plus one pod-unit per victim reaches
  the threshold; its victims are then passed back unchanged. A node with no victims is never
  passed back (kube-scheduler rejects that answer).
* exempt pods (see ``pods``) pass every node, score 0 everywhere and keep every preemption
  candidate; stale or missing data follows the stale-data policy (fail-open: pass, score 0;
  fail-closed: the node fails as unresolvable, since preempting pods there cannot help).

Pure logic: the clock is passed in and nothing here does I/O. The per-node work is one dictionary
set operations and C-level maps over precomputed verdicts. Neighbours: ``capacity`` (verdicts),
``service`` (callers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import filterfalse, repeat

import numpy as np

from scheduler_ext.capacity import CapacityTable, fmt
from scheduler_ext.ledger import StaleData
from scheduler_ext.pods import ExemptionPolicy, PodFacts
from scheduler_ext.wire import HostPriority, MetaVictims

MAX_SCORE = 10  # extenderv1.MaxExtenderPriority
NO_VICTIMS = "carico: no victims given for this node"


@dataclass
class FilterDecision:
    passed: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    exempt: str | None = None
    stale: int = 0  # candidates decided by the stale-data policy because their data was old
    missing: int = 0  # ... or because no report exists


@dataclass
class PrioritizeDecision:
    scores: list[HostPriority]
    exempt: str | None = None
    stale: int = 0
    missing: int = 0


@dataclass
class PreemptDecision:
    kept: dict[str, MetaVictims]
    dropped: dict[str, str] = field(default_factory=dict)  # node -> why it is no candidate
    exempt: str | None = None
    stale: int = 0
    missing: int = 0


class Decider:
    def __init__(
        self,
        table: CapacityTable,
        exemptions: ExemptionPolicy,
        stale_policy: StaleData = StaleData.FAIL_OPEN,
    ) -> None:
        self.table = table
        self.exemptions = exemptions
        self.stale_policy = stale_policy

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

    def filter(self, pod: PodFacts, names: list[str], now: float) -> FilterDecision:
        exempt = self.exemptions.reason(pod)
        if exempt is not None:
            return FilterDecision(list(names), {}, {}, exempt=exempt)
        candidates = set(names)
        failing = self.table.failing
        failing_here = candidates.intersection(failing)
        unknown, stale, missing = self._unknown(candidates, now)
        if not failing_here and not unknown:
            return FilterDecision(list(names), {}, {})
        failing_here -= unknown  # the policy, not old data, decides for those
        failed = {n: failing[n] for n in failing_here}
        unresolvable: dict[str, str] = {}
        excluded = failing_here
        if unknown and self.stale_policy is StaleData.FAIL_CLOSED:
            unresolvable = {n: self._stale_reason(n, now) for n in unknown}
            excluded = failing_here | unknown
        # Keep the input order, so the reply is a subsequence of the request.
        passed = list(filterfalse(excluded.__contains__, names))
        return FilterDecision(passed, failed, unresolvable, stale=stale, missing=missing)

    def prioritize(self, pod: PodFacts, names: list[str], now: float) -> PrioritizeDecision:
        exempt = self.exemptions.reason(pod)
        if exempt is not None:
            return PrioritizeDecision(list(map(HostPriority, names, repeat(0))), exempt=exempt)
        if not names:
            return PrioritizeDecision([])
        # Vectorised: this runs for every pod over up to thousands of candidates. A node without
        # a report reads as NaN; stale nodes (rare: only when some agent stopped) are masked.
        free = self.table.free
        frees = np.fromiter(map(free.get, names, repeat(np.nan)), dtype=float, count=len(names))
        unknown = np.isnan(frees)
        missing = int(np.count_nonzero(unknown))
        stale_nodes = self.table.stale_nodes(now)
        stale = 0
        if stale_nodes:
            is_stale = np.fromiter(map(stale_nodes.__contains__, names), dtype=bool)
            stale = int(np.count_nonzero(is_stale))
            unknown |= is_stale
        if missing or stale:
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
