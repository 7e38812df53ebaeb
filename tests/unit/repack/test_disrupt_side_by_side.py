"""The disrupt phase on several cores (search in a thread beside the bound and the LNS) proves
the same optimum as the single-core sequence, a failure in the search thread is not lost, and
on large listed clusters the bound runs before the search. What a phase did is read from the
steps on its report (``Plan.phases``)."""

from __future__ import annotations

from typing import Any

import pytest

from repack.driver.search import WholeSearch
from repack.driver.solver import SolveOptions, solve
from repack.problem.generator import Cell, instances
from repack.problem.plan import Plan

# instances whose disrupt phase does work (moves are needed) and is proven well under a second
CASES = [(Cell(5, 4, 100, 1), 0), (Cell(5, 4, 100, 1), 2), (Cell(5, 4, 105, 3), 2)]


def _disrupt_steps(plan: Plan) -> list[list[tuple[str, int]]]:
    """Per disrupt phase that ran, its steps' (name, cores)."""
    return [
        [(s.name, s.cores) for s in p.steps]
        for p in plan.phases
        if p.phase == "disrupt" and not p.skipped
    ]


@pytest.mark.parametrize(("cell", "seed"), CASES)
def test_side_by_side_proves_what_one_core_proves(cell: Cell, seed: int) -> None:
    snapshot = dict(instances(cell, 3))[seed]
    # a generous limit: both prove in well under a second; the limit only guards a loaded machine
    one = solve(snapshot, SolveOptions(time_limit=30, workers=1))
    two = solve(snapshot, SolveOptions(time_limit=30, workers=2))
    assert one.status == two.status == "OPTIMAL"
    assert one.after.vector == two.after.vector
    assert one.after.vector[-1] < 0  # pods do move: the disrupt phase had work to do
    disrupt = [p for p in two.phases if p.phase == "disrupt" and not p.skipped]
    assert disrupt and all(p.status == "OPTIMAL" for p in disrupt)
    # on two cores every such phase starts its search beside the other work, on one core of
    # the two; on one core the searches have the core
    assert all(steps[0] == ("cp-sat", 1) for steps in _disrupt_steps(two))
    assert all(("cp-sat", 1) in steps for steps in _disrupt_steps(one))


def test_a_failing_search_thread_raises_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = dict(instances(Cell(5, 4, 100, 1), 3))[0]
    real = WholeSearch.run

    def failing(self: WholeSearch, tier: int, maximise: bool, *args: Any, **kwargs: Any) -> Any:
        if not maximise:
            raise RuntimeError("search failed")
        return real(self, tier, maximise, *args, **kwargs)

    monkeypatch.setattr(WholeSearch, "run", failing)
    with pytest.raises(RuntimeError, match="search failed"):
        solve(snapshot, SolveOptions(time_limit=5, workers=2))


def test_large_listed_clusters_run_the_disruption_lp_before_the_search() -> None:
    # 32 identical nodes with four pods each: the place phase lists the patterns, and the
    # disrupt phase runs the listed LP and its dives alone before any search (a search started
    # beside them is the phase's first step: it starts before the work beside it)
    snapshot = instances(Cell(32, 4, 100, 1), 1)[0][1]
    # seed 0 proves its disruption in about 2 s; the limit only guards a loaded machine
    plan = solve(snapshot, SolveOptions(time_limit=10, workers=2))
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    (steps,) = _disrupt_steps(plan)
    assert steps[0] == ("pattern-lp", 1), steps


@pytest.mark.parametrize("nodes", [8, 16])
def test_unlisted_mid_sized_clusters_undo_moves_on_every_core_under_a_second(nodes: int) -> None:
    # 8 or 16 nodes with eight pods each: the patterns do not list, so a sub-second disrupt
    # phase runs no search, only the undoing of moves, one chain a core, and LNS
    snapshot = instances(Cell(nodes, 8, 105, 1), 1)[0][1]
    plan = solve(snapshot, SolveOptions(time_limit=1, workers=2))
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    assert plan.after.vector > plan.before.vector
    (steps,) = _disrupt_steps(plan)
    assert steps[0] == ("undo-moves", 2), steps
    assert all(name != "cp-sat" for name, _ in steps), steps


def test_unlisted_clusters_below_eight_nodes_keep_their_disrupt_search() -> None:
    # four nodes: the search proves such phases in hundredths of a second
    snapshot = instances(Cell(4, 8, 105, 1), 1)[0][1]
    plan = solve(snapshot, SolveOptions(time_limit=1, workers=2))
    assert plan.after.vector > plan.before.vector
    disrupt = [p for p in plan.phases if p.phase == "disrupt"]
    assert disrupt and disrupt[-1].status == "OPTIMAL"
    (steps,) = _disrupt_steps(plan)
    assert ("cp-sat", 1) in steps, steps
