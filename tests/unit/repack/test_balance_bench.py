"""The balancing benchmark's instances and greedy baselines (``carico_app.balance_bench``): the
baselines must keep to the bounds they are compared under, or the comparison means nothing."""

from __future__ import annotations

import pytest

from carico_app.balance_bench import BASELINES, LIMITS, USAGE, instance
from repack.problem.goal_spec import GOALS, GoalSpec
from repack.problem.goals import build_view, fits, moved, touched, value, within


@pytest.mark.parametrize("goal", GOALS)
def test_baselines_keep_to_the_bounds_and_never_lose(goal: str) -> None:
    snap = instance(32, 1, USAGE[goal])
    assert instance(32, 1, USAGE[goal]) == snap  # seeded: the same cluster every run
    view = build_view(snap, GoalSpec(goal, LIMITS))
    where = BASELINES[goal](view)
    assert fits(view, where) and within(view, where)
    assert moved(view, where) <= LIMITS.max_moves
    assert len(touched(view, where)) <= LIMITS.nodes_cap(32)
    assert value(view, where) >= value(view, list(view.home))
    # the generated clusters leave something to gain for every goal's baseline
    assert moved(view, where) > 0
