"""Maximal pattern listing, exact pattern pricing and the pattern LP's dive, against brute force
and the CP-SAT class model on small seeded instances."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Sequence

import numpy as np
import pytest
from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model
from repack_builders import simple_snapshot

from repack.bounds import patterns
from repack.bounds import placement as bounds
from repack.bounds.columns import solution_values
from repack.bounds.patterns import Listings, group_patterns, maximal_patterns
from repack.bounds.placement import placement_bound
from repack.cpsat.model import Fix, build_phase_model
from repack.driver.solver import SolveOptions, solve
from repack.problem.classes import (
    Assignment,
    Problem,
    build_problem,
    current_assignment,
    feasible,
)
from repack.problem.generator import Cell, instances
from repack.search.heuristics import best_start

MB = 1_000_000


def _brute_maximal(
    requests: Sequence[Sequence[int]], limits: Sequence[int], cap: Sequence[int]
) -> set[tuple[int, ...]]:
    def fits(counts: tuple[int, ...]) -> bool:
        return all(
            sum(k * req[r] for k, req in zip(counts, requests, strict=True)) <= cap[r]
            for r in range(len(cap))
        )

    out = set()
    for counts in itertools.product(*(range(m + 1) for m in limits)):
        if not fits(counts):
            continue
        grown = (
            tuple(k + (j == i) for j, k in enumerate(counts))
            for i in range(len(counts))
            if counts[i] < limits[i]
        )
        if not any(fits(g) for g in grown):
            out.add(counts)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_maximal_patterns_match_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    k = rng.randint(2, 5)
    requests = [(rng.randint(100, 900), rng.randint(100, 900), 1) for _ in range(k)]
    limits = [rng.randint(1, 4) for _ in range(k)]
    cap = (rng.randint(1000, 2500), rng.randint(1000, 2500), 110)
    found = maximal_patterns(requests, limits, cap)
    assert found is not None
    rows = [tuple(int(v) for v in row) for row in found]
    assert len(rows) == len(set(rows))  # each multiset once
    assert set(rows) == _brute_maximal(requests, limits, cap)


@pytest.mark.parametrize("seed", range(6))
def test_maximal_patterns_with_a_binding_pod_count_and_wide_values(seed: int) -> None:
    # the pod count binds (it is not dropped as a non-binding resource) and memory needs more
    # than 32 bits (the listing keeps 64-bit integers): still exactly the brute-force set
    rng = random.Random(seed)
    k = rng.randint(2, 5)
    requests = [(rng.randint(100, 900), rng.randint(1, 9) * 2**30, 1) for _ in range(k)]
    limits = [rng.randint(1, 4) for _ in range(k)]
    cap = (rng.randint(1000, 2500), rng.randint(10, 25) * 2**30, rng.randint(1, 3))
    found = maximal_patterns(requests, limits, cap)
    assert found is not None
    rows = [tuple(int(v) for v in row) for row in found]
    assert len(rows) == len(set(rows))
    assert set(rows) == _brute_maximal(requests, limits, cap)
    assert all(sum(row) <= cap[2] for row in rows)


def test_maximal_patterns_give_up_past_the_state_cap() -> None:
    requests = [(10 + i, 10 + i, 1) for i in range(8)]
    cap = (100, 100, 110)
    assert maximal_patterns(requests, [3] * 8, cap, max_states=50) is None
    assert maximal_patterns(requests, [3] * 8, cap, max_states=10**5) is not None


def test_the_state_cap_is_on_the_largest_level() -> None:
    # every multiset of each size that fits, counted by brute force: the listing needs exactly
    # its largest level's count of states
    requests = [(10 + i, 10 + i, 1) for i in range(8)]
    cap, limit = (100, 100, 110), 3
    largest = 0
    for size in range(1, cap[0] // 10 + 1):  # (no more pods fit than the smallest request allows)
        fitting = sum(
            1
            for combo in itertools.combinations_with_replacement(range(8), size)
            if max(combo.count(c) for c in combo) <= limit
            and sum(requests[c][0] for c in combo) <= cap[0]
        )
        largest = max(largest, fitting)
    assert maximal_patterns(requests, [limit] * 8, cap, max_states=largest) is not None
    assert maximal_patterns(requests, [limit] * 8, cap, max_states=largest - 1) is None


def _optimum(problem: Problem, tier: int, fixes: Sequence[Fix] = ()) -> int:
    """Most pods placeable at priority >= ``tier``, proven by CP-SAT on the class model."""
    pm = build_phase_model("classes", problem, tier, fixes, not fixes)
    pm.model.maximize(pm.placed_ge(tier))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 2
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = 60
    assert solver.solve(pm.model) == cp_model.OPTIMAL
    return round(solver.objective_value)


def _placed(problem: Problem, x: Assignment, tier: int) -> int:
    return sum(sum(x[c]) for c, cls in enumerate(problem.classes) if cls.priority >= tier)


SMALL = [(Cell(4, 4, 100, 1), s) for s in range(3)] + [
    pytest.param(Cell(6, 4, 100, 1), s, marks=pytest.mark.slow) for s in range(3)
]


@pytest.mark.parametrize(("cell", "index"), SMALL)
def test_dive_packs_to_the_proven_optimum(cell: Cell, index: int) -> None:
    problem = build_problem(instances(cell, 3)[index][1])
    tier = problem.tiers[0]
    best = _optimum(problem, tier)
    packings: list[Assignment] = []
    # no incumbent (target None): the dive must find a packing on its own
    bound = placement_bound(
        problem, tier, [], [current_assignment(problem)], 30.0, time.monotonic, packings=packings
    )
    assert bound is not None and bound >= best
    assert len(packings) == 1
    x = packings[0]
    assert feasible(problem, x)
    # on these instances the pattern LP has no integrality gap and the dive reaches it
    assert _placed(problem, x, tier) == best == bound


@pytest.mark.parametrize("cell", [Cell(16, 4, 100, 1), Cell(32, 4, 100, 1)])
def test_the_batched_first_dive_packs_to_the_bound_in_fewer_lp_solves(
    cell: Cell, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = build_problem(instances(cell, 1)[0][1])
    tier = problem.tiers[0]
    start, _ = best_start(problem, current_assignment(problem), tier)
    starts = [start, current_assignment(problem)]
    solves = 0
    solve_lp = pywraplp.Solver.Solve

    def counted(lp: pywraplp.Solver) -> int:
        nonlocal solves
        solves += 1
        return int(solve_lp(lp))

    monkeypatch.setattr(pywraplp.Solver, "Solve", counted)

    def dive() -> tuple[int | None, list[int], int]:
        nonlocal solves
        solves = 0
        packings: list[Assignment] = []
        bound = placement_bound(
            problem,
            tier,
            [],
            starts,
            30.0,
            time.monotonic,
            _placed(problem, start, tier),
            packings=packings,
        )
        return bound, [_placed(problem, x, tier) for x in packings], solves

    batched = dive()
    monkeypatch.setattr(bounds, "DIVE_BATCH", 10**9)  # batches of none: one column at a time
    single = dive()
    # the start leaves pods out, and both dives pack every pod the LP bound allows
    assert batched[0] == single[0] and batched[0] is not None
    assert _placed(problem, start, tier) < batched[0]
    assert batched[1] == single[1] == [batched[0]]
    # the same root LP, then fewer rounds (measured: 46 LP solves against 71 on 16 nodes, 36
    # against 73 on 32)
    assert batched[2] < single[2]


@pytest.mark.parametrize("index", range(2))
def test_exact_pricing_gives_the_knapsack_priced_bound(index: int) -> None:
    problem = build_problem(instances(Cell(8, 4, 100, 1), 2)[index][1])
    tier = problem.tiers[0]
    starts = [current_assignment(problem)]
    listed = placement_bound(problem, tier, [], starts, 30.0, time.monotonic)
    priced = placement_bound(problem, tier, [], starts, 30.0, time.monotonic, exact=False)
    assert listed is not None and listed == priced


def test_listed_only_gives_up_when_a_group_has_too_many_patterns() -> None:
    # 8 small pods per node: past the state cap for so short a time
    problem = build_problem(instances(Cell(8, 8, 95, 1), 1)[0][1])
    tier = problem.tiers[0]
    starts = [current_assignment(problem)]
    assert (
        placement_bound(problem, tier, [], starts, 0.01, time.monotonic, listed_only=True) is None
    )


def test_two_node_groups_and_settled_tier_floors() -> None:
    # two node sizes (two groups); priority 10 pods must keep their 3 placed
    nodes = [("big-0", 2000, 2000 * MB), ("big-1", 2000, 2000 * MB), ("small-0", 1000, 1000 * MB)]
    pods = [
        ("a0", 900, 900 * MB, "big-0", 10),
        ("a1", 900, 900 * MB, "big-1", 10),
        ("a2", 900, 900 * MB, "small-0", 10),
        ("b0", 600, 500 * MB, "big-0", 0),
        ("b1", 600, 500 * MB, "big-1", 0),
        ("b2", 600, 500 * MB, None, 0),
        ("c0", 400, 500 * MB, "big-0", 0),
        ("c1", 400, 500 * MB, None, 0),
        ("c2", 400, 500 * MB, None, 0),
        ("d0", 1100, 300 * MB, None, 0),
    ]
    problem = build_problem(simple_snapshot(nodes, pods))
    best = _optimum(problem, 0, [Fix("placed", 10, ">=", 3)])
    assert best < _optimum(problem, 0)  # the floor matters here
    packings: list[Assignment] = []
    bound = placement_bound(
        problem,
        0,
        [(10, 3)],
        [current_assignment(problem)],
        30.0,
        time.monotonic,
        packings=packings,
    )
    # exact pricing: the LP's own value (with the floor) is the bound, not only Farley's
    assert bound == best
    assert packings and feasible(problem, packings[0])
    assert _placed(problem, packings[0], 10) >= 3
    assert _placed(problem, packings[0], 0) == best


@pytest.mark.slow
@pytest.mark.parametrize("index", range(2))
def test_solver_proves_the_place_phase_by_the_pattern_lp(index: int) -> None:
    snap = instances(Cell(6, 4, 100, 1), 3)[index][1]
    problem = build_problem(snap)
    best = _optimum(problem, problem.tiers[0])
    plan = solve(snap, SolveOptions(time_limit=20, workers=2))
    place = [ph for ph in plan.phases if ph.phase == "place"][0]
    assert place.status == "OPTIMAL" and place.value == best
    if plan.status != "NO_IMPROVEMENT":  # a returned plan passed the checker
        assert sum(plan.after.placed_by_priority.values()) == best


def test_listings_list_each_group_once_and_keep_no_partial_listing() -> None:
    problem = build_problem(instances(Cell(8, 4, 100, 1), 1)[0][1])
    tier = problem.tiers[-1]
    active = problem.active(tier)
    cap, elig = problem.capacity[0], tuple(True for _ in active)
    listings = Listings()
    assert not listings.cover(problem, tier)
    # cut short by the state cap: nothing is kept, and a later call with room lists in full
    assert group_patterns(problem, active, cap, elig, max_states=1, made=listings) is None
    assert not listings.cover(problem, tier)
    first = group_patterns(problem, active, cap, elig, made=listings)
    assert first is not None and len(first.counts)
    assert listings.cover(problem, tier)  # eight identical nodes: one group
    # the second call returns the same listing without listing again (a zero state cap would
    # make a new listing give up)
    assert group_patterns(problem, active, cap, elig, max_states=0, made=listings) is first
    # another tier's phase has other active classes: not covered by this listing
    tiered = build_problem(instances(Cell(8, 4, 105, 2), 1)[0][1])
    assert not listings.cover(tiered, tiered.tiers[0])


@pytest.mark.parametrize("entries", [None, 0])
def test_pattern_values_are_the_product_over_the_counts(
    entries: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # entries 0: the listing is too large for a single-precision copy and prices from its counts
    if entries is not None:
        monkeypatch.setattr(patterns, "FLOAT_ENTRIES", entries)
    problem = build_problem(instances(Cell(16, 4, 100, 1), 1)[0][1])
    tier = problem.tiers[0]
    active = problem.active(tier)
    listing = group_patterns(
        problem, active, problem.capacity[0], tuple(True for _ in active), made=Listings()
    )
    assert listing is not None and len(listing.counts) > 100
    rng = np.random.default_rng(3)
    for _ in range(5):
        duals = (rng.random(len(listing.classes)) * 3).astype(np.float32)
        duals[rng.random(len(duals)) < 0.4] = 0.0
        # the same single-precision values, to the bit: the columns priced out, and their
        # order, do not depend on the copy
        assert np.array_equal(listing.values(duals), listing.counts @ duals)
        by_class = {c: float(d) for c, d in zip(listing.classes, duals, strict=True)}
        chosen, top = listing.price(by_class, 1.0)
        assert top == pytest.approx(float((listing.counts @ duals).max()))
        # the columns that price out: worth more than the group's dual, best first
        worth = [sum(by_class[c] * k for c, k in pattern.items()) for pattern in chosen]
        assert chosen and all(w > 1.0 for w in worth)
        assert worth == sorted(worth, reverse=True)


def test_solution_values_are_each_variables_value_by_index() -> None:
    lp = pywraplp.Solver.CreateSolver("GLOP")
    xs = [lp.NumVar(0, 1 + i % 3, f"x{i}") for i in range(40)]
    row = lp.Constraint(-lp.infinity(), 17.5)
    for i, x in enumerate(xs):
        row.SetCoefficient(x, 1 + i % 4)
    lp.Maximize(sum((1 + i % 5) * x for i, x in enumerate(xs)))
    assert lp.Solve() == pywraplp.Solver.OPTIMAL
    values = solution_values(lp)
    assert values.shape == (40,)
    assert values.tolist() == [x.solution_value() for x in xs]
    assert values.sum() > 0  # an LP whose optimum is not all zeros
