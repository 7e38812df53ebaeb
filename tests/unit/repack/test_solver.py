"""The solver on hand-made instances: constraints, tiers, the article's example, both formulations.

Time limits are small; assertions are only on proven-optimal outcomes, which are deterministic.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from repack_builders import MB, fragmentation_list, kube_list, node_obj, pod_obj, simple_snapshot

from repack.driver.solver import SolveOptions, solve
from repack.problem import checker
from repack.problem.snapshot import Snapshot, parse_list

FORMS = ["classes", "per-pod"]


def run(snapshot: Snapshot, formulation: str = "classes", limit: float = 5.0) -> Any:
    plan = solve(snapshot, SolveOptions(time_limit=limit, formulation=formulation, workers=2))
    assert checker.check(snapshot, plan) == []
    return plan


@pytest.mark.parametrize("formulation", FORMS)
def test_fragmentation_example_places_the_pod_with_one_move(formulation: str) -> None:
    snap = parse_list(fragmentation_list())
    plan = run(snap, formulation)
    assert plan.status == "OPTIMAL" and plan.optimal
    assert [p.pod for p in plan.placements] == ["default/pending"]
    assert len(plan.moves) == 1 and plan.evictions == ()
    assert plan.after.placed_by_priority == {0: 10}
    assert plan.after.vector == (10, -1)
    # the pending pod lands only after the move made room
    assert [s.action for s in plan.steps] == ["move", "place"]


def _one_pending(node_kwargs: dict[str, Any], pod_spec: dict[str, Any]) -> Snapshot:
    """Node a is full with a pod that must stay; node b has room but carries some constraint;
    one pod is pending."""
    return parse_list(
        kube_list(
            node_obj("a", cpu="1000m"),
            node_obj("b", cpu="1000m", **node_kwargs),
            pod_obj("big", "1000m", "1M", node="a", annotations={"carico.io/do-not-move": "1"}),
            pod_obj("new", "500m", "1M", spec=pod_spec),
        )
    )


@pytest.mark.parametrize(
    ("node_kwargs", "pod_spec", "placeable"),
    [
        ({}, {}, True),
        ({"labels": {"disk": "hdd"}}, {"nodeSelector": {"disk": "ssd"}}, False),
        ({"labels": {"disk": "ssd"}}, {"nodeSelector": {"disk": "ssd"}}, True),
        ({"taints": [{"key": "gpu", "value": "y", "effect": "NoSchedule"}]}, {}, False),
        (
            {"taints": [{"key": "gpu", "value": "y", "effect": "NoSchedule"}]},
            {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "y"}]},
            True,
        ),
        ({"taints": [{"key": "x", "effect": "PreferNoSchedule"}]}, {}, True),
        ({"unschedulable": True}, {}, False),
        (
            {"labels": {"zone": "z2", "gen": "5"}},
            _aff := {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["z1"]}
                                    ]
                                },
                                {
                                    "matchExpressions": [
                                        {"key": "gen", "operator": "Gt", "values": ["4"]}
                                    ]
                                },
                            ]
                        }
                    }
                }
            },
            True,
        ),
        (
            {"labels": {"zone": "z2", "gen": "3"}},
            _aff,
            False,
        ),
        (
            {},
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "NotIn",
                                            "values": ["b"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            False,
        ),
    ],
)
def test_node_level_constraints(
    node_kwargs: dict[str, Any], pod_spec: dict[str, Any], placeable: bool
) -> None:
    plan = run(_one_pending(node_kwargs, pod_spec))
    if placeable:
        assert plan.status == "OPTIMAL"
        assert [(p.pod, p.to_node) for p in plan.placements] == [("default/new", "b")]
    else:
        assert plan.status == "NO_IMPROVEMENT" and plan.optimal
        assert plan.placements == () and plan.moves == ()


def _blocked(
    extra_meta: dict[str, Any], owner: tuple[str, str] | None = ("ReplicaSet", "r")
) -> Snapshot:
    """Placing the pending pod needs the small pod on a to move to b (b's pod must stay)."""
    items: list[dict[str, Any]] = [
        node_obj("a", cpu="1000m"),
        node_obj("b", cpu="1000m"),
        pod_obj("small", "400m", "1M", node="a", owner=owner, **extra_meta),
        pod_obj("fill-b", "500m", "1M", node="b", annotations={"carico.io/do-not-move": "y"}),
        pod_obj("new", "700m", "1M"),
    ]
    if "labels" in extra_meta:
        items.append(
            {
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "guard", "namespace": "default"},
                "spec": {"selector": {"matchLabels": extra_meta["labels"]}},
                "status": {"disruptionsAllowed": 0},
            }
        )
    return parse_list(kube_list(*items))


def test_movable_pod_is_moved() -> None:
    plan = run(_blocked({}))
    assert [(m.pod, m.to_node) for m in plan.moves] == [("default/small", "b")]
    assert plan.optimal


@pytest.mark.parametrize(
    ("meta", "owner"),
    [
        ({"annotations": {"carico.io/do-not-move": "true"}}, ("ReplicaSet", "r")),
        ({}, ("DaemonSet", "d")),
        ({}, None),
        ({"annotations": {"kubernetes.io/config.mirror": "abc"}}, ("Node", "a")),
        ({"labels": {"app": "guarded"}}, ("ReplicaSet", "r")),
    ],
    ids=["do-not-move", "daemonset", "bare", "mirror", "pdb"],
)
def test_immovable_pods_stay(meta: dict[str, Any], owner: tuple[str, str] | None) -> None:
    plan = run(_blocked(meta, owner))
    assert plan.status == "NO_IMPROVEMENT" and plan.optimal
    assert plan.moves == () and plan.evictions == ()


def test_extended_resources_are_respected() -> None:
    doc = kube_list(
        node_obj("a", extra={"example.com/gpu": "1"}),
        node_obj("b"),
        pod_obj(
            "gpu-user",
            "100m",
            "1M",
            node="a",
            spec={
                "containers": [{"resources": {"requests": {"cpu": "100m", "example.com/gpu": "1"}}}]
            },
        ),
        pod_obj(
            "wants-gpu",
            "100m",
            "1M",
            spec={
                "containers": [{"resources": {"requests": {"cpu": "100m", "example.com/gpu": "1"}}}]
            },
        ),
    )
    plan = run(parse_list(doc))
    assert plan.status == "NO_IMPROVEMENT" and plan.optimal  # one gpu in the cluster, taken


def test_pods_resource_limits_count() -> None:
    doc = kube_list(
        node_obj("a", pods="1"),
        pod_obj("one", "100m", "1M", node="a"),
        pod_obj("two", "100m", "1M"),
    )
    assert run(parse_list(doc)).status == "NO_IMPROVEMENT"


def test_higher_tier_wins_even_at_the_cost_of_evictions() -> None:
    # one node, room for one 600m pod: the pending high-priority pod replaces the low one
    snap = simple_snapshot(
        [("a", 1000, 1000 * MB)],
        [("low", 600, 100 * MB, "a", 1), ("high", 600, 100 * MB, None, 10)],
    )
    plan = run(snap)
    assert plan.status == "OPTIMAL"
    assert [e.pod for e in plan.evictions] == ["default/low"]
    assert [p.pod for p in plan.placements] == ["default/high"]
    assert plan.after.vector == (1, 0, 1, -2)
    assert [s.action for s in plan.steps] == ["evict", "place"]


def test_more_low_pods_never_beat_one_high_pod() -> None:
    # placing the high pod costs two low pods; lexicographic order still prefers it
    snap = simple_snapshot(
        [("a", 1000, 1000 * MB)],
        [
            ("low1", 500, 10 * MB, "a", 1),
            ("low2", 500, 10 * MB, "a", 1),
            ("high", 1000, 10 * MB, None, 5),
        ],
    )
    plan = run(snap)
    assert plan.after.placed_by_priority == {5: 1, 1: 0}
    assert sorted(e.pod for e in plan.evictions) == ["default/low1", "default/low2"]


def test_identical_pending_pod_never_displaces_a_running_one() -> None:
    snap = simple_snapshot(
        [("a", 1000, 1000 * MB), ("b", 1000, 1000 * MB)],
        [
            ("run", 600, 100 * MB, "a", 0),
            ("blocker", 600, 100 * MB, "b", 0),
            ("twin", 600, 100 * MB, None, 0),
        ],
    )
    plan = run(snap)
    assert plan.status == "NO_IMPROVEMENT" and plan.optimal
    assert plan.moves == () and plan.evictions == ()


def test_no_pending_pods_means_nothing_to_do() -> None:
    snap = simple_snapshot([("a", 1000, 1000 * MB)], [("x", 100, MB, "a", 0)])
    plan = solve(snap, SolveOptions(time_limit=1))
    assert plan.status == "NO_IMPROVEMENT" and plan.optimal and plan.steps == ()


def _random_snapshot(seed: int) -> Snapshot:
    rng = random.Random(seed)
    nodes = [(f"n{i}", 1000, 1000 * MB) for i in range(3)]
    pods = []
    for i in range(9):
        node = f"n{rng.randrange(3)}" if i < 6 else None
        pods.append(
            (
                f"p{i}",
                rng.choice([200, 300, 400, 500]),
                rng.choice([200, 400]) * MB,
                node,
                rng.choice([1, 2]),
            )
        )
    # keep the running part feasible: drop running pods that overflow their node
    load: dict[str, int] = {}
    kept = []
    for name, c, m, node, prio in pods:
        if node is not None:
            if load.get(node, 0) + c > 1000:
                node = None
            else:
                load[node] = load.get(node, 0) + c
        kept.append((name, c, m, node, prio))
    return simple_snapshot(nodes, kept)


@pytest.mark.parametrize("seed", range(6))
def test_formulations_agree_on_small_instances(seed: int) -> None:
    snap = _random_snapshot(seed)
    a = run(snap, "classes")
    b = run(snap, "per-pod")
    assert a.optimal and b.optimal  # tiny instances are proven within the limit
    assert a.after.vector == b.after.vector
