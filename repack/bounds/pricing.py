"""Pricing a column of the place phase's pattern LP: the best pattern of a node group for the
LP's duals, and an upper bound on every pattern's value.

The pricing problem is a small bounded multi-dimensional knapsack (pod counts per class, worth the
class duals, within the group's free capacity). ``price`` tries the capacity grid of
``grid_knapsack`` first where at most two resources bind (milliseconds, with a grid bound), then
the exact branch and bound of ``knapsack`` (the column generation's convergence rests on it),
and last CP-SAT (``cpsat.knapsack``) with coefficients rounded up so that its bound
over-estimates.
``greedy_patterns`` gives cheap columns between exact rounds. Pure: the clock is a parameter.
See ``docs/architecture.md#repack-phases``. Neighbours: ``placement`` (the LP), ``disruption_lp``
(which prices its nodes with ``knapsack`` too), ``grid_knapsack``, ``patterns``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from repack.bounds import grid_knapsack
from repack.bounds.patterns import binding
from repack.cpsat.knapsack import best_pattern
from repack.problem.classes import Problem

# the mixes of two capacity rows the knapsack search bounds with, besides each row alone (with
# them: 10-100 times fewer search nodes measured on 8-32 nodes' pricing problems)
MIXES = (0.25, 0.5, 0.75)


def knapsack(
    values: Sequence[float],
    weights: Sequence[Sequence[int]],
    limits: Sequence[int],
    cap: Sequence[int],
    node_limit: int = 50_000,
    partial: bool = False,
    until: float = math.inf,
    clock: Callable[[], float] = lambda: 0.0,
) -> tuple[float, list[int], float] | None:
    """Bounded multi-dimensional knapsack by depth-first branch and bound. Returns (best value,
    counts, upper bound) or None when the node limit was hit or ``clock()`` passed ``until``
    (the caller then falls back); with ``partial`` it then returns the best counts found and the
    root's fractional upper bound.
    Hand-written because the pricing problems are tiny and called many times; a CP-SAT model per
    call costs more than the search itself."""
    k = len(values)
    dims = range(len(cap))
    scale = [max(1, c) for c in cap]
    size = [max(w[r] / scale[r] for r in dims) for w in weights]
    order = sorted(range(k), key=lambda i: -values[i] / max(1e-12, size[i]))
    v = [values[i] for i in order]
    w = [weights[i] for i in order]
    u = [limits[i] for i in order]
    # surrogate directions: each resource alone and mixes of each pair (any non-negative mix
    # of the capacity rows is a valid single row; where two resources bind alike, as cpu and
    # memory do at full usage, the mixes bound far tighter: measured 10-100x fewer nodes on
    # 8-32 nodes' pricing problems)
    kept = binding(
        np.asarray(weights, dtype=np.int64).reshape(k, len(cap)), np.asarray(scale), sum(limits)
    )
    directions = [[1.0 if r == s else 0.0 for r in dims] for s in kept]
    for a in kept:
        for b in kept:
            if b <= a:
                continue
            for mix in MIXES:
                directions.append([mix if r == a else 1 - mix if r == b else 0.0 for r in dims])
    surrogate = [
        [sum(d[r] * w[j][r] / scale[r] for r in dims if d[r]) for j in range(k)] for d in directions
    ]
    total = [0.0] * (k + 1)
    for i in range(k - 1, -1, -1):
        total[i] = total[i + 1] + v[i] * u[i]
    # per direction and suffix: the items in order of value per unit of that row, for the
    # fractional (Dantzig) bound of each single-row relaxation
    by_ratio: list[list[list[int]]] = []
    for sw in surrogate:
        per_unit = [v[j] / sw[j] if sw[j] > 0 else math.inf for j in range(k)]
        ranked = sorted(range(k), key=lambda j: -per_unit[j])
        by_ratio.append([[j for j in ranked if j >= i] for i in range(k + 1)])

    def bound(i: int, rem: Sequence[int]) -> float:
        b = total[i]
        for d, sw, ranked in zip(directions, surrogate, by_ratio, strict=True):
            room = sum(d[r] * rem[r] / scale[r] for r in dims if d[r])
            got = 0.0
            for j in ranked[i]:
                need = sw[j] * u[j]
                if need <= room:
                    room -= need
                    got += v[j] * u[j]
                else:
                    got += v[j] * room / sw[j]
                    break
            b = min(b, got)
        return b

    best_value = 0.0
    best: list[int] = [0] * k
    counts = [0] * k
    nodes = 0

    def dfs(i: int, rem: list[int], acc: float) -> bool:
        nonlocal best_value, best, nodes
        nodes += 1
        if nodes > node_limit or (nodes % 512 == 0 and clock() > until):
            return False
        if acc > best_value:
            best_value, best = acc, list(counts)
        if i == k or acc + bound(i, rem) <= best_value + 1e-12:
            return True
        most = u[i]
        for r in dims:
            if w[i][r] > 0:
                most = min(most, rem[r] // w[i][r])
        for n in range(most, -1, -1):
            counts[i] = n
            if not dfs(i + 1, [rem[r] - n * w[i][r] for r in dims], acc + n * v[i]):
                return False
        counts[i] = 0
        return True

    root = [max(0, c) for c in cap]
    complete = dfs(0, root, 0.0)
    if not complete and not partial:
        return None
    out = [0] * k
    for pos, i in enumerate(order):
        out[i] = best[pos]
    return best_value, out, best_value if complete else max(best_value, bound(0, root))


def price(
    problem: Problem,
    members: Sequence[int],
    cap: Sequence[int],
    duals: dict[int, float],
    seconds: float,
    clock: Callable[[], float],
    mu: float | None = None,
    bound: bool = True,
) -> tuple[dict[int, int] | None, float]:
    """A pattern of high (with more than two binding resources: the best) value for the duals,
    or None, and an upper bound on every pattern's value. ``mu``: the group's dual; when the
    pattern found is worth more, the caller adds it and needs no bound (then it may be
    infinite), nor does it with ``bound`` false (an LP dive's rounds)."""
    until = clock() + seconds
    most: dict[int, int] = {}  # the classes worth a slot, and the most pods of each that fit
    for c in members:
        req = problem.classes[c].requests
        ub = min(
            [problem.classes[c].total] + [max(0, cap[r]) // q for r, q in enumerate(req) if q > 0]
        )
        if ub > 0 and duals.get(c, 0.0) > 1e-12:
            most[c] = ub
    if not most:
        return None, 0.0
    useful = list(most)
    args = (
        [duals[c] for c in useful],
        [problem.classes[c].requests for c in useful],
        [most[c] for c in useful],
        cap,
    )
    # two binding resources at most (cpu and memory): the grid pricing, milliseconds a call
    gridded = grid_knapsack.pattern(*args)
    grid_upper = math.inf
    if gridded is not None:
        value, counts = gridded
        found = {c: n for c, n in zip(useful, counts, strict=True) if n}
        if not bound or (mu is not None and value > mu + 1e-7):
            return found, math.inf  # the bound (half the time) is not needed
        relaxed = grid_knapsack.upper_bound(*args)
        grid_upper = max(value, math.inf if relaxed is None else relaxed)
        if mu is None or grid_upper <= mu + 1e-7:
            return found, grid_upper  # no pattern of the group prices out
    # the grid cannot tell whether a pattern prices out (or does not apply): the exact search
    # (the column generation's convergence, and so the LP bound, rests on it)
    quick = knapsack(*args, until=until, clock=clock)
    if quick is not None:
        value, counts, upper = quick
        return {c: n for c, n in zip(useful, counts, strict=True) if n}, min(upper, grid_upper)
    # the search hit its limit: CP-SAT, its model built only now (most calls never get here)
    pattern, ceiling = best_pattern(problem, most, duals, cap, until - clock())
    if pattern is None or ceiling is None:
        # no answer in time: every count at its maximum over-estimates the pattern's value
        return None, min(grid_upper, sum(duals[c] * most[c] for c in most))
    return pattern, min(grid_upper, ceiling)


def greedy_patterns(
    problem: Problem, members: Sequence[int], cap: Sequence[int], duals: dict[int, float]
) -> list[dict[int, int]]:
    """Cheap knapsack solutions for the duals: fill by dual value per unit of each resource
    share, and of the largest share."""
    out = []
    useful = [c for c in members if duals.get(c, 0.0) > 1e-12]
    shares = {
        c: [q / max(1, cap[r]) for r, q in enumerate(problem.classes[c].requests)] for c in useful
    }
    dims = [r for r in range(len(problem.resources)) if problem.resources[r] != "pods"]
    orders: list[list[int]] = [sorted(useful, key=lambda c: -duals[c] / max(1e-9, max(shares[c])))]
    for r in dims:
        ratio = {c: duals[c] / max(1e-9, shares[c][r]) for c in useful}
        orders.append(sorted(useful, key=lambda c: -ratio[c]))
    for order in orders:
        room = [max(0, v) for v in cap]
        pattern: dict[int, int] = {}
        for c in order:
            req = problem.classes[c].requests
            while pattern.get(c, 0) < problem.classes[c].total and all(
                q <= room[r] for r, q in enumerate(req)
            ):
                pattern[c] = pattern.get(c, 0) + 1
                room = [v - q for v, q in zip(room, req, strict=True)]
        out.append(pattern)
    return out
