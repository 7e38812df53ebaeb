"""An upper bound on the pods a tier can place: the pattern (configuration) LP.

Computed by column generation.

Nodes with the same free capacity and the same eligible classes form a group. A *pattern* is a
set of pod counts that fits one node of a group. The LP chooses how many nodes of each group use
each pattern (fractionally) to maximise placed pods at priority >= p, subject to the placed counts
settled for the higher tiers; disruption limits are dropped, which only loosens the bound. Columns
are priced by a small bounded knapsack per group (``grid_knapsack`` where at most two resources
bind: a column in milliseconds, with a grid bound; where that bound cannot tell whether a column
prices out, or more resources bind, exact branch and bound, or CP-SAT with objective
coefficients rounded up so that its bound over-estimates), and the Lagrangian bound
sum_c max(0, [c counts] - pi_c) * pods_c + sum over groups of nodes x best pattern value under pi
is valid for any pi >= 0, so it holds even when time runs out before the column generation
converges. This LP is far stronger than the per-node capacity rows for
bin-packing-like problems, which is what lets the place phases be proven optimal quickly.
A group whose maximal patterns are few enough to list (``patterns``) is priced exactly by a scan
of them instead; once no pattern of any group prices out, the LP value itself (settled-tier
floors included) is the bound. An LP dive then looks for an integer packing: round a fractional
column up, price again, until the LP is integral (on 8-32 identical nodes with four pods per node
it meets the bound's floor, a proof, in a fraction of a second to a few seconds).
Pure: the clock is a parameter.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from ortools.linear_solver import pywraplp

from repack.bounds.columns import ColumnPool, solution_values
from repack.bounds.patterns import (
    MAX_STATES,
    STATES_PER_SECOND,
    TOP_COLUMNS,
    GroupPatterns,
    Listings,
    group_patterns,
)
from repack.bounds.pricing import greedy_patterns, price
from repack.cpsat.choice import choose_group_patterns
from repack.problem.classes import Assignment, GroupKey, Problem, node_groups_by_key

# the exact pricing (and with it the Farley bound) runs at least every this many rounds while
# cheap greedy columns still improve the LP; set by hand with the branch-and-bound pricing
EXACT_EVERY = 6
# LP dives a packing search tries at most (the first two deterministic, the others randomised);
# set by hand
DIVES = 20
# the first dive raises a 1/DIVE_BATCH of the fractional columns at a time (a batch that goes too
# far is undone); measured: 16 of 20 seeds reached the best-known outcome at 1 s, against 3
DIVE_BATCH = 4
# columns a listed group adds per pricing round, per node (at least TOP_COLUMNS); measured on 8
# and 32 nodes: 24 columns on 32 nodes converge in fewer rounds, and slow 8 nodes down
COLUMNS_PER_NODE = 0.75


def _groups(problem: Problem, active: Sequence[int]) -> dict[GroupKey, list[int]] | None:
    """Every node in a group, or None (overloaded nodes and pods that may only stay where they
    are are not handled by the placement patterns)."""
    groups, others = node_groups_by_key(problem, active)
    return None if others else groups


def placement_bound(
    problem: Problem,
    tier: int,
    placed_floors: Sequence[tuple[int, int]],
    starts: Sequence[Assignment],
    seconds: float,
    clock: Callable[[], float],
    target: int | None = None,
    columns: dict[GroupKey, list[dict[int, int]]] | None = None,
    exact: bool = True,
    listed_only: bool = False,
    packings: list[Assignment] | None = None,
    seed: int = 0,
    listings: Listings | None = None,
) -> int | None:
    """An upper bound on pods placed at priority >= ``tier``, or None if it does not apply.

    ``placed_floors``: (priority q, value) meaning placed(priority >= q) >= value, from the
    higher tiers. ``starts``: feasible assignments whose nodes seed the patterns. ``target``: the
    value to prove (the incumbent's); the search stops as soon as the bound reaches it.
    ``columns`` collects the generated patterns per node group (for ``pattern_solution``).
    ``exact``: groups whose maximal patterns can be listed (``patterns``) are priced by a scan
    of them, so the bound is the pattern LP's exact value; with ``listed_only`` the bound is
    None unless every group is (the knapsack pricing would be too slow). ``packings``: when
    the bound is above ``target``, an LP dive appends its integer packing (if it finds one
    placing more). ``listings``: listings made earlier in the solve, reused and added to.
    """
    deadline = clock() + seconds
    active = problem.active(tier)
    groups = _groups(problem, active)
    if groups is None or not active:
        return None
    pool: ColumnPool[GroupKey] = ColumnPool(columns)
    lp = pool.lp
    if lp is None:
        return None
    placed = {c: lp.NumVar(0, problem.classes[c].total, f"P{c}") for c in active}
    group_rows = {}
    class_rows = {}
    for key, members in groups.items():
        group_rows[key] = lp.Constraint(-lp.infinity(), len(members))
    for c in active:
        class_rows[c] = lp.Constraint(-lp.infinity(), 0)
        class_rows[c].SetCoefficient(placed[c], 1)
    for q, value in placed_floors:
        row = lp.Constraint(value, lp.infinity())
        for c in active:
            if problem.classes[c].priority >= q:
                row.SetCoefficient(placed[c], 1)
    objective = lp.Objective()
    for c in active:
        if problem.classes[c].priority >= tier:
            objective.SetCoefficient(placed[c], 1)
    objective.SetMaximization()

    # every column's (group, pattern, variable), for the dive
    added_columns: list[tuple[GroupKey, dict[int, int], Any]] = []
    # and their variables' indices in the LP
    indices: list[int] = []

    def add_column(key: GroupKey, pattern: dict[int, int]) -> bool:
        var = pool.new(key, pattern, lp.infinity())
        if var is None:
            return False
        group_rows[key].SetCoefficient(var, 1)
        for c, count in pattern.items():
            class_rows[c].SetCoefficient(var, -count)
        added_columns.append((key, pattern, var))
        indices.append(var.index())
        return True

    node_key = {n: key for key, members in groups.items() for n in members}
    for x in starts:
        for n in range(len(problem.node_names)):
            add_column(node_key[n], {c: x[c][n] for c in active if x[c][n]})
    # groups whose maximal patterns are few enough to list: priced exactly by a scan
    listed: dict[GroupKey, GroupPatterns] = {}
    states = min(MAX_STATES, int(STATES_PER_SECOND * seconds))
    for key in groups if exact or listed_only else ():
        listing = group_patterns(problem, active, key[0], key[1], states, deadline, clock, listings)
        if listing is not None:
            listed[key] = listing
        elif listed_only:
            return None
    best_bound = math.inf
    total = sum(problem.classes[c].total for c in active if problem.classes[c].priority >= tier)
    elig = {key: [c for c, ok in zip(active, key[1], strict=True) if ok] for key in groups}

    def converge(root: bool) -> float | None:
        """Column generation until no column improves the LP: its value, or None when the LP
        is infeasible or time runs out. At the root it also tightens ``best_bound``."""
        nonlocal best_bound
        rounds = 0
        while True:
            if lp.Solve() != pywraplp.Solver.OPTIMAL:
                return None
            rounds += 1
            value = objective.Value()
            duals = {c: max(0.0, class_rows[c].dual_value()) for c in active}
            mus = {key: max(0.0, group_rows[key].dual_value()) for key in groups}
            if clock() >= deadline:
                return None
            # cheap columns first; the exact (slow) pricing, which also yields the Farley bound,
            # only when they run dry or every EXACT_EVERY rounds
            added = False
            for key in groups:
                if key in listed:
                    continue  # its exact pricing is cheap
                for pat in greedy_patterns(problem, elig[key], key[0], duals):
                    if sum(duals[c] * k for c, k in pat.items()) > mus[key] + 1e-7:
                        added |= add_column(key, pat)
            if added and rounds % EXACT_EVERY:
                continue
            # Lagrangian bound for these (clamped, so possibly not exactly optimal) multipliers:
            # valid for any pi >= 0, with the settled-tier floors dropped (a relaxation)
            optimal = True
            farley = sum(
                max(0.0, (1.0 if problem.classes[c].priority >= tier else 0.0) - duals[c])
                * problem.classes[c].total
                for c in active
            )
            for key, members in groups.items():
                if key in listed:
                    top = max(TOP_COLUMNS, round(COLUMNS_PER_NODE * len(members)))
                    better, upper = listed[key].price(duals, mus[key], top)
                    for column in better:
                        added |= add_column(key, column)
                    farley += len(members) * max(0.0, upper)
                    optimal &= upper <= mus[key] + 1e-7
                    continue
                left = deadline - clock()
                if left <= 0:
                    return None
                pattern, upper = price(
                    problem, elig[key], key[0], duals, min(left, 0.5), clock, mus[key], root
                )
                farley += len(members) * max(0.0, upper)
                optimal &= upper <= mus[key] + 1e-7
                if (
                    pattern is not None
                    and sum(duals[c] * k for c, k in pattern.items()) > mus[key] + 1e-7
                ):
                    added |= add_column(key, pattern)
            if root:
                # no pattern of any group prices out (proven by the pricing's upper bounds):
                # the LP is optimal over every column, floors included, so its value bounds too
                best_bound = min(best_bound, farley, total, value if optimal else math.inf)
                if target is not None and _floor(best_bound) == target:
                    return value
                if best_bound - value < 1e-6:
                    return value
            if not added:
                return value

    converge(True)
    bound = _floor(best_bound)
    if packings is not None and bound is not None and (target is None or bound > target):
        found = _dive(
            problem,
            converge,
            added_columns,
            lambda: solution_values(lp)[indices],
            placed,
            bound,
            -1 if target is None else target,
            deadline,
            clock,
            seed,
        )
        if found is not None:
            packings.append(_assign(problem, groups, *found))
    return bound


def _dive(
    problem: Problem,
    converge: Callable[[bool], float | None],
    added_columns: list[tuple[GroupKey, dict[int, int], Any]],
    levels: Callable[[], np.ndarray],
    placed: dict[int, Any],
    bound: int,
    floor: int,
    deadline: float,
    clock: Callable[[], float],
    seed: int,
) -> tuple[dict[GroupKey, list[dict[int, int]]], dict[int, int]] | None:
    """An integer pattern choice placing more than ``floor`` pods, by LP diving: round one
    fractional column up (in the first dive, a batch of them: DIVE_BATCH), price again, repeat
    until the LP is integral; a dive whose LP can no longer beat the best found stops, the next
    one goes one column at a time, and those after it break ties at random. Stops at ``bound``
    (then it is optimal), after DIVES dives or at ``deadline``. Returns the patterns chosen per
    group and the pods placed per class."""
    rng = random.Random(seed)
    best: tuple[dict[GroupKey, list[dict[int, int]]], dict[int, int]] | None = None
    for attempt in range(DIVES):
        for _, _, var in added_columns:
            var.SetLb(0)
        batching = attempt == 0
        batched: list[tuple[Any, float]] = []  # the last batch: (variable, its bound before)
        while clock() < deadline:
            value = converge(False)
            if value is None or math.floor(value + 1e-6) <= floor:
                if not batched:
                    break
                # the batch went too far: back to the LP before it, one column at a time
                for var, lb in batched:
                    var.SetLb(lb)
                batched, batching = [], False
                continue
            batched = []
            level = levels()
            fractional = np.flatnonzero(np.abs(level - np.round(level)) > 1e-6)
            if not len(fractional):
                floor = round(value)
                chosen: dict[GroupKey, list[dict[int, int]]] = {}
                for (key, pattern, _), v in zip(added_columns, level.tolist(), strict=True):
                    chosen.setdefault(key, []).extend([pattern] * round(v))
                best = chosen, {c: round(var.solution_value()) for c, var in placed.items()}
                break
            # the column most of the way up (random draws in index order from the third
            # dive; of equals the last)
            score = level[fractional] - np.floor(level[fractional])
            if attempt > 1:
                score = score + 0.5 * np.array([rng.random() for _ in fractional])
            take = len(fractional) // DIVE_BATCH if batching else 0
            if take > 1:
                for i in fractional[np.argsort(-score, kind="stable")[:take]].tolist():
                    var = added_columns[i][2]
                    batched.append((var, var.lb()))
                    var.SetLb(math.floor(level[i]) + 1)
                continue
            i = int(fractional[len(score) - 1 - int(np.argmax(score[::-1]))])
            added_columns[i][2].SetLb(math.floor(level[i]) + 1)
        if floor >= bound or clock() >= deadline:
            break
    return best


def _assign(
    problem: Problem,
    groups: dict[GroupKey, list[int]],
    chosen: dict[GroupKey, list[dict[int, int]]],
    placed: dict[int, int],
) -> Assignment:
    """Counts per node from the patterns ``chosen`` per group, with ``placed`` pods per class
    (patterns may over-supply a class). Each pattern goes to the free node of its group where
    the most of its pods already run (greedy; a minimum-move labelling would refine it)."""
    x = [[0] * len(problem.node_names) for _ in problem.classes]
    left = dict(placed)
    for key, members in groups.items():
        patterns = chosen.get(key, [])
        free = list(members)
        pairs = sorted(
            (
                -sum(min(k, problem.classes[c].current[n]) for c, k in pat.items()),
                j,
                n,
            )
            for j, pat in enumerate(patterns)
            for n in members
        )
        done: set[int] = set()
        for _, j, n in pairs:
            if j in done or n not in free:
                continue
            done.add(j)
            free.remove(n)
            for c, k in patterns[j].items():
                take = min(k, left[c])
                x[c][n] += take
                left[c] -= take
    return x


def _floor(value: float) -> int | None:
    if math.isinf(value):
        return None
    return math.floor(value + 1e-6)


def pattern_solution(
    problem: Problem,
    tier: int,
    placed_floors: Sequence[tuple[int, int]],
    columns: dict[GroupKey, list[dict[int, int]]],
    seconds: float,
    workers: int = 0,
) -> Assignment | None:
    """Price-and-branch: the best integer choice of generated patterns (one per node,
    ``cpsat.choice``), each pattern then given to the node of its group where the most pods
    already run."""
    active = problem.active(tier)
    groups = _groups(problem, active)
    if groups is None or not columns:
        return None
    choice = choose_group_patterns(problem, tier, groups, placed_floors, columns, seconds, workers)
    return None if choice is None else _assign(problem, groups, *choice)
