"""The large-neighbourhood search: never worse, always feasible, higher tiers untouched, and
exact when the neighbourhood is the whole cluster."""

from __future__ import annotations

import random

import pytest
from repack_builders import assert_no_worse, fragmentation_list, lowest_tier_start, ticks

from repack.cpsat import lns
from repack.problem.classes import (
    build_problem,
    current_assignment,
    empty_assignment,
    feasible,
    tier_value,
)
from repack.problem.generator import Cell, generate
from repack.problem.snapshot import parse_list
from repack.search.heuristics import pack_from_scratch


def test_places_the_article_pod_and_then_moves_only_one() -> None:
    problem = build_problem(parse_list(fragmentation_list()))
    x = current_assignment(problem)  # the pending pod does not fit anywhere as things are
    assert tier_value(problem, x, 0)[0] == 9
    # three nodes: every neighbourhood is the whole cluster, so one refill is exact
    placed = lns.improve(problem, x, 0, until=1.0, clock=ticks(0.01), target=10)
    assert feasible(problem, placed)
    assert tier_value(problem, placed, 0)[0] == 10
    # a start that re-packs everything from scratch moves many pods; the disrupt mode keeps
    # all ten placed and comes down to the article's single move
    scratch = pack_from_scratch(problem, empty_assignment(problem), problem.active(0), 0, False)
    assert tier_value(problem, scratch, 0) == (10, -8)
    calm = lns.improve(
        problem, scratch, 0, until=1.0, clock=ticks(0.01), target=1, keep_placed=True
    )
    assert feasible(problem, calm)
    assert tier_value(problem, calm, 0) == (10, -1)


@pytest.mark.parametrize("seed", range(3))
def test_never_worse_and_leaves_higher_tiers_alone(seed: int) -> None:
    problem = build_problem(generate(Cell(8, 4, 100, 2), seed))
    low, x = lowest_tier_start(problem)
    for keep_placed in (False, True):
        y = lns.improve(
            problem, x, low, until=0.6, clock=ticks(0.01), seed=seed, keep_placed=keep_placed
        )
        assert_no_worse(problem, x, y, low)


def test_an_unmet_start_is_returned_unchanged() -> None:
    problem = build_problem(parse_list(fragmentation_list()))
    x = current_assignment(problem)
    x[0][0] += 5  # over capacity: not a valid start
    assert lns.improve(problem, x, 0, until=1.0, clock=ticks(0.01)) is x


def test_linked_neighbourhoods_follow_a_cycle_of_moves() -> None:
    problem = build_problem(generate(Cell(16, 4, 100, 1), 0))
    x = current_assignment(problem)
    own = problem.active(problem.tiers[0])
    # three pods of different classes rotate a -> b -> c -> a
    cycle: list[tuple[int, int]] = []
    for c in own:
        for n in range(len(problem.node_names)):
            if problem.classes[c].current[n] and all(c != d and n != k for d, k in cycle):
                cycle.append((c, n))
                break
        if len(cycle) == 3:
            break
    assert len(cycle) == 3
    nodes = [n for _, n in cycle]
    for i, (c, n) in enumerate(cycle):
        x[c][n] -= 1
        x[c][nodes[(i + 1) % 3]] += 1
    everything = list(range(len(problem.node_names)))
    rng = random.Random(0)
    draws = [sorted(lns.neighbourhood(problem, x, own, everything, rng, True)) for _ in range(400)]
    assert all(len(set(d)) == lns.NEIGHBOURHOOD for d in draws)
    # following the chain covers the cycle in LINKED_SHARE * CHAIN_SHARE = 35 % of the draws
    # (about 140 of 400); a random third node would hit it in under 3 % (0.7 / 14 x 0.5)
    assert sum(d == sorted(nodes) for d in draws) > 100
