"""The per-node pattern LP of a disrupt phase (``DisruptionMaster``): its column generation, its
Lagrangian bound and its LP dives.

Every node chooses a *pattern* P (slots per class it offers afterwards), at a cost of MOVE_COST
per current pod of the node without a slot of its class there. The pods placed per class, y_c,
are at most the class's pods and at most the slots summed over the nodes (a covering row, dual
pi_c >= 0), and pods that end up nowhere cost EVICT_COST - MOVE_COST more (e_c >= running_c -
y_c). The master LP has one convexity row per node; the placed floors settled above are rows,
and so is each disruption limit a higher tier settled (dual w_q >= 0: with it, a staying pod of
priority p is worth MOVE_COST * (1 + sum_{q <= p} w_q) in the pricing, so the LP does not move a
higher tier's pods for free). The bound returned is the Lagrangian one, valid for any duals, so
it holds even when time runs out before the column generation converges (``disruption`` writes
it out). A dive fixes, node by node, the column the LP uses most, prices again, and undoes the
latest fixes when the placed floors stop fitting. Pure: the clock is a parameter. See
``docs/architecture.md#repack-phases``. Neighbours: ``disruption`` (which drives it),
``node_pricing`` (the pricing of a node), ``columns``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.linear_solver import pywraplp

from repack.bounds.columns import ColumnPool, solution_values
from repack.bounds.node_pricing import EPS, ROUNDING, ListedGroup, node_best
from repack.bounds.patterns import TOP_COLUMNS
from repack.problem.classes import EVICT_COST, MOVE_COST, Problem, leaving

Clock = Callable[[], float]
# stop when a round did not raise the bound and at least this share of nodes priced loosely
# (the pricing is then too loose to move the bound: the time goes to the search); set with the
# knapsack pricing, not varied
INEXACT_SHARE = 0.25
# columns an LP dive may forbid after fixing them made the placed floors infeasible; a round
# figure, not varied
BACKTRACKS = 20
# the largest random bonus a node's LP level gets in a dive after the first (ties broken at
# random); set with the randomised dives, not varied
NOISE = 0.3
# a batched dive fixes this share of the nodes left per step (32 identical nodes: 2-4 times
# faster than one node per step, as good on average)
BATCH = 6
# the margin a reduced-cost choice's reduced costs get besides ROUNDING (the LP value it
# starts from is GLOP's, within its tolerance)
SLACK_MARGIN = 1e-3


@dataclass(frozen=True)
class Duals:
    """The duals of a solved master LP: cover rows ``pi``, eviction rows ``gamma``, placed
    floors ``beta``, disruption limits ``weights`` (their negation), node rows ``mu``; what a
    staying pod is worth by priority (``worth``) and by class; per node what keeping all its
    pods would save (``base``)."""

    pi: dict[int, float]
    gamma: dict[int, float]
    beta: list[float]
    weights: list[float]
    mu: dict[int, float]
    worth: dict[int, float]
    by_class: dict[int, float]
    base: dict[int, float]


class DisruptionMaster:
    """The per-node pattern LP of a disrupt phase and its column generation."""

    def __init__(
        self,
        problem: Problem,
        tier: int,
        placed_floors: Sequence[tuple[int, int]],
        columns: dict[int, list[dict[int, int]]] | None,
        disruption_limits: Sequence[tuple[int, int]] = (),
    ) -> None:
        self.problem = problem
        self.tier = tier
        self.active = active = problem.active(tier)
        self.nodes = nodes = range(len(problem.node_names))
        self.pool: ColumnPool[int] = ColumnPool(columns, plain=True)
        lp = self.lp = self.pool.lp
        self.upper = {
            n: {c: problem.node_upper(c, n) if problem.classes[c].allowed(n) else 0 for c in active}
            for n in nodes
        }
        self.extra = EVICT_COST - MOVE_COST
        self.node_rows = {n: lp.Constraint(1, 1) for n in nodes}
        # a floor equal to every pod at priority >= q forces each of those classes to be placed
        # in full: their y_c is fixed at the class's pods (the floor row itself is then dropped)
        forced: set[int] = set()
        for q, v in placed_floors:
            members = [c for c in active if problem.classes[c].priority >= q]
            if v >= sum(problem.classes[c].total for c in members):
                forced.update(members)
        self.low = {c: problem.classes[c].total if c in forced else 0 for c in active}
        self.placed = {c: lp.NumVar(self.low[c], problem.classes[c].total, f"y{c}") for c in active}
        self.cover_rows = {c: lp.Constraint(0, lp.infinity()) for c in active}
        objective = self.objective = lp.Objective()
        self.evict_rows = {}
        evicted = {}
        for c in active:
            self.cover_rows[c].SetCoefficient(self.placed[c], -1)
            running = problem.classes[c].n_running
            if running:
                e = evicted[c] = lp.NumVar(0, running, f"e{c}")
                row = self.evict_rows[c] = lp.Constraint(running, lp.infinity())
                row.SetCoefficient(e, 1)
                row.SetCoefficient(self.placed[c], 1)
                objective.SetCoefficient(e, self.extra)
        # the disruption settled for higher tiers: disruption(priority >= q) <= v, one row each
        # (dual <= 0); a pod it counts is worth that much more where it stays
        self.limits = [
            (q, v, [c for c in active if problem.classes[c].priority >= q and c in evicted])
            for q, v in disruption_limits
        ]
        self.limits = [limit for limit in self.limits if limit[2]]
        self.limit_rows = []
        for _, v, counted in self.limits:
            row = lp.Constraint(-lp.infinity(), v)
            for c in counted:
                row.SetCoefficient(evicted[c], self.extra)
            self.limit_rows.append(row)
        self.floors = [
            (q, v)
            for q, v in placed_floors
            if v > 0 and any(c not in forced for c in active if problem.classes[c].priority >= q)
        ]
        self.floor_rows = []
        for q, v in self.floors:
            row = lp.Constraint(v, lp.infinity())
            for c in active:
                if problem.classes[c].priority >= q:
                    row.SetCoefficient(self.placed[c], 1)
            self.floor_rows.append(row)
        objective.SetMinimization()
        # per node: its columns (pattern, variable), for the dive
        self.added: dict[int, list[tuple[dict[int, int], Any]]] = {n: [] for n in nodes}
        # ... and their variables' indices in the LP
        self.indices: dict[int, list[int]] = {n: [] for n in nodes}

    def add(self, n: int, pattern: dict[int, int]) -> bool:
        # a node may keep nothing: the empty pattern is a column too (one per node row)
        var = self.pool.new(n, pattern, 1, empty=True)
        if var is None:
            return False
        self.node_rows[n].SetCoefficient(var, 1)
        self.objective.SetCoefficient(var, MOVE_COST * leaving(self.problem, self.tier, n, pattern))
        for row, (q, _, _) in zip(self.limit_rows, self.limits, strict=True):
            gone = leaving(self.problem, q, n, pattern)
            if gone:
                row.SetCoefficient(var, MOVE_COST * gone)
        for c, k in pattern.items():
            if k:
                self.cover_rows[c].SetCoefficient(var, k)
        self.added[n].append((pattern, var))
        self.indices[n].append(var.index())
        return True

    def duals(self) -> Duals:
        """The duals of the LP just solved, and what they make a staying pod worth."""
        problem, active = self.problem, self.active
        weights = [max(0.0, -row.dual_value()) for row in self.limit_rows]
        # what one pod of each priority staying where it runs saves: MOVE_COST, plus the
        # duals of the limits that count it
        worth = {
            p: MOVE_COST
            * (1.0 + sum(w for w, (q, _, _) in zip(weights, self.limits, strict=True) if p >= q))
            for p in {problem.classes[c].priority for c in active}
        }
        by_class = {c: worth[problem.classes[c].priority] for c in active}
        return Duals(
            pi={c: max(0.0, row.dual_value()) for c, row in self.cover_rows.items()},
            gamma={c: max(0.0, row.dual_value()) for c, row in self.evict_rows.items()},
            beta=[max(0.0, row.dual_value()) for row in self.floor_rows],
            weights=weights,
            mu={n: row.dual_value() for n, row in self.node_rows.items()},
            worth=worth,
            by_class=by_class,
            # per node: what keeping every pod it runs would save (its pattern's cost is that
            # minus the worth of the pods the pattern lets stay)
            base={
                n: sum(
                    by_class[c] * problem.classes[c].current[n]
                    for c in problem.running_here[n]
                    if c in by_class
                )
                for n in self.nodes
            },
        )

    def candidates(
        self, listed: Sequence[ListedGroup], slack: float, most: int
    ) -> tuple[dict[int, list[dict[int, int]]], bool]:
        """Per node, the listed patterns whose reduced cost at the duals of the LP just solved
        is at most ``slack`` (at most ``most``, the cheapest), and whether that is all of them
        on every node (every node listed, none cut short by ``most``)."""
        duals = self.duals()
        out: dict[int, list[dict[int, int]]] = {}
        complete = True
        for group in listed:
            shared = group.values(duals.pi)
            for n in group.members:
                # reduced cost = the pattern's cost - its dual value - the node's dual; the
                # single-precision values may be off by ROUNDING: a column too many is harmless
                values = group.node_values(n, shared, duals.worth)
                reduced = duals.base[n] - values - duals.mu[n]
                margin = SLACK_MARGIN + ROUNDING * (1 + np.abs(values))
                keep = np.flatnonzero(reduced <= slack + margin)
                if len(keep) > most:
                    keep = keep[np.argpartition(reduced[keep], most - 1)[:most]]
                    complete = False
                out[n] = [group.listing.pattern(int(i)) for i in keep]
        complete &= len(out) == len(self.nodes) and all(out.values())
        return out, complete

    def converge(
        self,
        listed: Sequence[ListedGroup],
        deadline: float,
        clock: Clock,
        target: int | None,
        skip: frozenset[int] = frozenset(),
    ) -> tuple[float | None, float]:
        """Column generation (nodes in ``skip`` are not priced) until no column prices out,
        ``target`` is proven or ``deadline``: (the LP value, or None when it is infeasible or
        time ran out; the best Lagrangian bound met, -inf with ``skip``)."""
        problem, active = self.problem, self.active
        by_node = {n: group for group in listed for n in group.members}
        best = -math.inf
        while True:
            if self.lp.Solve() != pywraplp.Solver.OPTIMAL:
                return None, best
            value = self.objective.Value()
            duals = self.duals()
            pi, gamma, beta, weights, mu = (
                duals.pi,
                duals.gamma,
                duals.beta,
                duals.weights,
                duals.mu,
            )
            worth, by_class, base = duals.worth, duals.by_class, duals.base
            bound = sum(g * problem.classes[c].n_running for c, g in gamma.items())
            bound += sum(b * v for b, (_, v) in zip(beta, self.floors, strict=True))
            bound -= sum(w * v for w, (_, v, _) in zip(weights, self.limits, strict=True))
            for c in active:
                cls = problem.classes[c]
                pull = sum(
                    b for b, (q, _) in zip(beta, self.floors, strict=True) if cls.priority >= q
                )
                slope = pi[c] - gamma.get(c, 0.0) - pull
                bound += slope * (self.low[c] if slope > 0 else cls.total)
                if c in gamma:
                    # an eviction costs self.extra in the objective and in every limit counting it
                    extra = self.extra * by_class[c] / MOVE_COST
                    bound += min(0.0, extra - gamma[c]) * cls.n_running
            added = False
            inexact = 0
            for group in listed:
                shared = group.values(pi)
                for n in group.members:
                    if n in skip:
                        continue
                    values = group.node_values(n, shared, worth)
                    i = int(np.argmax(values))
                    # the single-precision maximum may miss the true one by a rounding error
                    ceiling = group.exact(n, i, pi, worth) + ROUNDING * (1 + float(values[i]))
                    bound += base[n] - ceiling
                    if base[n] - values[i] - mu[n] >= -EPS:
                        continue  # no column of n prices out
                    # the patterns that price out, best first (at most TOP_COLUMNS)
                    good = np.flatnonzero(values > base[n] - mu[n] + EPS)
                    if len(good) > TOP_COLUMNS:
                        good = good[np.argpartition(-values[good], TOP_COLUMNS - 1)[:TOP_COLUMNS]]
                    for i in good[np.argsort(-values[good])]:
                        added |= self.add(n, group.listing.pattern(int(i)))
            for n in self.nodes:
                if n in skip or n in by_node:
                    continue
                if clock() >= deadline:
                    return None, best
                ceiling, pattern, found = node_best(
                    problem, n, active, self.upper[n], pi, by_class, deadline, clock
                )
                bound += base[n] - ceiling
                inexact += ceiling > found + EPS
                # reduced cost of the pattern: its cost - pi.a - mu_n = base - found - mu_n
                if pattern is not None and base[n] - found - mu[n] < -EPS:
                    added |= self.add(n, pattern)
            stalled = bound <= best and INEXACT_SHARE * len(self.nodes) <= inexact
            if not skip:
                best = max(best, bound)
            if not added:
                return value, best
            if (target is not None and ceil_bound(best) >= target) or clock() >= deadline:
                return None, best
            if stalled:  # the pricing is too loose to move the bound: leave the time to the search
                return None, best

    def dive(
        self,
        listed: Sequence[ListedGroup],
        deadline: float,
        clock: Clock,
        worse: int | None,
        rng: random.Random | None = None,
        batch: bool = False,
    ) -> dict[int, dict[int, int]] | None:
        """An integral choice of one column per node by LP diving: fix the column the LP uses
        most on a node not fixed yet (with ``rng``, ties broken at random: levels get a random
        bonus of up to NOISE; with ``batch``, the best 1/BATCH of the nodes left are fixed at
        once, which is several times faster), price the other nodes again, repeat. When a fix
        makes the LP infeasible (the placed floors no longer fit), the latest fixes are undone
        and their columns forbidden, at most BACKTRACKS in all. Gives up when the LP cannot beat
        ``worse`` any more, stays infeasible, or at ``deadline``."""
        fixed: dict[int, dict[int, int]] = {}
        stack: list[tuple[int, Any]] = []  # the fixes in order: (node, variable)
        backtracks = BACKTRACKS
        while clock() < deadline:
            # read every level first: changing a bound invalidates the LP's solution
            top: dict[int, tuple[float, dict[int, int], Any]] = {}
            levels = solution_values(self.lp)
            for n in self.nodes:
                if n in fixed or not self.added[n]:
                    continue
                here = levels[self.indices[n]]
                i = int(np.argmax(here))  # of equals the first
                pattern, var = self.added[n][i]
                top[n] = (float(here[i]), pattern, var)
            # every node whose LP already picks one column in full is fixed to it at once, then
            # the node with the largest fractional column
            whole = [n for n, (level, _, _) in top.items() if level > 1 - 1e-6]
            if not whole and top:
                bonus = {n: NOISE * rng.random() if rng else 0.0 for n in top}
                ranked = sorted(top, key=lambda n: -(top[n][0] + bonus[n]))
                whole = ranked[: max(1, len(ranked) // BATCH) if batch else 1]
            for n in whole:
                fixed[n] = top[n][1]
                top[n][2].SetLb(1)
                stack.append((n, top[n][2]))
            if len(fixed) == len(self.nodes):
                return fixed
            value, _ = self.converge(listed, deadline, clock, None, frozenset(fixed))
            while value is None and backtracks and stack and clock() < deadline:
                # the floors cannot be met with that column: forbid it and price again
                backtracks -= 1
                n, var = stack.pop()
                del fixed[n]
                var.SetLb(0)
                var.SetUb(0)
                value, _ = self.converge(listed, deadline, clock, None, frozenset(fixed))
            if value is None or (worse is not None and value > worse - 1 + 1e-6):
                return None
        return None

    def reset(self) -> None:
        """Undo every fix and ban of a dive."""
        for columns in self.added.values():
            for _, var in columns:
                var.SetBounds(0, 1)


def ceil_bound(value: float) -> int:
    return max(0, math.ceil(value - 1e-6)) if math.isfinite(value) else 0
