"""A lower tier's place phase below tiers that may disrupt nothing: ``freeze_above`` takes their
running pods off the nodes, assignments map both ways, and the pattern LP then dives there,
which proves the place phase of two-tier instances where it could not dive before."""

from __future__ import annotations

from typing import Any

import pytest
from repack_builders import MB, simple_snapshot

from repack.cpsat.model import Fix
from repack.driver import lp
from repack.driver.context import SolveContext
from repack.driver.dispatch import start_phase
from repack.driver.freeze import Freezes, Frozen
from repack.driver.listing import PatternListings
from repack.driver.lp import pattern_lp
from repack.driver.options import Tuning
from repack.driver.solver import SolveOptions, solve
from repack.problem.classes import (
    build_problem,
    current_assignment,
    feasible,
    freeze_above,
)
from repack.problem.generator import Cell, instances


def test_freeze_above_takes_the_higher_tiers_running_pods_off_the_nodes() -> None:
    problem = build_problem(instances(Cell(8, 4, 105, 2), 1)[0][1])
    low = problem.tiers[-1]
    frozen = freeze_above(problem, low)
    assert frozen is not None
    above = [c for c, cls in enumerate(problem.classes) if cls.priority > low]
    assert above and any(problem.classes[c].n_running for c in above)
    for c, (was, now) in enumerate(zip(problem.classes, frozen.classes, strict=True)):
        assert (now.requests, now.priority, now.pending) == (
            was.requests,
            was.priority,
            was.pending,
        )
        assert now.n_running == (0 if c in above else was.n_running)
    for n, (room, left) in enumerate(zip(problem.capacity, frozen.capacity, strict=True)):
        held = [
            sum(problem.classes[c].requests[r] * problem.classes[c].current[n] for c in above)
            for r in range(len(problem.resources))
        ]
        assert [a - b for a, b in zip(room, left, strict=True)] == held
    # the lower tier's current pods fit what the frozen pods leave, and adding the frozen pods
    # back gives the current placement of the whole problem
    mapping = Frozen(problem, low, frozen)
    lower = mapping.down(current_assignment(problem))
    assert lower is not None and feasible(frozen, lower)
    assert mapping.up(lower) == current_assignment(problem)
    assert mapping.held(low) == sum(problem.classes[c].n_running for c in above)
    # an assignment that moved a frozen pod has no image
    moved = current_assignment(problem)
    c = next(c for c in above if problem.classes[c].n_running)
    n = problem.classes[c].running_nodes[0]
    moved[c][n] -= 1
    assert mapping.down(moved) is None
    assert Freezes(problem).of(low, []) is None  # nothing settled: nothing frozen


def test_an_overloaded_node_is_never_frozen() -> None:
    # node a runs more than it has (its allocatable shrank): its load is not a free capacity
    snapshot = simple_snapshot(
        [("a", 1000, 1000 * MB), ("b", 1000, 1000 * MB)],
        [
            ("p", 800, 100 * MB, "a", 100),
            ("q", 800, 100 * MB, "a", 0),
            ("r", 500, 100 * MB, None, 0),
        ],
    )
    problem = build_problem(snapshot)
    assert any(problem.overloaded)
    assert freeze_above(problem, 0) is None


def test_a_place_phase_below_a_frozen_tier_dives_and_is_proven() -> None:
    # 16 identical nodes, two tiers: the upper tier has nothing to gain (every pod placed, no
    # move), so its disruption is settled at 0; the lower tier's place phase then dives on the
    # frozen problem and meets its bound (before, the pattern LP only bounded it there and the
    # phase ended unproven at 1 s, one pod short)
    snapshot = instances(Cell(16, 4, 95, 2), 1)[0][1]
    # proven in about 0.2 s; the limit only guards a loaded machine
    plan = solve(snapshot, SolveOptions(time_limit=30, workers=2))
    low = min(c.priority for c in build_problem(snapshot).classes)
    place = [p for p in plan.phases if p.tier == low and p.phase == "place"]
    assert place and place[0].status == "OPTIMAL" and place[0].value == place[0].bound
    # the lower tier's pattern LP dived, and its packing met the bound
    names = [s.name for s in place[0].steps]
    assert names[:2] == ["pattern-lp", "dive"], names
    assert place[0].steps[1].value == place[0].bound
    upper = [p for p in plan.phases if p.tier > low and p.phase == "disrupt"]
    assert upper and all(p.value == 0 for p in upper)
    assert plan.status == "OPTIMAL"


def test_a_short_disrupt_phase_below_frozen_tiers_gets_its_bound_when_the_patterns_list() -> None:
    # a sub-second disrupt phase on 32 nodes is normally left to the LNS; below frozen tiers
    # its pattern LP covers only the lower tier's pods, so it runs when their patterns list
    def quick(cell: Cell, value: int) -> bool:
        problem = build_problem(instances(cell, 1)[0][1])
        top, low = problem.tiers[0], problem.tiers[-1]
        listings = PatternListings(problem, Freezes(problem), Tuning(), lambda: 0.0)
        return listings.quick_disrupt_bound(low, [Fix("disruption", top, "==", value)], 0.9)

    assert quick(Cell(32, 4, 90, 2), 0)
    assert not quick(Cell(32, 4, 90, 2), 1)  # the upper tier may move a pod: nothing frozen
    # eight pods per node: what the frozen pods leave still has too many patterns to list in
    # a quarter of the phase (the clock here never moves: the state cap decides)
    assert not quick(Cell(32, 8, 95, 2), 0)


def test_a_short_disrupt_phase_of_the_top_tier_gets_its_bound_when_its_place_phase_listed() -> None:
    # no tier above: the LP holds only this tier's pods, as below frozen tiers; it needs the
    # place phase's listing and QUICK_TOP_SECONDS a node
    problem = build_problem(instances(Cell(32, 4, 100, 1), 1)[0][1])
    tier = problem.tiers[0]
    placed = [Fix("placed", tier, "==", 127)]
    enough = Tuning().quick_top_seconds * len(problem.node_names)

    def quick(place: str, seconds: float, fixes: list[Fix]) -> bool:
        listings = PatternListings(problem, Freezes(problem), Tuning(), lambda: 0.0)
        if place == "listed":  # as a 1 s solve's place phase does
            assert listings.place_listed(tier, [], 1.0)
        elif place == "unlisted":
            listings.unlisted[tier] = True
        return listings.quick_disrupt_bound(tier, fixes, seconds)

    assert quick("listed", enough, placed)
    assert not quick("listed", 0.9 * enough, placed)  # too short: the undoing of moves gets it
    assert not quick("unlisted", enough, placed)  # the place phase found that they do not list
    assert not quick("none", enough, placed)  # ... or never asked (nothing to price from)
    # a lower tier whose tiers above may disrupt: not the top, and nothing frozen
    assert not quick("listed", enough, [*placed, Fix("disruption", tier + 1, "<=", 3)])


def test_a_price_and_branch_packing_is_not_built_without_the_time_to_build_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # building CP-SAT's choice of a pattern a node takes about PACK_SECONDS_PER_COLUMN a
    # column: given less, the phase keeps what it has rather than overrun its time
    problem = build_problem(instances(Cell(16, 4, 100, 1), 1)[0][1])
    tier = problem.tiers[0]
    x = current_assignment(problem)
    generated = 500
    built: list[float] = []

    def bound(*args: Any, columns: dict[int, list[dict[int, int]]], **kwargs: Any) -> int:
        # a bound below the target that leaves ``generated`` columns and no dive
        for i in range(generated):
            columns.setdefault(i % len(problem.node_names), []).append({0: i})
        return 1

    def packing(*args: Any, **kwargs: Any) -> None:
        built.append(args[4])  # its seconds

    monkeypatch.setattr(lp, "disruption_bound", bound)
    monkeypatch.setattr(lp, "disruption_solution", packing)
    fixes = [Fix("placed", tier, "==", sum(sum(row) for row in x))]
    tuning = Tuning()
    # of the time left
    need = tuning.pack_seconds_per_column * generated / tuning.pack_share
    for deadline, tried in ((1.01 * need, True), (0.99 * need, False)):
        built.clear()
        ctx = SolveContext(problem, SolveOptions(time_limit=10), lambda: 0.0, deadline)
        st = start_phase(ctx, tier, "disrupt", fixes, x, x, 0)
        st.deadline = deadline  # the phase ends with the solve
        assert pattern_lp(ctx, st, [x], 10.0, 5) == (1, None)
        assert bool(built) == tried
        assert ("pack" in [s.name for s in st.steps]) == tried


def test_the_disrupt_phase_below_frozen_tiers_bounds_the_frozen_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the upper tier settles with no disruption; the lower tier's disruption bound is then
    # computed without the upper tier's running pods, and proves the phase
    seen: list[bool] = []
    real = lp.disruption_bound

    def recorded(problem: Any, tier: int, *args: Any, **kwargs: Any) -> Any:
        seen.append(all(not cls.n_running for cls in problem.classes if cls.priority > tier))
        return real(problem, tier, *args, **kwargs)

    monkeypatch.setattr(lp, "disruption_bound", recorded)
    snapshot = instances(Cell(32, 4, 90, 2), 1)[0][1]
    # proven in about 0.3 s; the limit only guards a loaded machine
    plan = solve(snapshot, SolveOptions(time_limit=30, workers=2))
    assert seen and all(seen)
    low = min(c.priority for c in build_problem(snapshot).classes)
    disrupt = [p for p in plan.phases if p.tier == low and p.phase == "disrupt"]
    assert disrupt and disrupt[0].status == "OPTIMAL" and disrupt[0].value == disrupt[0].bound
    assert plan.status == "OPTIMAL"
