"""The grid pricing: its patterns fit, its bounds hold, and it says when it does not apply."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Sequence

import pytest

from repack.bounds import grid_knapsack
from repack.bounds.pricing import knapsack, price
from repack.problem.classes import build_problem
from repack.problem.generator import Cell, instances


def _fits(counts: Sequence[int], weights: Sequence[Sequence[int]], cap: Sequence[int]) -> bool:
    return all(
        sum(n * w[r] for n, w in zip(counts, weights, strict=True)) <= cap[r]
        for r in range(len(cap))
    )


def _brute_force(
    values: Sequence[float],
    weights: Sequence[Sequence[int]],
    limits: Sequence[int],
    cap: Sequence[int],
) -> float:
    best = 0.0
    for counts in itertools.product(*(range(u + 1) for u in limits)):
        if _fits(counts, weights, cap):
            best = max(best, sum(n * v for n, v in zip(counts, values, strict=True)))
    return best


def _instance(seed: int, k: int = 5) -> tuple[list[float], list[tuple[int, ...]], list[int]]:
    rng = random.Random(seed)
    values = [rng.uniform(0.1, 2.0) for _ in range(k)]
    # cpu in millicores, memory in bytes, one pod: the generator's ranges
    weights: list[tuple[int, ...]] = [
        (rng.randint(100, 1000), rng.randint(100, 1000) * 10**6, 1) for _ in range(k)
    ]
    limits = [rng.randint(1, 4) for _ in range(k)]
    return values, weights, limits


@pytest.mark.parametrize("seed", range(8))
def test_the_pattern_fits_and_the_bound_holds(seed: int) -> None:
    values, weights, limits = _instance(seed)
    cap = (2300, 2100 * 10**6, 110)
    best = _brute_force(values, weights, limits, cap)
    found = grid_knapsack.pattern(values, weights, limits, cap)
    upper = grid_knapsack.upper_bound(values, weights, limits, cap)
    assert found is not None and upper is not None
    value, counts = found
    assert _fits(counts, weights, cap)
    assert all(0 <= n <= u for n, u in zip(counts, limits, strict=True))
    assert value == pytest.approx(sum(n * v for n, v in zip(counts, values, strict=True)))
    # rounding up loses at most what the coarse grid hides; rounding down only relaxes.
    # 1e-9: float sums of the same terms in another order
    assert value <= best + 1e-9
    assert upper >= best - 1e-9


@pytest.mark.parametrize("seed", range(4))
def test_on_requests_that_are_whole_steps_the_grid_is_exact(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.uniform(0.1, 2.0) for _ in range(5)]
    # capacities of 128 steps of 25 units: every request a whole number of steps
    weights = [(25 * rng.randint(4, 40), 25 * rng.randint(4, 40)) for _ in range(5)]
    limits = [rng.randint(1, 4) for _ in range(5)]
    cap = (25 * 128, 25 * 128)
    best = _brute_force(values, weights, limits, cap)
    found = grid_knapsack.pattern(values, weights, limits, cap)
    upper = grid_knapsack.upper_bound(values, weights, limits, cap)
    assert found is not None and upper is not None
    assert found[0] == pytest.approx(best)
    assert upper == pytest.approx(best)


def test_more_than_two_binding_resources_are_left_to_the_caller() -> None:
    values = [1.0, 1.0, 1.0]
    weights = [(500, 500, 500), (600, 400, 300), (400, 600, 700)]
    limits = [2, 2, 2]
    cap = (1000, 1000, 1000)
    assert grid_knapsack.pattern(values, weights, limits, cap) is None
    assert grid_knapsack.upper_bound(values, weights, limits, cap) is None


def test_a_resource_without_room_admits_only_pods_that_do_not_ask_for_it() -> None:
    values = [5.0, 1.0]
    weights = [(100, 1), (100, 0)]
    limits = [3, 3]
    found = grid_knapsack.pattern(values, weights, limits, (1000, 0))
    assert found is not None
    assert found[1] == [0, 3]


def test_the_pricing_of_eight_pods_per_node_is_near_the_exact_optimum() -> None:
    """On a 16-node, 8-pods-per-node instance the exact branch and bound needs many thousand
    nodes; the grid's pattern is within a few per cent of its optimum and its bound above it."""
    problem = build_problem(instances(Cell(16, 8, 100, 1), 1)[0][1])
    rng = random.Random(0)
    cap = problem.capacity[0]
    members = list(range(len(problem.classes)))
    duals = {c: rng.uniform(0.0, 1.0) for c in members}
    values = [duals[c] for c in members]
    weights = [problem.classes[c].requests for c in members]
    limits = [problem.classes[c].total for c in members]
    exact = knapsack(values, weights, limits, cap, node_limit=2_000_000)
    found = grid_knapsack.pattern(values, weights, limits, cap)
    upper = grid_knapsack.upper_bound(values, weights, limits, cap)
    assert exact is not None and found is not None and upper is not None
    assert _fits(found[1], weights, cap)
    # 5 %: measured 0-5 % below the optimum on the pricing problems of such instances
    assert 0.95 * exact[0] <= found[0] <= exact[0] + 1e-9
    assert upper >= exact[0] - 1e-9
    # and the pricing keeps the tighter of its bounds: never below the optimum either
    pattern, bound = price(problem, members, cap, duals, 5.0, time.monotonic, mu=None)
    assert pattern is not None and bound >= exact[0] - 1e-9
