"""Price-and-branch for a disrupt phase: the least disruptive choice of one generated pattern
per node (``cpsat.choice.choose_node_patterns``, which is also the disruption bound's exact
choice among its cheapest columns) among every column the per-node pattern LP generated, and the
assignment a choice of patterns makes (``fill``). Pure. See
``docs/architecture.md#repack-phases``. Neighbours: ``disruption`` (the bound and its dives).
"""

from __future__ import annotations

from collections.abc import Sequence

from repack.cpsat.choice import choose_node_patterns
from repack.problem.classes import Assignment, Problem


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
    _, chosen, _ = choose_node_patterns(
        problem, tier, placed_floors, columns, seconds, workers, disruption_limits
    )
    return None if chosen is None else fill(problem, tier, chosen)
