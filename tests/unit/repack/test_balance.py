"""The balancing engine on small hand-made clusters whose optimum is known by hand
(docs/architecture.md#balancing): each goal, the bounds, the exclusions and the checker."""

from __future__ import annotations

from dataclasses import replace

import pytest

from repack.driver.balance import rebalance
from repack.driver.options import SolveOptions
from repack.problem.checker import check_goal
from repack.problem.goal_spec import EXCLUDE_LABEL, GoalSpec, Limits
from repack.problem.plan import Move, Step
from repack.problem.snapshot import Node, Pdb, Pod, Snapshot

GI = 1024**3
OPTIONS = SolveOptions(time_limit=5, workers=1)
# The measures are float sums; a plan's figures are compared with what the test works out by
# hand to this precision (far below any gain the engine acts on).
TOL = 1e-9


def node(name: str, cpu: int = 4000, mem: int = 8 * GI, **labels: str) -> Node:
    return Node(name, {"cpu": cpu, "memory": mem, "pods": 110}, labels=labels)


def pod(name: str, at: str, cpu: int, mem: int, **extra: object) -> Pod:
    fields: dict[str, object] = {"owner": f"ReplicaSet/{name}", "uid": f"uid-{name}"}
    fields.update(extra)
    return Pod("default", name, {"cpu": cpu, "memory": mem, "pods": 1}, node=at, **fields)  # type: ignore[arg-type]


def mixed() -> Snapshot:
    """Node a runs two cpu-heavy pods, node b two memory-heavy ones: one swap evens the mix
    (moving both cpu pods to b would too, an empty node has no mix, but they do not fit there)."""
    return Snapshot(
        (node("a"), node("b")),
        (
            pod("cpu-1", "a", 1600, GI),
            pod("cpu-2", "a", 1600, GI),
            pod("mem-1", "b", 500, 3 * GI),
            pod("mem-2", "b", 500, 3 * GI),
        ),
    )


def spec(goal: str, **limits: object) -> GoalSpec:
    return GoalSpec(goal, Limits(**limits))  # type: ignore[arg-type]


def test_balance_swaps_one_pair_to_a_perfect_mix() -> None:
    snap = mixed()
    plan = rebalance(snap, spec("balance"), OPTIONS)
    assert plan.improved, plan.message
    assert plan.goal is not None and plan.goal.basis == "requests"
    # the optimum: each node one cpu-heavy and one memory-heavy pod, each node's mix the
    # cluster's (imbalance 0), reached with the least moves there is (two)
    assert len(plan.moves) == 2
    assert {m.pod.split("/")[1][:3] for m in plan.moves} == {"cpu", "mem"}
    assert plan.goal.before > 0.2 and plan.goal.after == pytest.approx(0, abs=TOL)
    assert plan.goal.gain == pytest.approx(plan.goal.before, abs=TOL)
    # a swap between two full-ish nodes: the sequence keeps every step within capacity
    assert check_goal(snap, plan, spec("balance")) == []


def test_balance_on_telemetry_follows_measured_use_and_says_so() -> None:
    # requests say the mix is already even (equal pods); the agents' measurements say pods
    # p1/p2 on a burn cpu and q1/q2 on b hold memory: the plan swaps one of each
    snap = Snapshot(
        (node("a"), node("b")),
        tuple(
            pod(n, at, 1000, 2 * GI)
            for n, at in (("p1", "a"), ("p2", "a"), ("q1", "b"), ("q2", "b"))
        ),
    )
    assert rebalance(snap, spec("balance"), OPTIONS).status == "NO_IMPROVEMENT"
    usage = {
        "default/p1": {"cpu": 1000, "memory": 0.2 * GI},
        "default/p2": {"cpu": 1000, "memory": 0.2 * GI},
        "default/q1": {"cpu": 100, "memory": 2 * GI},
        "default/q2": {"cpu": 100, "memory": 2 * GI},
    }
    plan = rebalance(snap, spec("balance"), OPTIONS, usage=usage)
    assert plan.improved and plan.goal is not None
    assert plan.goal.basis == "telemetry"
    assert len(plan.moves) == 2 and plan.goal.after == pytest.approx(0, abs=TOL)
    assert check_goal(snap, plan, spec("balance"), usage) == []
    partial = rebalance(snap, spec("balance"), OPTIONS, usage={"default/p1": usage["default/p1"]})
    assert partial.goal is not None and partial.goal.basis.startswith("telemetry for 1 of 4")


def test_consolidate_frees_the_one_node_that_can_go_with_one_move() -> None:
    # 7 cores of pods on three 4-core nodes: one node at most can go; c's single pod fits on a
    # (2 + 2 = 4 cores) in one move, the cheapest way. DaemonSet pods on every node do not count.
    ds = [
        pod(f"ds-{n}", n, 100, GI // 8, owner="DaemonSet/agent", immovable="daemonset")
        for n in "abc"
    ]
    snap = Snapshot(
        (node("a", 4300), node("b", 4300), node("c", 4300)),
        (
            *ds,
            pod("a1", "a", 1000, GI),
            pod("a2", "a", 1000, GI),
            pod("b1", "b", 1000, GI),
            pod("b2", "b", 1000, GI),
            pod("b3", "b", 1000, GI),
            pod("c1", "c", 2000, GI),
        ),
    )
    plan = rebalance(snap, spec("consolidate"), OPTIONS)
    assert plan.improved, plan.message
    assert plan.goal is not None and plan.goal.freed == ("c",)
    assert plan.moves == (Move("default/c1", "c", "a"),)
    assert plan.goal.gain == 1.0
    assert check_goal(snap, plan, spec("consolidate")) == []
    # a do-not-move pod on c pins it: the only node left to free is a, in two moves onto c
    pinned = replace(
        snap, pods=(*snap.pods, pod("keep", "c", 100, GI // 8, immovable="do-not-move"))
    )
    plan = rebalance(pinned, spec("consolidate"), OPTIONS)
    assert plan.goal is not None and plan.goal.freed == ("a",)
    assert {m.pod for m in plan.moves} == {"default/a1", "default/a2"}
    assert all(m.to_node == "c" for m in plan.moves)


def test_defragment_empties_one_node_for_the_largest_block() -> None:
    # one 1-core pod on each of three 4-core nodes: the largest block is 3/4 of a node; moving
    # one pod next to another frees a whole node (1.0) in one move
    snap = Snapshot(
        (node("a"), node("b"), node("c")),
        tuple(pod(f"p{n}", n, 1000, 2 * GI) for n in "abc"),
    )
    plan = rebalance(snap, spec("defragment"), OPTIONS)
    assert plan.improved and plan.goal is not None
    assert plan.goal.before == pytest.approx(0.75) and plan.goal.after == pytest.approx(1.0)
    assert len(plan.moves) == 1
    assert plan.goal.largest_free == {"cpu": 4000, "memory": 8 * GI}
    assert check_goal(snap, plan, spec("defragment")) == []


def test_bounds_exclusions_and_minimum_gain() -> None:
    snap = mixed()
    # one move may not swap; the best single move still helps (a memory pod joins a)
    one = rebalance(snap, spec("balance", max_moves=1), OPTIONS)
    assert len(one.moves) <= 1
    # a minimum gain above what the bounds allow: nothing is proposed
    assert rebalance(snap, spec("balance", max_moves=1, min_gain=0.99), OPTIONS).moves == ()
    # both cpu pods labelled out: only the memory pods could move, one to a improves the mix
    labelled = replace(
        snap,
        pods=tuple(
            replace(p, labels={EXCLUDE_LABEL: "true"}) if p.name.startswith("cpu") else p
            for p in snap.pods
        ),
    )
    plan = rebalance(labelled, spec("balance"), OPTIONS)
    assert all(m.pod.startswith("default/mem") for m in plan.moves)
    # node b labelled out: nothing leaves or lands on it, so no plan at all
    out = replace(snap, nodes=(node("a"), node("b", **{EXCLUDE_LABEL: "yes"})))
    assert rebalance(out, spec("balance"), OPTIONS).moves == ()
    # a PDB with no budget makes its pods immovable (the snapshot's rule)
    guarded = replace(
        snap,
        pods=tuple(replace(p, pdbs=("default/g",), immovable="pdb") for p in snap.pods),
        pdbs=(Pdb("default", "g", 0),),
    )
    assert rebalance(guarded, spec("balance"), OPTIONS).moves == ()


def test_checker_rejects_what_the_engine_must_never_claim() -> None:
    snap = mixed()
    good = rebalance(snap, spec("balance"), OPTIONS)
    assert good.goal is not None and check_goal(snap, good, spec("balance")) == []
    inflated = replace(good, goal=replace(good.goal, gain=good.goal.gain * 2))
    assert any("gain" in e for e in check_goal(snap, inflated, spec("balance")))
    assert any("bound" in e for e in check_goal(snap, good, spec("balance", max_moves=1)))
    labelled = replace(snap, pods=tuple(replace(p, labels={EXCLUDE_LABEL: "1"}) for p in snap.pods))
    assert any("labelled out" in e for e in check_goal(labelled, good, spec("balance")))
    fixed = replace(snap, pods=tuple(replace(p, immovable="do-not-move") for p in snap.pods))
    assert any("immovable" in e for e in check_goal(fixed, good, spec("balance")))
    budget = replace(
        snap,
        pods=tuple(replace(p, pdbs=("default/g",)) for p in snap.pods),
        pdbs=(Pdb("default", "g", 0),),
    )
    assert any("PDB" in e for e in check_goal(budget, good, spec("balance")))
    # a move onto a node without the room for it (b's memory is full): over capacity
    tight = replace(snap, nodes=(node("a"), node("b", mem=6 * GI)))
    bad = replace(
        good,
        moves=(Move("default/cpu-1", "a", "b"),),
        steps=(Step("move", "default/cpu-1", "a", "b"),),
    )
    assert any("over capacity" in e for e in check_goal(tight, bad, spec("balance")))


def test_node_cap_follows_the_share_of_the_cluster() -> None:
    assert Limits().nodes_cap(16) == 2 and Limits().nodes_cap(128) == 13
    assert Limits(max_share=0.5, max_nodes=3).nodes_cap(20) == 3
    with pytest.raises(ValueError):
        GoalSpec("tidy")
