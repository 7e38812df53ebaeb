"""The independent checker rejects bad plans; sequencing never overloads a node."""

from __future__ import annotations

import dataclasses

import pytest
from repack_builders import MB, fragmentation_list, simple_snapshot

from repack.driver.solver import SolveOptions, solve
from repack.problem import checker
from repack.problem.plan import Eviction, Move, Placement, Plan, Step, outcome
from repack.problem.sequencing import SequencingError, sequence
from repack.problem.snapshot import Pdb, Pod, Snapshot, parse_list


def _plan(snap: Snapshot, moves=(), placements=(), evictions=(), steps=None) -> Plan:  # type: ignore[no-untyped-def]
    if steps is None:
        steps = sequence(snap, moves, placements, evictions)
    return Plan(
        "FEASIBLE",
        False,
        0.0,
        "classes",
        outcome(snap),
        outcome(snap, moves, placements, evictions),
        tuple(moves),
        tuple(placements),
        tuple(evictions),
        tuple(steps),
    )


@pytest.fixture
def frag() -> Snapshot:
    return parse_list(fragmentation_list())


def test_the_solved_plan_passes(frag: Snapshot) -> None:
    plan = solve(frag, SolveOptions(time_limit=2, workers=2))
    assert checker.check(frag, plan) == []


def test_over_capacity_is_rejected(frag: Snapshot) -> None:
    # straight onto node-a without making room
    errors = checker.check(
        frag, _plan(frag, placements=[Placement("default/pending", "node-a")], steps=[])
    )
    assert any("over capacity" in e for e in errors)


def test_wrong_source_and_unknown_pod_are_rejected(frag: Snapshot) -> None:
    bad = [Move("default/node-a-p2", "node-c", "node-b"), Placement("default/ghost", "node-a")]
    now = outcome(frag)
    plan = Plan("FEASIBLE", False, 0.0, "classes", now, now, (bad[0],), (bad[1],))  # type: ignore[arg-type]
    errors = checker.check(frag, plan)
    assert any("runs on node-a" in e for e in errors)
    assert any("no such pod" in e for e in errors)


def test_claimed_vector_must_match_the_actions(frag: Snapshot) -> None:
    moves = [Move("default/node-a-p2", "node-a", "node-b")]
    placements = [Placement("default/pending", "node-a")]
    good = _plan(frag, moves, placements)
    assert checker.check(frag, good) == []
    lying = dataclasses.replace(good, after=dataclasses.replace(good.after, vector=(10, 0)))
    assert any("claimed 'after'" in e for e in checker.check(frag, lying))


def test_a_plan_that_is_not_better_is_rejected(frag: Snapshot) -> None:
    moves = [Move("default/node-a-p2", "node-a", "node-b")]  # a move, nothing gained
    errors = checker.check(frag, _plan(frag, moves))
    assert any("not strictly better" in e for e in errors)


def test_immovable_and_ineligible_are_rejected() -> None:
    snap = Snapshot(
        (
            simple_snapshot([("a", 1000, 1000 * MB)], []).nodes[0],
            dataclasses.replace(
                simple_snapshot([("b", 1000, 1000 * MB)], []).nodes[0], unschedulable=True
            ),
        ),
        (
            Pod("default", "ds", {"cpu": 100, "pods": 1}, node="a", immovable="daemonset"),
            Pod("default", "new", {"cpu": 100, "pods": 1}),
        ),
    )
    plan = _plan(
        snap,
        moves=[Move("default/ds", "a", "b")],
        placements=[Placement("default/new", "b")],
        steps=[],
    )
    errors = checker.check(snap, plan)
    assert any("immovable" in e for e in errors)
    assert any("not allowed on b" in e for e in errors)


def test_steps_must_cover_the_plan(frag: Snapshot) -> None:
    moves = [Move("default/node-a-p2", "node-a", "node-b")]
    placements = [Placement("default/pending", "node-a")]
    # placing first would overload node-a on the way
    wrong_order = [
        Step("place", "default/pending", None, "node-a"),
        Step("move", "default/node-a-p2", "node-a", "node-b"),
    ]
    errors = checker.check(frag, _plan(frag, moves, placements, steps=wrong_order))
    assert any("over capacity" in e for e in errors)
    missing = checker.check(frag, _plan(frag, moves, placements, steps=wrong_order[1:]))
    assert any("exactly the plan's actions" in e for e in missing)


def _swap(pdb_allowed: int | None) -> Snapshot:
    """Two full nodes whose pods must swap: a cycle with no free room."""
    nodes = simple_snapshot([("a", 1000, 1000 * MB), ("b", 1000, 1000 * MB)], []).nodes
    pdbs = (Pdb("default", "guard", pdb_allowed),) if pdb_allowed is not None else ()
    cover = ("default/guard",) if pdbs else ()
    return Snapshot(
        nodes,
        (
            Pod(
                "default", "x", {"cpu": 600, "pods": 1}, node="a", owner="ReplicaSet/x", pdbs=cover
            ),
            Pod(
                "default", "y", {"cpu": 1000, "pods": 1}, node="b", owner="ReplicaSet/y", pdbs=cover
            ),
            Pod(
                "default",
                "fill",
                {"cpu": 400, "pods": 1},
                node="a",
                owner="ReplicaSet/f",
                pdbs=cover,
            ),
        ),
        pdbs,
    )


def _simulate_max_load(snap: Snapshot, steps: tuple[Step, ...]) -> bool:
    cap = {n.name: n.allocatable["cpu"] for n in snap.nodes}
    req = {p.key: p.requests["cpu"] for p in snap.pods}
    load = {n: 0 for n in cap}
    for p in snap.pods:
        if p.node:
            load[p.node] += req[p.key]
    for s in steps:
        if s.action in ("move", "evict", "evict-first") and s.from_node:
            load[s.from_node] -= req[s.pod]
        if s.action in ("move", "land", "place") and s.to_node:
            load[s.to_node] += req[s.pod]
            if load[s.to_node] > cap[s.to_node]:
                return False
    return True


def test_cycle_is_broken_by_evicting_first() -> None:
    snap = _swap(None)
    moves = [
        Move("default/x", "a", "b"),
        Move("default/y", "b", "a"),
        Move("default/fill", "a", "b"),
    ]
    steps = sequence(snap, moves, [], [])
    assert [s.action for s in steps].count("evict-first") == 1
    assert _simulate_max_load(snap, steps)


def test_cycle_breaking_respects_pdbs() -> None:
    moves = [
        Move("default/x", "a", "b"),
        Move("default/y", "b", "a"),
        Move("default/fill", "a", "b"),
    ]
    with pytest.raises(SequencingError):
        sequence(_swap(0), moves, [], [])
    steps = sequence(_swap(1), moves, [], [])
    assert _simulate_max_load(_swap(1), steps)


def test_sequencing_frees_room_before_filling() -> None:
    snap = simple_snapshot(
        [("a", 1000, 1000 * MB), ("b", 1000, 1000 * MB)],
        [
            ("p1", 600, MB, "a", 0),
            ("p2", 300, MB, "b", 0),
            ("p3", 500, MB, "b", 0),
            ("new", 700, MB, None, 0),
        ],
    )
    moves = [Move("default/p1", "a", "b")]
    # p1 cannot go to b before p3 leaves: evict p3 for good (plan-level), then move, then place
    evictions = [Eviction("default/p3", "b")]
    steps = sequence(snap, moves, [Placement("default/new", "a")], evictions)
    assert [s.action for s in steps] == ["evict", "move", "place"]
    assert _simulate_max_load(snap, steps)
