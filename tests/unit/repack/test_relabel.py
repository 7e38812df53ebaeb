"""Relabelling interchangeable nodes: exact against brute force over every permutation, never
worse at any tier, counts and feasibility unchanged, and only truly identical nodes grouped."""

from __future__ import annotations

import itertools

import pytest
from repack_builders import MB, kube_list, node_obj, pod_obj

from repack.problem.classes import (
    Assignment,
    Problem,
    build_problem,
    disruption,
    empty_assignment,
    feasible,
)
from repack.problem.generator import Cell, generate
from repack.problem.snapshot import parse_list
from repack.search.heuristics import pack_from_scratch
from repack.search.relabel import node_groups, relabel


def _dis(problem: Problem, x: Assignment, q: int) -> int:
    return sum(disruption(cls, x[c]) for c, cls in enumerate(problem.classes) if cls.priority >= q)


def _permuted(x: Assignment, nodes: list[int], perm: tuple[int, ...]) -> Assignment:
    out = [list(row) for row in x]
    for i, j in zip(nodes, perm, strict=True):
        for c in range(len(x)):
            out[c][j] = x[c][i]
    return out


def _scratch(problem: Problem, tier: int, best_fit: bool) -> Assignment:
    """Every tier down to ``tier`` re-packed in turn ignoring where pods run: many moves a
    relabelling can undo."""
    x = empty_assignment(problem)
    for q in problem.tiers:
        if q >= tier:
            x = pack_from_scratch(problem, x, problem.active(q), q, best_fit)
    return x


@pytest.mark.parametrize(("nodes", "seed", "best_fit"), [(4, 0, False), (5, 1, True), (6, 2, True)])
def test_single_tier_matches_brute_force_over_all_labellings(
    nodes: int, seed: int, best_fit: bool
) -> None:
    problem = build_problem(generate(Cell(nodes, 4, 100, 1), seed))
    (tier,) = problem.tiers
    assert node_groups(problem) == [list(range(nodes))]  # the generator's nodes are identical
    x = _scratch(problem, tier, best_fit)
    assert feasible(problem, x)
    y = relabel(problem, x, tier)
    best = min(
        _dis(problem, _permuted(x, list(range(nodes)), p), tier)
        for p in itertools.permutations(range(nodes))
    )
    assert _dis(problem, y, tier) == best
    assert best < _dis(problem, x, tier)  # the re-packing did move pods a relabelling saves
    assert feasible(problem, y)
    assert [sum(row) for row in y] == [sum(row) for row in x]
    # the result is a permutation of x's node contents
    assert sorted(tuple(col) for col in zip(*y, strict=True)) == sorted(
        tuple(col) for col in zip(*x, strict=True)
    )


@pytest.mark.parametrize("seed", range(4))
def test_several_tiers_never_disrupt_more_at_any_tier(seed: int) -> None:
    problem = build_problem(generate(Cell(6, 4, 105, 3), seed))
    gained = False
    for tier, best_fit in itertools.product(problem.tiers, (False, True)):
        x = _scratch(problem, tier, best_fit)
        y = relabel(problem, x, tier)
        gained |= _dis(problem, y, tier) < _dis(problem, x, tier)
        assert feasible(problem, y, problem.active(tier))
        for q in problem.tiers:
            if q >= tier:
                assert _dis(problem, y, q) <= _dis(problem, x, q)
        assert [sum(row) for row in y] == [sum(row) for row in x]
    assert gained  # the re-packings moved pods that a relabelling saves


def _mixed_cluster() -> Problem:
    """Four nodes: a, b identical; c with a different capacity; d like a but running a pod its
    class may no longer be placed on (it tolerates nothing, d is now tainted)."""
    taint = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    return build_problem(
        parse_list(
            kube_list(
                node_obj("a"),
                node_obj("b"),
                node_obj("c", cpu="2000m"),
                node_obj("d", taints=taint),
                node_obj("e"),
                pod_obj("p1", "600m", f"{800 * MB}", node="a", owner=("ReplicaSet", "r1")),
                pod_obj("p2", "300m", f"{300 * MB}", node="b", owner=("ReplicaSet", "r2")),
                pod_obj("p3", "300m", f"{300 * MB}", node="d", owner=("ReplicaSet", "r2")),
                pod_obj("p4", "700m", f"{900 * MB}", owner=("ReplicaSet", "r3")),
            )
        )
    )


def test_groups_only_interchangeable_nodes() -> None:
    problem = _mixed_cluster()
    names = problem.node_names
    groups = [[names[n] for n in g] for g in node_groups(problem)]
    # c differs in capacity, d holds a pod that may only stay: neither is interchangeable
    assert groups == [["a", "b", "e"]]


def test_relabel_undoes_a_swap_between_identical_nodes() -> None:
    problem = _mixed_cluster()
    (tier,) = problem.tiers
    index = {name: n for n, name in enumerate(problem.node_names)}
    current = [list(cls.current) for cls in problem.classes]
    # swap the contents of a and b: two moves for nothing
    x = [list(row) for row in current]
    for row in x:
        row[index["a"]], row[index["b"]] = row[index["b"]], row[index["a"]]
    assert _dis(problem, x, tier) == 2
    y = relabel(problem, x, tier)
    assert y == current
    # already the best labelling: x itself comes back
    assert relabel(problem, current, tier) is current
