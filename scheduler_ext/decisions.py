"""Filter, prioritize and preempt decisions over the capacity table (DESIGN §4.2).

* filter: a node passes iff avail − reserved ≥ threshold; a failed node gets a reason such as
  ``carico: avail 0.4 - reserved 1 < 1``.
* prioritize: score = round(10 · (avail − reserved) / best), clamped to 0..10, where best is the
  largest avail − reserved among the fresh candidates.
* preempt: a node stays a candidate only if avail − reserved plus one pod-unit per victim reaches
  the threshold; its victims are then passed back unchanged.
* exempt pods (see ``pods``) pass every node, score 0 everywhere and keep every preemption
  candidate; stale or missing data follows the stale-data policy (fail-open: pass, score 0;
  fail-closed: the node fails as unresolvable, since preempting pods there cannot help).

Pure logic: the clock is passed in and nothing here does I/O. The per-node work is one dictionary
lookup into precomputed verdicts. Neighbours: ``capacity`` (verdicts), ``service`` (callers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_ext.capacity import CapacityTable, fmt
from scheduler_ext.ledger import StaleData
from scheduler_ext.pods import ExemptionPolicy, PodFacts
from scheduler_ext.wire import HostPriority, MetaVictims

MAX_SCORE = 10  # extenderv1.MaxExtenderPriority


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

    def filter(self, pod: PodFacts, names: list[str], now: float) -> FilterDecision:
        exempt = self.exemptions.reason(pod)
        if exempt is not None:
            return FilterDecision(list(names), {}, {}, exempt=exempt)
        verdicts = self.table.verdicts
        passed: list[str] = []
        failed: dict[str, str] = {}
        unknown: list[str] = []
        stale = 0
        for name in names:
            v = verdicts.get(name)
            if v is None or now >= v.fresh_until:
                unknown.append(name)
            elif v.passes:
                passed.append(name)
            else:
                failed[name] = v.reason
        unresolvable: dict[str, str] = {}
        missing = 0
        if unknown:
            for name in unknown:
                if name in verdicts:
                    stale += 1
                else:
                    missing += 1
            if self.stale_policy is StaleData.FAIL_OPEN:
                # Keep the input order so the reply is a stable subsequence of the request.
                if len(unknown) == len(names):
                    passed = list(names)
                else:
                    keep = set(unknown)
                    keep.update(passed)
                    passed = [n for n in names if n in keep]
            else:
                unresolvable = {n: self._stale_reason(n, now) for n in unknown}
        return FilterDecision(passed, failed, unresolvable, stale=stale, missing=missing)

    def prioritize(self, pod: PodFacts, names: list[str], now: float) -> PrioritizeDecision:
        if self.exemptions.reason(pod) is not None:
            return PrioritizeDecision(
                [HostPriority(n, 0) for n in names], exempt=self.exemptions.reason(pod)
            )
        verdicts = self.table.verdicts
        frees: list[float] = []
        stale = missing = 0
        for name in names:
            v = verdicts.get(name)
            if v is None:
                missing += 1
                frees.append(-1.0)
            elif now >= v.fresh_until:
                stale += 1
                frees.append(-1.0)
            else:
                frees.append(v.free)
        best = max(frees, default=0.0)
        if best <= 0:
            scores = [HostPriority(n, 0) for n in names]
        else:
            scale = MAX_SCORE / best
            # floor(x + 0.5) rounds halves up; negative frees (and unknown nodes) clamp to 0.
            scores = [
                HostPriority(n, int(f * scale + 0.5) if f > 0 else 0)
                for n, f in zip(names, frees, strict=True)
            ]
        return PrioritizeDecision(scores, stale=stale, missing=missing)

    def preempt(
        self, pod: PodFacts, victims: dict[str, MetaVictims], now: float
    ) -> PreemptDecision:
        if (exempt := self.exemptions.reason(pod)) is not None:
            return PreemptDecision(dict(victims), exempt=exempt)
        verdicts = self.table.verdicts
        threshold = self.table.thresholds.threshold
        kept: dict[str, MetaVictims] = {}
        dropped: dict[str, str] = {}
        stale = missing = 0
        for node, meta in victims.items():
            v = verdicts.get(node)
            if v is None or now >= v.fresh_until:
                if v is None:
                    missing += 1
                else:
                    stale += 1
                if self.stale_policy is StaleData.FAIL_OPEN:
                    kept[node] = meta
                else:
                    dropped[node] = self._stale_reason(node, now)
                continue
            freed = len([p for p in meta.Pods or () if p is not None])
            if v.free + freed >= threshold:
                kept[node] = meta
            else:
                dropped[node] = (
                    f"carico: avail - reserved {fmt(v.free)} + {freed} victim(s) < {fmt(threshold)}"
                )
        return PreemptDecision(kept, dropped, stale=stale, missing=missing)
