"""The disruption lower bound never exceeds the true minimum (checked by brute force on small
instances) and proves the fragmentation article's example."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from repack_builders import fragmentation_list

from scheduler_ext.repack.classes import (
    Assignment,
    Problem,
    build_problem,
    current_assignment,
    disruption,
    feasible,
)
from scheduler_ext.repack.disruption_bound import disruption_bound
from scheduler_ext.repack.generator import Cell, instances
from scheduler_ext.repack.heuristics import best_start
from scheduler_ext.repack.snapshot import parse_list


def _all_assignments(problem: Problem) -> Iterator[Assignment]:
    """Every feasible assignment (class counts per node), by recursion over classes and nodes
    with the node loads pruned as they fill."""
    nodes = len(problem.node_names)
    resources = len(problem.resources)
    x = [[0] * nodes for _ in problem.classes]
    load = [[0] * resources for _ in range(nodes)]

    def rec(c: int, n: int, left: int) -> Iterator[Assignment]:
        if c == len(problem.classes):
            yield [list(row) for row in x]
            return
        if n == nodes:
            yield from rec(c + 1, 0, problem.classes[c + 1].total if c + 1 < len(x) else 0)
            return
        cls = problem.classes[c]
        for k in range(0, min(left, problem.node_upper(c, n) if cls.allowed(n) else 0) + 1):
            if any(load[n][r] + k * q > problem.capacity[n][r] for r, q in enumerate(cls.requests)):
                break
            x[c][n] = k
            for r, q in enumerate(cls.requests):
                load[n][r] += k * q
            yield from rec(c, n + 1, left - k)
            for r, q in enumerate(cls.requests):
                load[n][r] -= k * q
        x[c][n] = 0

    yield from rec(0, 0, problem.classes[0].total)


def _brute_force(problem: Problem) -> dict[int, int]:
    """Fewest disruption for each number of placed pods (every class in one tier)."""
    best: dict[int, int] = {}
    for x in _all_assignments(problem):
        assert feasible(problem, x)
        placed = sum(sum(row) for row in x)
        cost = sum(disruption(cls, row) for cls, row in zip(problem.classes, x, strict=True))
        best[placed] = min(cost, best.get(placed, cost))
    return best


# cells small enough to enumerate every assignment; 105 % usage leaves pods that need moves
CELLS = [Cell(2, 4, 100, 1), Cell(2, 4, 105, 1), Cell(3, 3, 105, 1), Cell(2, 5, 100, 1)]


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(3))
def test_disruption_bound_is_never_above_the_brute_force_minimum(cell: Cell, seed: int) -> None:
    snap = instances(cell, 3)[seed][1]
    problem = build_problem(snap)
    tier = problem.tiers[-1]
    minimum = _brute_force(problem)
    most = max(minimum)
    start, _ = best_start(problem, current_assignment(problem), tier)
    starts = [current_assignment(problem), start]
    checked = 0
    for floor in range(min(minimum), most + 1):
        # at least ``floor`` placed: the least disruption over every such count
        truth = min(v for placed, v in minimum.items() if placed >= floor)
        usable = [x for x in starts if sum(sum(r) for r in x) >= floor]
        if not usable:
            continue
        bound = disruption_bound(problem, tier, [(tier, floor)], usable, 10.0, time.monotonic)
        assert 0 <= bound <= truth, (floor, bound, truth)
        checked += 1
    assert checked >= 1


def test_disruption_bound_proves_the_article_example() -> None:
    # one 300m pod pending on three full-ish nodes: exactly one move is needed to place it
    problem = build_problem(parse_list(fragmentation_list()))
    placed_all = sum(cls.total for cls in problem.classes)
    start, ok = best_start(problem, current_assignment(problem), 0)
    assert ok and sum(sum(r) for r in start) == placed_all
    assert disruption_bound(problem, 0, [(0, placed_all)], [start], 10.0, time.monotonic) == 1
