"""A lower bound on the disruption a tier must cause: a per-node pattern LP with removal costs.

The disrupt phase of tier p minimises moves (cost MOVE_COST each) plus evictions (EVICT_COST)
of running pods at priority >= p while the placed counts settled for the tiers above and for p
itself hold. CP-SAT's own LP relaxation of that model is weak (fractional pods can stay and fit
at the same time), so on 8 or more nodes it rarely proves anything. Here every node chooses a
*pattern*: the pods of each class it holds afterwards. A pattern costs MOVE_COST per current pod
that leaves the node; pods that end up nowhere cost EVICT_COST - MOVE_COST more. The master LP
(one convexity row per node) is solved by column generation, priced per node by a bounded
knapsack in which the first ``current`` pods of a class are worth MOVE_COST more than the rest.

The bound returned is the Lagrangian one,

    sum_c g_c * running_c - sum_c a_c * total_c + sum_q b_q * floor_q
      + sum_n (MOVE_COST * current pods on n - max over patterns of n of sum_c value_c(a_c)),

valid for any a, b >= 0 and 0 <= g <= EVICT_COST - MOVE_COST (the LP duals, clamped), so it holds
even when time runs out before the column generation converges. Disruption limits of the higher
tiers and PDB budgets are dropped, which only weakens the bound. Pure: the clock is a parameter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from scheduler_ext.repack.bounds import ColumnPool, knapsack
from scheduler_ext.repack.classes import EVICT_COST, MOVE_COST, Assignment, Problem

EPS = 1e-7
# knapsack search nodes per pricing call; past it the loose bound is used (still valid)
NODE_LIMIT = 3000
# stop when a round did not raise the bound and at least this share of nodes priced loosely
INEXACT_SHARE = 0.25


def _node_best(
    problem: Problem,
    n: int,
    active: Sequence[int],
    upper: dict[int, int],
    pi: dict[int, float],
    until: float,
    clock: Callable[[], float],
) -> tuple[float, dict[int, int] | None, float]:
    """max over patterns a of node n of sum_c pi_c a_c + MOVE_COST * min(a_c, current_c): an
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
        # the first ``cur`` pods of the class stay (worth MOVE_COST more), the rest are extra
        for value, limit in ((pi[c] + MOVE_COST, cur), (pi[c], most - cur)):
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


def _pattern(owner: Sequence[int], counts: Sequence[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for c, k in zip(owner, counts, strict=True):
        if k:
            out[c] = out.get(c, 0) + k
    return out


def disruption_bound(
    problem: Problem,
    tier: int,
    placed_floors: Sequence[tuple[int, int]],
    starts: Sequence[Assignment],
    seconds: float,
    clock: Callable[[], float],
    target: int | None = None,
    columns: dict[int, list[dict[int, int]]] | None = None,
) -> int:
    """A lower bound on the disruption (priority >= ``tier``) of any assignment that places at
    least ``value`` pods at priority >= q for every (q, value) in ``placed_floors``.

    ``starts``: assignments meeting the floors (they make the master LP feasible). ``target``:
    the value to prove (the incumbent's); the search stops as soon as the bound reaches it.
    ``columns`` collects the generated patterns per node (for ``disruption_solution``).
    Returns 0 when nothing better is known.
    """
    deadline = clock() + seconds
    active = problem.active(tier)
    nodes = range(len(problem.node_names))
    if not active or not starts:
        return 0
    upper = {
        n: {c: problem.node_upper(c, n) if problem.classes[c].allowed(n) else 0 for c in active}
        for n in nodes
    }
    pool: ColumnPool[int] = ColumnPool(columns)
    lp = pool.lp
    if lp is None:
        return 0
    extra = EVICT_COST - MOVE_COST
    node_rows = {n: lp.Constraint(1, 1) for n in nodes}
    # a floor equal to every pod at priority >= q forces each of those classes to be placed in
    # full: equality rows instead (free multipliers, far better duals than the floor row's)
    forced: set[int] = set()
    for q, v in placed_floors:
        members = [c for c in active if problem.classes[c].priority >= q]
        if v >= sum(problem.classes[c].total for c in members):
            forced.update(members)
    avail_rows = {
        c: lp.Constraint(
            problem.classes[c].total if c in forced else -lp.infinity(), problem.classes[c].total
        )
        for c in active
    }
    evict_rows = {}
    objective = lp.Objective()
    for c in active:
        running = problem.classes[c].n_running
        if running:
            e = lp.NumVar(0, running, f"e{c}")
            evict_rows[c] = lp.Constraint(running, lp.infinity())
            evict_rows[c].SetCoefficient(e, 1)
            objective.SetCoefficient(e, extra)
    floors = [
        (q, v)
        for q, v in placed_floors
        if v > 0 and any(c not in forced for c in active if problem.classes[c].priority >= q)
    ]
    floor_rows = [lp.Constraint(v, lp.infinity()) for _, v in floors]
    objective.SetMinimization()

    def add_column(n: int, pattern: dict[int, int]) -> bool:
        # a node may keep nothing: the empty pattern is a column too (one per node row)
        var = pool.new(n, pattern, 1, empty=True)
        if var is None:
            return False
        node_rows[n].SetCoefficient(var, 1)
        cost = MOVE_COST * sum(
            max(0, problem.classes[c].current[n] - pattern.get(c, 0)) for c in active
        )
        objective.SetCoefficient(var, cost)
        for c, k in pattern.items():
            if not k:
                continue
            avail_rows[c].SetCoefficient(var, k)
            if c in evict_rows:
                evict_rows[c].SetCoefficient(var, k)
        # one coefficient per row (SetCoefficient overwrites): the pattern's pods counted there
        for row, (q, _) in zip(floor_rows, floors, strict=True):
            row.SetCoefficient(
                var, sum(k for c, k in pattern.items() if problem.classes[c].priority >= q)
            )
        return True

    for x in starts:
        for n in nodes:
            add_column(n, {c: x[c][n] for c in active if x[c][n]})
    on_node = {n: sum(problem.classes[c].current[n] for c in active) for n in nodes}
    best = 0.0
    while True:
        if lp.Solve() != pywraplp.Solver.OPTIMAL:
            break
        alpha = {
            c: -avail_rows[c].dual_value() if c in forced else max(0.0, -avail_rows[c].dual_value())
            for c in active
        }
        gamma = {c: min(float(extra), max(0.0, row.dual_value())) for c, row in evict_rows.items()}
        beta = [max(0.0, row.dual_value()) for row in floor_rows]
        mu = {n: row.dual_value() for n, row in node_rows.items()}  # read before adding columns
        pi = {
            c: gamma.get(c, 0.0)
            - alpha[c]
            + sum(
                b
                for b, (q, _) in zip(beta, floors, strict=True)
                if problem.classes[c].priority >= q
            )
            for c in active
        }
        bound = (
            sum(g * problem.classes[c].n_running for c, g in gamma.items())
            - sum(alpha[c] * problem.classes[c].total for c in active)
            + sum(b * v for b, (_, v) in zip(beta, floors, strict=True))
        )
        added = False
        inexact = 0
        for n in nodes:
            if clock() >= deadline:
                return _ceil(best)
            value, pattern, found = _node_best(problem, n, active, upper[n], pi, deadline, clock)
            bound += MOVE_COST * on_node[n] - value
            inexact += value > found + EPS
            # reduced cost of the pattern: its cost - pi.a - mu_n = on_node - found - mu_n
            reduced = MOVE_COST * on_node[n] - found - mu[n]
            if pattern is not None and reduced < -EPS:
                added |= add_column(n, pattern)
        stalled = bound <= best and INEXACT_SHARE * len(nodes) <= inexact
        best = max(best, bound)
        if (target is not None and _ceil(best) >= target) or not added or clock() >= deadline:
            break
        if stalled:  # the pricing is too loose to move the bound: leave the time to the search
            break
    return _ceil(best)


def _ceil(value: float) -> int:
    return max(0, math.ceil(value - 1e-6))


def disruption_solution(
    problem: Problem,
    tier: int,
    placed_floors: Sequence[tuple[int, int]],
    columns: dict[int, list[dict[int, int]]],
    seconds: float,
    workers: int = 0,
) -> Assignment | None:
    """Price-and-branch: the least disruptive choice of one generated pattern per node that meets
    the placed floors (the caller checks the result against every other constraint)."""
    active = problem.active(tier)
    nodes = range(len(problem.node_names))
    if any(not columns.get(n) for n in nodes):
        return None
    m = cp_model.CpModel()
    use = {(n, i): m.new_bool_var(f"u{n}_{i}") for n in nodes for i in range(len(columns[n]))}
    for n in nodes:
        m.add_exactly_one(use[n, i] for i in range(len(columns[n])))
    placed = {
        c: sum(
            pat.get(c, 0) * use[n, i]
            for n in nodes
            for i, pat in enumerate(columns[n])
            if pat.get(c, 0)
        )
        for c in active
    }
    cost: list[cp_model.LinearExprT] = []
    for c in active:
        cls = problem.classes[c]
        m.add(placed[c] <= cls.total)
        if cls.n_running:
            evicted = m.new_int_var(0, cls.n_running, f"e{c}")
            m.add(evicted >= cls.n_running - placed[c])
            cost.append((EVICT_COST - MOVE_COST) * evicted)
    for q, value in placed_floors:
        m.add(sum(placed[c] for c in active if problem.classes[c].priority >= q) >= value)
    for (n, i), var in use.items():
        removed = sum(
            max(0, problem.classes[c].current[n] - columns[n][i].get(c, 0)) for c in active
        )
        if removed:
            cost.append(MOVE_COST * removed * var)
    m.minimize(sum(cost))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    solver.parameters.num_workers = workers
    if solver.solve(m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    x = [[0] * len(nodes) for _ in problem.classes]
    for (n, i), var in use.items():
        if solver.boolean_value(var):
            for c, k in columns[n][i].items():
                x[c][n] = k
    return x
