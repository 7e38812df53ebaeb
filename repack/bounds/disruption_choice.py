"""Price-and-branch for a disrupt phase: the least disruptive choice of one generated pattern
per node, by CP-SAT, and the assignment a choice of patterns makes (``fill``).

``disruption_solution`` chooses among every column the per-node pattern LP generated;
``choose`` is also the disruption bound's exact choice among its cheapest columns. Pure. See
``docs/architecture.md#repack-phases``. Neighbours: ``disruption`` (the bound and its dives),
``node_pricing`` (what a pattern moves off its node).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ortools.sat.python import cp_model

from repack.bounds.node_pricing import leaving
from repack.problem.classes import EVICT_COST, MOVE_COST, Assignment, Problem


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
    _, chosen, _ = choose(
        problem, tier, placed_floors, columns, seconds, workers, disruption_limits
    )
    return None if chosen is None else fill(problem, tier, chosen)


def choose(
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
                MOVE_COST * leaving(problem, q, n, columns[n][i]) * var
                for (n, i), var in use.items()
            )
            + sum((EVICT_COST - MOVE_COST) * evicted[c] for c in counted if c in evicted)
            <= value
        )
    for (n, i), var in use.items():
        removed = leaving(problem, tier, n, columns[n][i])
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
