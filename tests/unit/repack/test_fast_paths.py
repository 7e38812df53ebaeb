"""The solver's fast paths give what their plain definitions give: phase models copied from one
model per tier, feasibility and disruption over the few nodes that matter, and the LNS refill's
objective (placed pods first, whatever the tie-breaking noise)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
from ortools.sat.python import cp_model
from repack_builders import kube_list, node_obj, pod_obj

from repack.cpsat.model import FORMULATIONS, Fix, PhaseModels, build_phase_model
from repack.cpsat.refill import refill
from repack.driver.solver import SolveOptions, solve
from repack.problem import checker
from repack.problem.classes import (
    Assignment,
    Problem,
    build_problem,
    current_assignment,
    disruption,
    empty_assignment,
    evictions,
    feasible,
    loads,
    node_load,
    stays,
)
from repack.problem.generator import Cell, generate
from repack.problem.snapshot import parse_list
from repack.search.heuristics import best_start


@pytest.mark.parametrize(("cell", "seed"), [(Cell(4, 4, 105, 4), 0), (Cell(8, 4, 100, 2), 1)])
def test_copied_phase_models_are_the_built_ones(cell: Cell, seed: int) -> None:
    problem = build_problem(generate(cell, seed))
    for formulation in FORMULATIONS:
        models = PhaseModels(formulation, problem)
        fixes: list[Fix] = []
        for tier in problem.tiers:
            for symmetry in (not fixes, False):
                built = build_phase_model(formulation, problem, tier, fixes, symmetry)
                copied = models.build(tier, fixes, symmetry)
                assert str(copied.model.proto) == str(built.model.proto)
                # a copy is independent: what one phase adds is not in the next copy
                copied.model.add(copied.placed_ge(tier) <= 0)
                copied.model.maximize(copied.placed_ge(tier))
                again = models.build(tier, fixes, symmetry)
                assert str(again.model.proto) == str(built.model.proto)
            fixes += [Fix("placed", tier, ">=", 1), Fix("disruption", tier, "<=", 5)]


def _feasible_by_definition(problem: Problem, x: Assignment, only: Sequence[int]) -> bool:
    """Every class row: no negative count, at most its pods, only on allowed nodes and no more
    than now where it is not eligible or the node is overloaded; every node that is not
    overloaded within its capacity; every PDB within its budget."""
    for c in set(only):
        cls, row = problem.classes[c], x[c]
        if any(v < 0 for v in row) or sum(row) > cls.total:
            return False
        for n, count in enumerate(row):
            if count and not cls.allowed(n):
                return False
            if (n not in cls.eligible or problem.overloaded[n]) and count > cls.current[n]:
                return False
    for n, load in enumerate(loads(problem, x)):
        if not problem.overloaded[n] and any(
            v > cap for v, cap in zip(load, problem.capacity[n], strict=True)
        ):
            return False
    used: dict[str, int] = {}
    for c in set(only):
        for pdb in problem.classes[c].pdbs:
            used[pdb] = used.get(pdb, 0) + evictions(problem.classes[c], x[c])
    return all(v <= problem.pdb_budget.get(k, 0) for k, v in used.items())


def _constrained_problem() -> Problem:
    """Three nodes: an ssd one, a plain one running an ssd-only pod, and an overloaded one."""
    items = [
        node_obj("node-a", labels={"disk": "ssd"}),
        node_obj("node-b"),
        node_obj("node-c", cpu="1000m"),
        pod_obj("ssd-0", "300m", "300M", node="node-b", owner=("ReplicaSet", "ssd"),
                spec={"nodeSelector": {"disk": "ssd"}}),
        pod_obj("ssd-1", "300m", "300M", owner=("ReplicaSet", "ssd"),
                spec={"nodeSelector": {"disk": "ssd"}}),
        pod_obj("big-0", "600m", "500M", node="node-c", owner=("ReplicaSet", "big")),
        pod_obj("big-1", "600m", "500M", node="node-c", owner=("ReplicaSet", "big")),
        pod_obj("small-0", "200m", "200M", node="node-a", owner=("ReplicaSet", "small")),
        pod_obj("small-1", "200m", "200M", owner=("ReplicaSet", "small"), priority=5),
    ]  # fmt: skip
    problem = build_problem(parse_list(kube_list(*items)))
    assert any(problem.overloaded) and len(problem.classes) >= 3
    return problem


@pytest.mark.parametrize("seed", range(3))
def test_feasible_stays_and_loads_match_their_definitions(seed: int) -> None:
    rng = random.Random(seed)
    problems = [_constrained_problem(), build_problem(generate(Cell(8, 4, 105, 2), seed))]
    for problem in problems:
        nodes = len(problem.node_names)
        answers = set()
        for _ in range(300):
            x = current_assignment(problem) if rng.random() < 0.5 else empty_assignment(problem)
            for _ in range(rng.randint(0, 4)):  # a few random changes, sometimes below zero
                x[rng.randrange(len(x))][rng.randrange(nodes)] += rng.choice((-1, 1, 1, 2))
            only = rng.sample(range(len(problem.classes)), rng.randint(1, len(problem.classes)))
            want = _feasible_by_definition(problem, x, only)
            assert feasible(problem, x, only) == want
            answers.add(want)
            for c, cls in enumerate(problem.classes):
                if min(x[c]) < 0:
                    continue  # no assignment has negative counts
                kept = sum(min(a, b) for a, b in zip(x[c], cls.current, strict=True))
                assert stays(cls, x[c]) == kept
                assert disruption(cls, x[c]) == cls.n_running - kept + evictions(cls, x[c])
            for n in range(nodes):
                assert node_load(problem, x, n) == loads(problem, x)[n]
        assert answers == {True, False}  # both outcomes were exercised


def test_a_refill_places_the_most_pods_whatever_the_noise() -> None:
    """One node of 1000m: two pending 500m pods fit together, or one 1000m pod alone. The
    random tie-break weights must never make the refill prefer the single pod."""
    items = [
        node_obj("node-a"),
        node_obj("node-b", cpu="100m"),
        pod_obj("half-0", "500m", "100M", owner=("ReplicaSet", "half")),
        pod_obj("half-1", "500m", "100M", owner=("ReplicaSet", "half")),
        pod_obj("whole", "1000m", "100M", owner=("ReplicaSet", "whole")),
    ]
    problem = build_problem(parse_list(kube_list(*items)))
    own = problem.active(0)
    x = empty_assignment(problem)
    for seed in range(40):  # some seeds weigh the single pod's tie-break far above the others
        # a one-node refill this small is solved to optimality well inside the limit
        found = refill(problem, x, own, [], [0], 5.0, False, random.Random(seed))
        assert found is not None and feasible(problem, found)
        assert sum(found[c][0] for c in own) == 2, seed


@pytest.mark.parametrize("seed", range(2))
def test_the_class_model_hint_is_complete_and_feasible(seed: int) -> None:
    """Every variable gets a hint (CP-SAT then takes it as a first solution at once) and the
    hinted values satisfy the model."""
    problem = build_problem(generate(Cell(4, 4, 105, 2), seed))
    tier = problem.tiers[-1]
    x, ok = best_start(problem, empty_assignment(problem), tier)
    assert ok
    pm = PhaseModels("classes", problem).build(tier, [], symmetry=True)
    pm.model.maximize(pm.placed_ge(tier))
    pm.hint(x)
    proto = pm.model.proto
    assert sorted(proto.solution_hint.vars) == list(range(len(proto.variables)))
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    assert solver.solve(pm.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert solver.objective_value == sum(sum(x[c]) for c in problem.active(tier))


@pytest.mark.parametrize("formulation", FORMULATIONS)
@pytest.mark.slow
def test_a_large_cluster_with_under_a_second_still_gets_a_checked_plan(formulation: str) -> None:
    """On 24 nodes and more a sub-second disrupt phase is all LNS (no CP-SAT search): the plan
    still passes the checker, the placed count of its place phase holds, and the plan's
    disruption is the one the disrupt phase reports. A ticking clock bounds the number of
    iterations (the CP-SAT calls still have wall limits, so results may vary; the assertions
    hold for any of them)."""
    snapshot = generate(Cell(24, 4, 100, 1), 0)
    ticks = itertools.count()
    plan = solve(
        snapshot,
        SolveOptions(time_limit=1.0, formulation=formulation),
        clock=lambda: next(ticks) * 0.005,
    )
    assert plan.status in ("FEASIBLE", "OPTIMAL"), (plan.status, plan.message, plan.phases)
    assert not checker.check(snapshot, plan)
    place, disrupt = plan.phases
    # placed pods at the only tier: the disrupt phase keeps at least what was placed (when
    # the place phase was not proven it may place more)
    assert plan.after.vector[0] >= place.value > plan.before.vector[0]
    assert -plan.after.vector[1] == disrupt.value
