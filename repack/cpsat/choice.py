"""Price-and-branch by CP-SAT: integral choices among the columns a pattern LP generated.

``choose_group_patterns`` (the place phase's LP, ``bounds.placement``): how many nodes of each
group take each pattern, at most one a node, to place the most pods at priority >= tier.
``choose_node_patterns`` (the disrupt phase's per-node LP, ``bounds.disruption``): one pattern a
node, for the least disruption, within the placed floors and the disruption limits the higher
tiers settled. The callers turn a choice into an assignment. Pure. See
``docs/architecture.md#repack-phases``. Neighbours: ``bounds.placement``,
``bounds.disruption_choice``, ``run``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ortools.sat.python import cp_model

from repack.cpsat.model import Model
from repack.cpsat.run import configured, found
from repack.problem.classes import EVICT_COST, MOVE_COST, GroupKey, Problem, leaving


def _add_floors(
    m: Model,
    problem: Problem,
    active: Sequence[int],
    placed: dict[int, Any],
    placed_floors: Sequence[tuple[int, int]],
) -> None:
    """The placed counts the tiers settled: placed(priority >= q) >= value, one row each."""
    for q, value in placed_floors:
        m.add(sum(placed[c] for c in active if problem.classes[c].priority >= q) >= value)


def choose_group_patterns(
    problem: Problem,
    tier: int,
    groups: dict[GroupKey, list[int]],
    placed_floors: Sequence[tuple[int, int]],
    columns: dict[GroupKey, list[dict[int, int]]],
    seconds: float,
    workers: int,
) -> tuple[dict[GroupKey, list[dict[int, int]]], dict[int, int]] | None:
    """The choice of generated patterns, at most one a node of each group, that places the most
    pods at priority >= ``tier`` while meeting ``placed_floors``: (the patterns chosen per group,
    the pods placed per class), or None when CP-SAT found none in ``seconds``."""
    active = problem.active(tier)
    m = Model()
    use: dict[tuple[GroupKey, int], cp_model.IntVar] = {}
    for key, members in groups.items():
        pats = columns.get(key, [])
        for i in range(len(pats)):
            use[key, i] = m.new_int_var(0, len(members), f"u{len(use)}")
        if pats:
            m.add(sum(use[key, i] for i in range(len(pats))) <= len(members))
    placed = {}
    for c in active:
        supply = [
            count * use[key, i]
            for key, pats in columns.items()
            for i, pat in enumerate(pats)
            if (count := pat.get(c, 0)) and (key, i) in use
        ]
        placed[c] = m.new_int_var(0, problem.classes[c].total, f"P{c}")
        m.add(placed[c] <= sum(supply))
    _add_floors(m, problem, active, placed, placed_floors)
    m.maximize(sum(placed[c] for c in active if problem.classes[c].priority >= tier))
    solver = configured(max(0.01, seconds), workers)
    if not found(solver.solve(m)):
        return None
    chosen = {
        key: [
            dict(pat)
            for i, pat in enumerate(columns.get(key, []))
            for _ in range(int(solver.value(use[key, i])))
        ]
        for key in groups
    }
    return chosen, {c: int(solver.value(placed[c])) for c in active}


def choose_node_patterns(
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
    m = Model()
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
    _add_floors(m, problem, active, placed, placed_floors)
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
    solver = configured(max(0.01, seconds), workers)
    if exact_lp:
        # its LP with every cut: measured on 32 nodes, a choice among 1-10 columns a node was
        # proven in 0.05 s, and not within 1 s at the default level
        solver.parameters.linearization_level = 2
        # ... and branching on that LP: the first solution, the hard part here, comes far
        # sooner (the 35 such choices of the 8-32-node grid at 3 s: 1.45 s in all against
        # 2.57 s, the same outcome each; 32 nodes with one tier: 0.19-0.22 s against 0.45-0.72)
        solver.parameters.search_branching = cp_model.LP_SEARCH
    status = solver.solve(m)
    if not found(status):
        return status, None, 0
    chosen = {n: columns[n][i] for (n, i), var in use.items() if solver.boolean_value(var)}
    return status, chosen, round(solver.objective_value)
