"""A lower bound on the disruption a tier must cause: a per-node pattern LP with removal costs.

The disrupt phase of tier p minimises moves (cost MOVE_COST each) plus evictions (EVICT_COST)
of running pods at priority >= p while the placed counts settled for the tiers above and for p
itself hold. CP-SAT's own LP relaxation of that model is weak (fractional pods can stay and fit
at the same time), so on 8 or more nodes it rarely proves anything. Here every node chooses a
*pattern* P (slots per class it offers afterwards), at a cost of MOVE_COST per current pod of
the node without a slot of its class there (MOVE_COST * sum_c max(0, current_c - P_c)). The
pods placed per class, y_c, are at most the class's pods and at most the slots summed over the
nodes (a covering row, dual pi_c >= 0), and pods that end up nowhere cost EVICT_COST - MOVE_COST
more (e_c >= running_c - y_c). The master LP (one convexity row per node) is solved by column
generation. A slot never raises a pattern's cost, so under pi >= 0 a maximal pattern is always
at least as good as any pattern it contains: on a node whose group's maximal patterns can be
listed (``patterns``, about four pods per node) the pricing is exact, one matrix product over
the listing per group plus each node's precomputed staying pods. Other nodes (too many patterns,
overloaded, or holding pods that may only stay) are priced by a bounded knapsack in which the
first ``current`` pods of a class are worth MOVE_COST more than the rest: on a capacity grid
(``grid_knapsack``) where at most two resources bind, else by branch and bound.

The disruption the higher tiers settled (disruption of priority >= q at most v_q) is a row of
the LP each (dual w_q >= 0): with it, a staying pod of priority p is worth
MOVE_COST * (1 + sum_{q <= p} w_q) =: worth_p in the pricing (worth_c: that of class c), and
an eviction of class c costs (EVICT_COST - MOVE_COST) * worth_c / MOVE_COST. Without these
rows the LP would move a higher tier's pods for free: a weak bound, and dives whose packings
break the settled limits.

The bound returned is the Lagrangian one: for any pi, g, b, w >= 0,

    sum_n (sum_c worth_c current_c,n - max over patterns of n of (pi.P + sum_c worth_c stays_c))
      + sum_c min over y_c in [low_c, total_c] of y_c (pi_c - g_c - sum_{q: c in q} b_q)
      + sum_c min over e_c in [0, running_c] of e_c ((EVICT_COST - MOVE_COST) worth_c
                                                      / MOVE_COST - g_c)
      + sum_c g_c running_c + sum_q b_q floor_q - sum_q w_q v_q

(low_c = total_c for a class every floor forces to be placed in full), so it holds even when
time runs out before the column generation converges. PDB budgets are dropped, which only
weakens the bound.

Solutions: ``disruption_solution`` picks one generated column per node by CP-SAT
(price-and-branch); the bound's LP dives (``packings``) fix, node by node, the column the LP
uses most, price again (undoing the latest fixes when the placed floors stop fitting), and turn
the integral pattern choice into an assignment (``fill``); dives after the first break ties at
random. With an incumbent to beat and every node listed, a choice among the cheapest columns
by reduced cost comes first (on DIVE_FIRST_MIN_NODES nodes or more, after the first dive, which
fixes several nodes a step there) and after every dive that improves (``_reduced_cost_pick``): an
assignment costs at least the LP value plus the reduced costs of its columns, so one cheaper
than the incumbent uses only listed patterns whose reduced cost is below the gap. When they are
few, CP-SAT choosing among them finds the least disruption or proves there is none below the
incumbent; else the cheapest few a node make a quick heuristic (measured on 32 nodes with
frozen upper tiers: the LP's bound met in 0.03-0.16 s, where the first dive, one node a step,
took 0.3 s or more). Measured: on 16 identical nodes with four pods per node (5 000-6 000
maximal patterns) the bound converges in under 0.1 s and the first dive meets it; on 32 such
nodes (75 000-100 000 patterns) the listing takes 0.1-0.35 s (once per solve: the place phase's
is reused), the convergence from each node's KEEPERS columns 0.17-0.25 s (GLOP without scaling
or presolve, ``bounds.GLOP_PARAMETERS``: 0.05 s of it; the rest is pricing and adding columns)
and a dive fixing one node a step 0.1-0.7 s on a 2-core machine, too slow for the 0.35-0.6 s a
1 s solve leaves its disrupt phase; batched, as the first dive is there, 0.05-0.3 s.
Pure: the clock is a parameter. Neighbours: ``bounds`` (ColumnPool, knapsack), ``patterns``,
``solver``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from repack.bounds import grid_knapsack
from repack.bounds.patterns import (
    MAX_STATES,
    TOP_COLUMNS,
    GroupPatterns,
    Listings,
    group_patterns,
)
from repack.bounds.placement import STATES_PER_SECOND, ColumnPool, knapsack, solution_values
from repack.problem.classes import (
    EVICT_COST,
    MOVE_COST,
    Assignment,
    Problem,
    disruption_at,
    node_groups_by_key,
)

EPS = 1e-7
# knapsack search nodes per pricing call; past it the loose bound is used (still valid)
NODE_LIMIT = 3000
# stop when a round did not raise the bound and at least this share of nodes priced loosely
INEXACT_SHARE = 0.25
# columns an LP dive may forbid after fixing them made the placed floors infeasible
BACKTRACKS = 20
# dives from one LP at most, and the largest random bonus a node's LP level gets in a dive
# after the first
DIVES = 10
NOISE = 0.3
# a randomised dive fixes this share of the nodes left per step (measured on 32 identical
# nodes: dives 2-4 times faster than one node per step, as good on average, but the first,
# deterministic dive keeps one node per step: batched, it failed on one of two instances),
# and so does the first one on DIVE_FIRST_MIN_NODES nodes or more
BATCH = 6
# on this many nodes or more the LP's first dive, batched, comes before the reduced-cost pick
# (the pick then follows a dive that improves). Measured on 32 nodes, replaying each 1 s
# solve's disruption LP with 3 s, seeds 0-5 of n32-ppn4-u100-k1: the same 37 moves, proven, in
# 0.38-0.52 s against 0.42-1.72 s (the pick's time depends on which of the LP's equally good
# duals it gets); n32-ppn4-u100-k2's lower tier (a 0.37 s budget there) 0.18-0.19 s against
# 0.31-0.42 s. On 16 nodes with four pods per node it was slower as often as faster
DIVE_FIRST_MIN_NODES = 24
# relative error of a single-precision pattern value (float32 has 24 bits: 6e-8, with margin
# for the sum over a pattern's classes), added to every listed node's best value so the
# Lagrangian bound stays valid
ROUNDING = 1e-5

# the most columns per node a reduced-cost choice takes, the cheapest (past it the choice is a
# heuristic, proving nothing, with at most PICK_SHARE of the time left; measured on 32 nodes:
# 8 met the LP's bound on three frozen instances in 0.03-0.16 s, 16 took up to 0.43 s and
# missed one, 4 left no choice at all on one of two unfrozen ones), and the margin its reduced
# costs get besides ROUNDING (the LP value it starts from is GLOP's, within its tolerance).
# The share: on 32 nodes with one tier at 1 s, the choice needs 0.2 s of the 0.25-0.3 s left
# after the LP converged (it met the LP's bound there, a proof), and the dives after it none
PICK_COLUMNS = 8
PICK_SHARE = 0.8
SLACK_MARGIN = 1e-3

# columns per listed node added before the first round: the patterns keeping the most of its
# pods (measured on 32 identical nodes: 16 cut the rounds to converge from 11 to 6-8 and the
# time by a quarter to a half)
KEEPERS = 16

Clock = Callable[[], float]


def _node_best(
    problem: Problem,
    n: int,
    active: Sequence[int],
    upper: dict[int, int],
    pi: dict[int, float],
    worth: dict[int, float],
    until: float,
    clock: Clock,
) -> tuple[float, dict[int, int] | None, float]:
    """max over patterns a of node n of sum_c pi_c a_c + worth_c * min(a_c, current_c): an
    upper bound on it (exact unless the knapsack search hit its limit or ``until``), the best
    pattern found and that pattern's value."""
    values: list[float] = []
    weights: list[tuple[int, ...]] = []
    limits: list[int] = []
    owner: list[int] = []
    for c in active:
        most = upper[c]
        if most <= 0:
            continue
        cur = min(problem.classes[c].current[n], most)
        # the first ``cur`` pods of the class stay (worth ``worth[c]`` more), the rest are extra
        for value, limit in ((pi[c] + worth[c], cur), (pi[c], most - cur)):
            if value > EPS and limit > 0:
                values.append(value)
                weights.append(problem.classes[c].requests)
                limits.append(limit)
                owner.append(c)
    if not values:
        return 0.0, {}, 0.0
    if problem.overloaded[n]:  # no capacity row there: only current pods, each at most current
        counts = list(limits)
        total = float(sum(v * k for v, k in zip(values, counts, strict=True)))
        return total, _pattern(owner, counts), total
    gridded = grid_knapsack.pattern(values, weights, limits, problem.capacity[n])
    if gridded is not None:  # two binding resources at most: milliseconds, not a search
        found_value, counts = gridded
        ceiling = grid_knapsack.upper_bound(values, weights, limits, problem.capacity[n])
        assert ceiling is not None  # the same resources bind
        return max(found_value, ceiling), _pattern(owner, counts), found_value
    found = knapsack(
        values,
        weights,
        limits,
        problem.capacity[n],
        node_limit=NODE_LIMIT,
        partial=True,
        until=until,
        clock=clock,
    )
    if found is None:  # not reached with partial=True
        return float(sum(v * k for v, k in zip(values, limits, strict=True))), None, 0.0
    found_value, counts, ceiling = found
    # the pattern found is a column even when the search stopped early; the bound stays valid
    return ceiling, _pattern(owner, counts), found_value


def _leaving(problem: Problem, least: int, n: int, pattern: dict[int, int]) -> int:
    """The current pods of node n at priority >= ``least`` without a slot of their class in
    ``pattern``: those that leave it."""
    classes = problem.classes
    return sum(
        max(0, classes[c].current[n] - pattern.get(c, 0))
        for c in problem.running_here[n]
        if classes[c].priority >= least
    )


def _pattern(owner: Sequence[int], counts: Sequence[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for c, k in zip(owner, counts, strict=True):
        if k:
            out[c] = out.get(c, 0) + k
    return out


class _Listed:
    """Exact pricing of the nodes of one group from its listed maximal patterns: per node, the
    pods each pattern lets stay (computed once), so a round costs one matrix product. With
    disruption limits from higher tiers a staying pod is worth more the higher its priority,
    so the staying pods are then kept per priority level of the node's pods."""

    def __init__(
        self, problem: Problem, listing: GroupPatterns, members: Sequence[int], split: bool
    ) -> None:
        self.listing = listing
        self.members = list(members)
        self.priority = [problem.classes[c].priority for c in listing.classes]
        counts = listing.counts
        # pods per pattern, scaled below one pod: a tie-break only
        self.size = counts.sum(axis=1) / np.float32(1 + counts.sum(axis=1).max(initial=0))
        # one contiguous row per class: a node's staying pods sum the few rows of its classes
        # (measured on 32 nodes, 101 861 patterns of 50 classes: 0.04 s for all nodes, the
        # transposed copy most of it, where slicing the pattern-major matrix took 0.07 s)
        by_class = np.ascontiguousarray(counts.T)
        # per node: (priority level, pods of that level each pattern lets stay)
        self.stays: dict[int, list[tuple[int, np.ndarray]]] = {}
        for n in members:
            levels: dict[int, np.ndarray] = {}
            for j, c in enumerate(listing.classes):
                here = problem.classes[c].current[n]
                if not here:
                    continue
                # every pod is worth the same without split: one level (any priority present)
                q = self.priority[j] if split else min(self.priority)
                kept = np.minimum(by_class[j], np.float32(here))
                levels[q] = kept if q not in levels else levels[q] + kept
            if not levels and not split:
                levels[min(self.priority, default=0)] = np.zeros(len(counts), dtype=np.float32)
            self.stays[n] = list(levels.items())

    def keepers(self, n: int, k: int) -> list[int]:
        """The k patterns that let the most of node n's pods stay (fuller ones first among
        equals)."""
        score = sum(kept for _, kept in self.stays[n]) + self.size
        k = min(k, len(score))
        top = np.argpartition(-score, k - 1)[:k]
        return [int(i) for i in top[np.argsort(-score[top])]]

    def values(self, pi: dict[int, float]) -> np.ndarray:
        """pi.P for every listed pattern P, in single precision (the listing's: a tenth of the
        time of a double product); ``exact`` recomputes the one that matters."""
        duals = np.array([pi.get(c, 0.0) for c in self.listing.classes], dtype=np.float32)
        return self.listing.values(duals)

    def node_values(self, n: int, shared: np.ndarray, worth: dict[int, float]) -> np.ndarray:
        """pi.P + the worth of the pods P lets stay on node n (``worth``: of a pod by its
        priority), for every listed pattern P."""
        out = shared
        for q, kept in self.stays[n]:
            out = out + np.float32(worth[q]) * kept
        return out

    def exact(self, n: int, i: int, pi: dict[int, float], worth: dict[int, float]) -> float:
        """pi.P + the worth of the pods pattern i lets stay on node n, in double precision."""
        return float(sum(worth[q] * float(kept[i]) for q, kept in self.stays[n])) + sum(
            pi.get(c, 0.0) * float(k)
            for c, k in zip(self.listing.classes, self.listing.counts[i], strict=True)
            if k
        )


def _listings(
    problem: Problem,
    active: Sequence[int],
    seconds: float,
    deadline: float,
    clock: Clock,
    split: bool,
    listings: Listings | None,
) -> list[_Listed]:
    """The listed groups of the nodes whose maximal patterns are few enough to list (the other
    nodes, overloaded or holding pods that may only stay, are unknown to a listing)."""
    groups, _ = node_groups_by_key(problem, active)
    states = min(MAX_STATES, int(STATES_PER_SECOND * seconds))
    out = []
    for (cap, elig), members in groups.items():
        listing = group_patterns(problem, active, cap, elig, states, deadline, clock, listings)
        if listing is not None and len(listing.counts):
            out.append(_Listed(problem, listing, members, split))
    return out


def fill(problem: Problem, tier: int, chosen: dict[int, dict[int, int]]) -> Assignment:
    """The assignment of one pattern (slots per class) per node: each class's current pods stay
    where a slot of their class is, then the class's other pods (moved or pending) take the
    free slots in node order, up to the class's pods; classes below ``tier`` are left out."""
    x = [[0] * len(problem.node_names) for _ in problem.classes]
    for c in problem.active(tier):
        cls = problem.classes[c]
        slots = {n: pat[c] for n, pat in chosen.items() if pat.get(c, 0)}
        left = cls.total
        for n, k in slots.items():
            x[c][n] = min(k, cls.current[n], left)
            left -= x[c][n]
        for n in sorted(slots):
            more = min(slots[n] - x[c][n], left)
            x[c][n] += more
            left -= more
    return x


@dataclass(frozen=True)
class _Duals:
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


class _Master:
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
        self.objective.SetCoefficient(
            var, MOVE_COST * _leaving(self.problem, self.tier, n, pattern)
        )
        for row, (q, _, _) in zip(self.limit_rows, self.limits, strict=True):
            leaving = _leaving(self.problem, q, n, pattern)
            if leaving:
                row.SetCoefficient(var, MOVE_COST * leaving)
        for c, k in pattern.items():
            if k:
                self.cover_rows[c].SetCoefficient(var, k)
        self.added[n].append((pattern, var))
        self.indices[n].append(var.index())
        return True

    def duals(self) -> _Duals:
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
        return _Duals(
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
        self, listed: Sequence[_Listed], slack: float, most: int
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
        listed: Sequence[_Listed],
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
                ceiling, pattern, found = _node_best(
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
            if (target is not None and _ceil(best) >= target) or clock() >= deadline:
                return None, best
            if stalled:  # the pricing is too loose to move the bound: leave the time to the search
                return None, best

    def dive(
        self,
        listed: Sequence[_Listed],
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


def disruption_bound(
    problem: Problem,
    tier: int,
    placed_floors: Sequence[tuple[int, int]],
    starts: Sequence[Assignment],
    seconds: float,
    clock: Clock,
    target: int | None = None,
    columns: dict[int, list[dict[int, int]]] | None = None,
    packings: list[Assignment] | None = None,
    listed_only: bool = False,
    disruption_limits: Sequence[tuple[int, int]] = (),
    listings: Listings | None = None,
) -> int:
    """A lower bound on the disruption (priority >= ``tier``) of any assignment that places at
    least ``value`` pods at priority >= q for every (q, value) in ``placed_floors``.

    ``starts``: assignments meeting the floors (they make the master LP feasible). ``target``:
    the value to prove (the incumbent's); the search stops as soon as the bound reaches it.
    ``columns`` collects the generated patterns per node (for ``disruption_solution``).
    ``packings``: when the LP converged below ``target``, its dive appends the assignment it
    reaches (the caller checks it against every constraint).
    ``listed_only``: give up (0) unless every node is priced from a listing (the knapsack
    pricing would be too slow).
    ``disruption_limits``: (q, value) meaning disruption(priority >= q) <= value, settled by the
    higher tiers (rows of the LP, so its dives keep to them and the bound counts them).
    ``listings``: listings made earlier in the solve, reused and added to.
    Returns 0 when nothing better is known.
    """
    deadline = clock() + seconds
    active = problem.active(tier)
    if not active or not starts:
        return 0
    master = _Master(problem, tier, placed_floors, columns, disruption_limits)
    if master.lp is None:
        return 0
    for x in starts:
        for n in master.nodes:
            master.add(n, {c: x[c][n] for c in active if x[c][n]})
    listed = _listings(problem, active, seconds, deadline, clock, bool(master.limits), listings)
    exact = sum(len(group.members) for group in listed) == len(master.nodes)
    if listed_only and not exact:
        return 0
    for group in listed:
        for n in group.members:
            for i in group.keepers(n, KEEPERS):
                master.add(n, group.listing.pattern(i))
    value, best = master.converge(listed, deadline, clock, target)
    bound = _ceil(best)
    # converged with exact pricing, the Lagrangian bound meets the LP value up to the pricing's
    # rounding margins; the LP value itself is not used (a column missed by a rounding error
    # could leave it a hair above the true optimum)
    if value is None or packings is None or (target is not None and bound >= target):
        return bound

    def pick(lp_value: float, worse: int) -> tuple[Assignment | None, int]:
        """The exact choice among the columns that can beat ``worse`` (all nodes listed)."""
        return _reduced_cost_pick(
            problem,
            tier,
            master,
            listed,
            lp_value,
            worse,
            placed_floors,
            disruption_limits,
            deadline,
            clock,
        )

    found, worse = None, target
    dive_first = len(master.nodes) >= DIVE_FIRST_MIN_NODES
    if exact and target is not None and not dive_first:
        # first a choice among the cheapest columns by reduced cost: exact when those that can
        # take part in a better assignment are few, else a quick heuristic (measured on 32
        # nodes with frozen upper tiers, 8 columns a node: the LP's bound met in 0.03-0.16 s,
        # where the first dive, one node a step, took 0.3 s or more; batched, as it is from
        # DIVE_FIRST_MIN_NODES, it comes first there)
        found, proven = pick(value, target)
        bound = max(bound, proven)
        if found is not None:
            worse = disruption_at(problem, found, tier)
    if worse is None or bound < worse:
        dived, bound = _dives(
            problem,
            tier,
            master,
            listed,
            deadline,
            clock,
            worse,
            bound,
            pick if exact else None,
            batch_first=dive_first,
        )
        found = dived if dived is not None else found
    if found is not None:
        packings.append(found)
    return bound


def _reduced_cost_pick(
    problem: Problem,
    tier: int,
    master: _Master,
    listed: Sequence[_Listed],
    value: float,
    target: int,
    placed_floors: Sequence[tuple[int, int]],
    disruption_limits: Sequence[tuple[int, int]],
    deadline: float,
    clock: Clock,
) -> tuple[Assignment | None, int]:
    """An assignment better than ``target`` (the incumbent's disruption) chosen by CP-SAT
    among the columns that can be part of one, and what that proves: (assignment or None,
    bound; 0 when nothing is proven).

    Any assignment costs at least the LP value plus the reduced cost of each of its columns
    (at the converged LP's duals), so one costing target - 1 or less uses only columns whose
    reduced cost is at most target - 1 - LP value. Every maximal pattern of every node is
    listed, and a node's pods sit no worse in a maximal pattern containing its own, so when
    all those columns are in the choice (at most PICK_COLUMNS a node), its optimum is the
    phase's: below ``target`` it is proven, and no choice (or none below ``target``) proves
    ``target``. With more, the PICK_COLUMNS cheapest a node make a quick heuristic."""
    slack = target - 1 - value
    if slack < -SLACK_MARGIN:
        return None, target  # the LP value alone rules out anything better
    columns, complete = master.candidates(listed, slack, PICK_COLUMNS)
    left = deadline - clock()
    if not complete:
        left *= PICK_SHARE  # a heuristic then: the dives keep the rest
    if left < 0.005:
        return None, 0
    status, chosen, cost = _choose(
        problem, tier, placed_floors, columns, left, 1, disruption_limits, exact_lp=True
    )
    if status == cp_model.INFEASIBLE:
        return None, target if complete else 0
    if chosen is None:
        return None, 0
    proven = status == cp_model.OPTIMAL and complete
    if cost >= target:
        return None, target if proven else 0
    return fill(problem, tier, chosen), cost if proven else 0


def _dives(
    problem: Problem,
    tier: int,
    master: _Master,
    listed: Sequence[_Listed],
    deadline: float,
    clock: Clock,
    target: int | None,
    bound: int,
    pick: Callable[[float, int], tuple[Assignment | None, int]] | None,
    batch_first: bool = False,
) -> tuple[Assignment | None, int]:
    """The least disruptive assignment of up to DIVES dives from the converged LP (the first
    deterministic, one node a step unless ``batch_first``, the others batched with random
    tie-breaks; each must beat the best so far), until one meets ``bound`` or ``deadline``,
    and the bound. After a dive that improves, ``pick`` (LP value, disruption to beat)
    chooses among the columns that could beat it: an assignment better still, or, when they
    are few, a proof that none is."""
    rng = random.Random(0)
    best: Assignment | None = None
    worse = target
    for attempt in range(DIVES):
        chosen = master.dive(
            listed, deadline, clock, worse, rng if attempt else None, bool(attempt) or batch_first
        )
        improved = False
        if chosen is not None:
            x = fill(problem, tier, chosen)
            cost = disruption_at(problem, x, tier)
            if worse is None or cost < worse:
                best, worse, improved = x, cost, True
        if (worse is not None and worse <= bound) or clock() >= deadline:
            break
        master.reset()
        value, _ = master.converge(listed, deadline, clock, None)
        if value is None:
            break
        if improved and pick is not None and worse is not None:
            picked, proven = pick(value, worse)
            bound = max(bound, proven)
            if picked is not None:
                best, worse = picked, disruption_at(problem, picked, tier)
            if worse <= bound:
                break
    return best, bound


def _ceil(value: float) -> int:
    return max(0, math.ceil(value - 1e-6)) if math.isfinite(value) else 0


def disruption_solution(
    problem: Problem,
    tier: int,
    placed_floors: Sequence[tuple[int, int]],
    columns: dict[int, list[dict[int, int]]],
    seconds: float,
    workers: int = 0,
    disruption_limits: Sequence[tuple[int, int]] = (),
) -> Assignment | None:
    """Price-and-branch: the least disruptive choice of one generated pattern per node that meets
    the placed floors and ``disruption_limits`` (as in ``disruption_bound``), as an assignment
    (``fill``; the caller checks the result against every other constraint)."""
    if any(not columns.get(n) for n in range(len(problem.node_names))):
        return None
    _, chosen, _ = _choose(
        problem, tier, placed_floors, columns, seconds, workers, disruption_limits
    )
    return None if chosen is None else fill(problem, tier, chosen)


def _choose(
    problem: Problem,
    tier: int,
    placed_floors: Sequence[tuple[int, int]],
    columns: dict[int, list[dict[int, int]]],
    seconds: float,
    workers: int,
    disruption_limits: Sequence[tuple[int, int]],
    exact_lp: bool = False,
) -> tuple[Any, dict[int, dict[int, int]] | None, int]:
    """The least disruptive choice of one of ``columns[n]`` per node (every node has some):
    (CP-SAT status, the pattern per node or None, its disruption). ``exact_lp``: a small
    choice to prove, where CP-SAT's full LP relaxation pays."""
    active = problem.active(tier)
    nodes = range(len(problem.node_names))
    m = cp_model.CpModel()
    use = {(n, i): m.new_bool_var(f"u{n}_{i}") for n in nodes for i in range(len(columns[n]))}
    for n in nodes:
        m.add_exactly_one(use[n, i] for i in range(len(columns[n])))
    placed = {}
    evicted = {}
    cost: list[cp_model.LinearExprT] = []
    for c in active:
        cls = problem.classes[c]
        placed[c] = m.new_int_var(0, cls.total, f"y{c}")
        m.add(
            placed[c]
            <= sum(
                pat.get(c, 0) * use[n, i]
                for n in nodes
                for i, pat in enumerate(columns[n])
                if pat.get(c, 0)
            )
        )
        if cls.n_running:
            evicted[c] = m.new_int_var(0, cls.n_running, f"e{c}")
            m.add(evicted[c] >= cls.n_running - placed[c])
            cost.append((EVICT_COST - MOVE_COST) * evicted[c])
    for q, value in placed_floors:
        m.add(sum(placed[c] for c in active if problem.classes[c].priority >= q) >= value)
    for q, value in disruption_limits:
        counted = [c for c in active if problem.classes[c].priority >= q]
        m.add(
            sum(
                MOVE_COST * _leaving(problem, q, n, columns[n][i]) * var
                for (n, i), var in use.items()
            )
            + sum((EVICT_COST - MOVE_COST) * evicted[c] for c in counted if c in evicted)
            <= value
        )
    for (n, i), var in use.items():
        removed = _leaving(problem, tier, n, columns[n][i])
        if removed:
            cost.append(MOVE_COST * removed * var)
    m.minimize(sum(cost))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    solver.parameters.num_workers = workers
    if exact_lp:
        # its LP with every cut: measured on 32 nodes, a choice among 1-10 columns a node was
        # proven in 0.05 s, and not within 1 s at the default level
        solver.parameters.linearization_level = 2
        # ... and branching on that LP: the first solution, the hard part here, comes far
        # sooner (the 35 such choices of the 8-32-node grid at 3 s: 1.45 s in all against
        # 2.57 s, the same outcome each; 32 nodes with one tier: 0.19-0.22 s against 0.45-0.72)
        solver.parameters.search_branching = cp_model.LP_SEARCH
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return status, None, 0
    chosen = {n: columns[n][i] for (n, i), var in use.items() if solver.boolean_value(var)}
    return status, chosen, round(solver.objective_value)
