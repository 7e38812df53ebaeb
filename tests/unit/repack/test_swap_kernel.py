"""The compiled swap-search loops keep their state consistent: the loads are the sums of the
counts, pinned pods never move, placed counts never exceed a class's pods, the undoing of moves
never raises its cost nor changes what is placed, and a seed alone decides a run. The module
also imports, compiled, where numba can write no cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from repack_builders import lowest_tier_start, ticks

from repack.problem.classes import (
    Problem,
    build_problem,
    disruption,
    empty_assignment,
    feasible,
)
from repack.problem.generator import Cell, generate, instances
from repack.search import swap_kernel as kernel
from repack.search import swap_search
from repack.search.heuristics import best_start
from repack.search.swap_state import SwapState

REPO = Path(__file__).resolve().parents[3]


def _tight_state(seed: int = 0) -> tuple[Problem, SwapState]:
    """The state of a search on the first 16-node, 8-pods-per-node instance at 100 % usage,
    from its greedy start with three more pods inserted (so that nodes are overloaded)."""
    ((_, snapshot),) = instances(Cell(16, 8, 100, 1), 1)
    problem = build_problem(snapshot)
    tier = problem.tiers[0]
    start, ok = best_start(problem, empty_assignment(problem), tier)
    assert ok
    state = SwapState(problem, start, tier, seed, swap_search.MU, scaled=False)
    for _ in range(3):
        assert state.insert()
    assert not state.fits()
    return problem, state


def _assert_consistent(state: SwapState) -> None:
    assert (state.load == state.counts.T @ state.demand).all()
    assert (state.counts >= state.pinned).all()
    assert (state.counts >= 0).all()
    assert (state.counts.sum(axis=1) <= state.total).all()


def test_steps_keep_the_loads_and_counts_consistent() -> None:
    _, state = _tight_state()
    pinned = state.pinned.copy()
    for _ in range(20):
        state.advance(25)
        _assert_consistent(state)
        if state.fits():
            state.insert()
    # the tier's own pods are never pinned here, and nothing else is in play
    assert (state.pinned == pinned).all()
    assert state.meta[kernel.STEPS] > 0


def test_a_seed_alone_decides_the_steps() -> None:
    runs = []
    for _ in range(2):
        _, state = _tight_state(seed=7)
        state.advance(300)
        runs.append((state.counts.copy(), state.weight.copy(), int(state.meta[kernel.RANDOM])))
    assert (runs[0][0] == runs[1][0]).all() and (runs[0][1] == runs[1][1]).all()
    assert runs[0][2] == runs[1][2]


@pytest.mark.parametrize("seed", range(3))
def test_cost_is_the_disruption_up_to_a_constant(seed: int) -> None:
    problem = build_problem(generate(Cell(8, 8, 100, 2), seed))
    low, x = lowest_tier_start(problem)
    state = SwapState(problem, x, low, seed, swap_search.UNDO_MU, scaled=True)
    active = problem.active(low)

    def offset() -> int:
        y = state.assignment(x)
        whole = sum(disruption(problem.classes[c], y[c]) for c in active)
        return whole - int(kernel.cost(state.current, state.running, state.counts))

    before = offset()
    for _ in range(10):
        state.advance(20)
        if state.fits():
            state.insert()
        assert offset() == before


@pytest.mark.parametrize("seed", range(3))
def test_undo_rounds_never_raise_the_cost_nor_change_the_placed_counts(seed: int) -> None:
    """The tier's placed count stays (a trade may swap which of its classes is placed), and
    each higher tier's class keeps its count."""
    problem = build_problem(generate(Cell(8, 8, 100, 2), seed))
    low, x = lowest_tier_start(problem)
    packed = swap_search.search(problem, x, low, until=10**6, clock=ticks())
    state = SwapState(problem, packed, low, seed, swap_search.UNDO_MU, scaled=True)
    best = state.counts.copy()
    own = state.own

    def placed() -> tuple[int, list[int]]:
        counts = best.sum(axis=1)
        return int(counts[own].sum()), counts[~own].tolist()

    before = placed()
    assert own.any() and not own.all()
    cost = int(kernel.cost(state.current, state.running, best))
    for _ in range(20):
        done, new = state.undo_rounds(best, cost, -1, 5)
        if done < 0:
            break
        assert new <= cost
        cost = new
        assert placed() == before
        assert int(kernel.cost(state.current, state.running, best)) == cost
        state.counts[:] = best
        kernel.reset(state.fixed, state.state)
        assert state.fits()
        assert feasible(problem, state.assignment(packed), problem.active(low))


def test_imports_where_no_cache_can_be_written() -> None:
    """A read-only image: numba finds no place for its cache, and the module compiles in the
    process instead of failing to import (this takes the whole compilation: seconds)."""
    script = (
        "import numba.core.caching as caching\n"
        "caching.CacheImpl._locator_classes = []\n"
        "from repack.search import swap_kernel\n"
        "print(type(swap_kernel.step._cache).__name__)\n"
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    assert out.stdout.strip() == "NullCache"
