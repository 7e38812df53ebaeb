"""The place phase of a large cluster on several cores (pattern LP first, then the search in a
thread beside the LNS) proves the same optimum as the single-core sequence, the thread alone
proves a phase the pattern LP leaves open, a failure in the search thread is not lost, and a
short phase keeps a packing aside for a dive that runs out of time. The node threshold is
lowered so that small instances, proven in well under a second, take the large-cluster path."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from repack.bounds.patterns import Listings
from repack.bounds.placement import placement_bound
from repack.driver import lp, place
from repack.driver.context import SolveContext
from repack.driver.dispatch import start_phase
from repack.driver.options import Tuning
from repack.driver.search import WholeSearch
from repack.driver.solver import SolveOptions, solve
from repack.problem.classes import (
    Assignment,
    Problem,
    build_problem,
    current_assignment,
    feasible,
    tier_value,
)
from repack.problem.generator import Cell, instances
from repack.search import swap_search
from repack.search.heuristics import best_start

# multi-tier instances whose lower tiers' place phases have pods to gain
CASES = [(Cell(5, 4, 105, 3), 0), (Cell(5, 4, 105, 3), 2), (Cell(6, 4, 100, 2), 1)]
BESIDE = replace(Tuning(), place_beside_min_nodes=1)


def _no_place_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    """No pattern LP in the place phases: every place phase not met by its start is left to
    the search thread."""
    monkeypatch.setattr(place, "pattern_lp", lambda *args, **kwargs: lp.LpResult(None, None))


@pytest.mark.parametrize("patterns", [True, False])
@pytest.mark.parametrize(("cell", "seed"), CASES)
def test_side_by_side_place_proves_what_one_core_proves(
    cell: Cell, seed: int, patterns: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = dict(instances(cell, 3))[seed]
    # a generous limit: both prove in well under a second; it only guards a loaded machine
    one = solve(snapshot, SolveOptions(time_limit=30, workers=1))
    if not patterns:
        _no_place_lp(monkeypatch)
    two = solve(snapshot, SolveOptions(time_limit=30, workers=2, tuning=BESIDE))
    assert one.status == two.status == "OPTIMAL"
    assert one.after.vector == two.after.vector
    assert one.after.vector > one.before.vector
    place_steps = [p.steps for p in two.phases if p.phase == "place" and not p.skipped]
    assert place_steps  # some place phase had work to do
    # the thread's searches: one worker (the other core runs the LNS)
    searches = [s for steps in place_steps for s in steps if s.name == "cp-sat"]
    assert all(s.cores == 1 for s in searches)
    if patterns:
        # the pattern LP runs alone first, before any search
        assert all(steps[0].name == "pattern-lp" for steps in place_steps)
    else:
        assert searches


def test_a_failing_place_search_thread_raises_in_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snapshot = dict(instances(Cell(5, 4, 105, 3), 3))[0]
    real = WholeSearch.run

    def failing(self: WholeSearch, tier: int, maximise: bool, *args: Any, **kwargs: Any) -> Any:
        if maximise:
            raise RuntimeError("search failed")
        return real(self, tier, maximise, *args, **kwargs)

    monkeypatch.setattr(WholeSearch, "run", failing)
    _no_place_lp(monkeypatch)
    with pytest.raises(RuntimeError, match="search failed"):
        solve(snapshot, SolveOptions(time_limit=5, workers=2, tuning=BESIDE))


def _short_top_tier() -> tuple[Problem, int, Assignment]:
    """32 nodes with four pods each, one tier (a short place phase under a second): the
    problem, its tier and the greedy start the place phase begins from."""
    ((_, snapshot),) = instances(Cell(32, 4, 100, 1), 1)
    problem = build_problem(snapshot)
    tier = problem.tiers[0]
    start, _ = best_start(problem, current_assignment(problem), tier)
    return problem, tier, start


def _short_place_phase(
    problem: Problem, tier: int, start: Assignment, clock: Any, unlisted: bool
) -> tuple[SolveContext, Any]:
    """A 0.9 s place phase of ``tier`` on two cores (what it found is on ``ctx.reports``)."""
    ctx = SolveContext(problem, SolveOptions(time_limit=0.9, workers=2), clock, 0.9)
    ctx.listings.unlisted[tier] = unlisted
    st = start_phase(ctx, tier, "place", [], start, start, 128)
    return ctx, place.side_by_side(ctx, st)


def test_a_short_place_phase_keeps_a_packing_for_a_dive_out_of_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 32 nodes, four pods per node: under a second the pattern LP and its dive get the whole
    # phase; here they use it all and pack nothing, as a dive on a loaded machine may
    problem, tier, start = _short_top_tier()
    now = [0.0]  # a clock that stands still: the swap search ends when it stalls

    def out_of_time(*args: Any, **kwargs: Any) -> int:
        now[0] = 0.9
        return 128  # every pod: the bound proves nothing

    monkeypatch.setattr(lp, "placement_bound", out_of_time)
    placed = {}
    for unlisted in (True, False):
        now[0] = 0.0
        ctx, found = _short_place_phase(problem, tier, start, lambda: now[0], unlisted)
        assert found.solution is not None
        assert feasible(problem, found.solution, problem.active(tier))
        placed[unlisted] = found.value
        names = [s.name for s in ctx.reports[-1].steps]
        assert names == (["pattern-lp"] if unlisted else ["swap-search", "pattern-lp"])
    # unlisted, the swap search ran before (not here): the start is all there is; listed, the
    # packing kept aside places more (measured: 126 of the best-known 127, the start 118)
    assert placed[True] == tier_value(problem, start, tier)[0]
    assert placed[False] > placed[True]


def test_a_packing_aside_that_meets_the_bound_still_gets_the_dive_with_fewer_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 32 identical nodes, four pods per node, under a second, with a clock that stands still:
    # the packing kept aside places every pod the LP allows, but with many moves (the LP's own
    # packing on rotated nodes). The pattern LP still dives, and the phase keeps the packing
    # with fewer moves (as the disrupt phase's start it proves the least disruption sooner)
    problem, tier, start = _short_top_tier()
    packings: list[Assignment] = []
    bound = placement_bound(
        problem, tier, [], [start], 10.0, lambda: 0.0, packings=packings, listings=Listings()
    )
    assert bound is not None and packings and tier_value(problem, packings[0], tier)[0] == bound
    rotated = [row[1:] + row[:1] for row in packings[0]]
    assert feasible(problem, rotated, problem.active(tier))
    monkeypatch.setattr(swap_search, "search", lambda *args, **kwargs: rotated)
    ctx, found = _short_place_phase(problem, tier, start, lambda: 0.0, False)
    steps = ctx.reports[-1].steps
    assert [s.name for s in steps[:3]] == ["swap-search", "pattern-lp", "dive"]
    assert steps[0].value == steps[1].bound == bound  # the packing aside meets the bound
    assert found.solution is not None and found.value == bound and found.optimal
    aside = tier_value(problem, rotated, tier)
    assert tier_value(problem, found.solution, tier)[1] > aside[1]  # fewer moves
