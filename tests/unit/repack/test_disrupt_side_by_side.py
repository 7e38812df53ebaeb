"""The disrupt phase on several cores (search in a thread beside the bound and the LNS) proves
the same optimum as the single-core sequence, and a failure in the search thread is not lost."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_ext.repack import solver
from scheduler_ext.repack.generator import Cell, instances
from scheduler_ext.repack.solver import SolveOptions, solve

# instances whose disrupt phase does work (moves are needed) and is proven well under a second
CASES = [(Cell(5, 4, 100, 1), 0), (Cell(5, 4, 100, 1), 2), (Cell(5, 4, 105, 3), 2)]


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


def test_a_failing_search_thread_raises_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = dict(instances(Cell(5, 4, 100, 1), 3))[0]
    real = solver._Phases._cp

    def failing(self: Any, tier: int, maximise: bool, *args: Any, **kwargs: Any) -> Any:
        if not maximise:
            raise RuntimeError("search failed")
        return real(self, tier, maximise, *args, **kwargs)

    monkeypatch.setattr(solver._Phases, "_cp", failing)
    with pytest.raises(RuntimeError, match="search failed"):
        solve(snapshot, SolveOptions(time_limit=5, workers=2))
