"""The balancing engine's plan executed on the real control plane (docs/architecture.md#balancing).

The pool of ``test_repack_apply_e2e`` (three 1000m / 2Gi nodes of a fake kubelet of their own)
holds four one-replica ReplicaSets spread over the three nodes; node c's pod is guarded by a
PodDisruptionBudget that allows no disruption, node b's by one that allows one. A consolidate
plan computed from the live objects frees a and b by moving their three pods onto c (c's own
pod cannot move, so c cannot go); the ``PlanExecutor`` carries it out through the real Eviction
API, ReplicaSet controller and kube-scheduler steered by the in-process extender's plan slots.
A pod watch checks that no node is ever over capacity; the guarded pod never moves. Every wait
is a liveness bound, nothing asserts on timing.
"""

from __future__ import annotations

import kubernetes
import pytest
import test_repack_apply_e2e as apply_e2e
from e2e_controlplane import wait_for
from e2e_inprocess_extender import InProcessExtender
from test_repack_apply_e2e import LIVENESS_S, Bed, LoadSampler, executor

from repack.driver.balance import rebalance
from repack.driver.options import SolveOptions
from repack.problem.checker import check_goal
from repack.problem.goal_spec import GoalSpec, Limits
from scheduler_ext.repack.executor import COMPLETED

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# the pool of three nodes and the in-process extender kube-scheduler calls, as the repacker's
# apply tests set them up
pool = apply_e2e.pool
bed = apply_e2e.bed

SPREAD = {
    "a": [("rs-a-0", "200m", "300Mi"), ("rs-a-1", "200m", "300Mi")],
    "b": [("rs-b-0", "300m", "500Mi")],
    "c": [("rs-c-0", "200m", "400Mi")],
}
SPEC = GoalSpec("consolidate", Limits(max_moves=5, max_share=1.0))


def spread(b: Bed) -> None:
    for key, pods in SPREAD.items():
        for other in SPREAD:
            b.cordon(b.nodes[other], other != key)
        for name, cpu, mem in pods:
            b.replica_set(name, cpu, mem)
        wait_for(
            lambda key=key, pods=pods: all(
                (p := b.pod_of(name)) is not None
                and p.spec.node_name == b.nodes[key]
                and p.status.phase == "Running"
                for name, _, _ in pods
            ),
            LIVENESS_S,
            f"the pods of node {key} running there",
        )
    for node in b.nodes.values():
        b.cordon(node, False)


def budget(b: Bed, app: str, **spec: int) -> None:
    b.policy.create_namespaced_pod_disruption_budget(
        b.ns,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": f"pdb-{app}"},
            "spec": {**spec, "selector": {"matchLabels": {"app": app}}},
        },
    )

    def observed() -> bool:
        pdb = b.policy.read_namespaced_pod_disruption_budget(f"pdb-{app}", b.ns)
        return pdb.status is not None and pdb.status.current_healthy == 1

    wait_for(observed, LIVENESS_S, f"the disruption controller's view of pdb-{app}")


def test_consolidate_plan_frees_two_nodes_without_overload_or_budget_breach(
    bed: tuple[Bed, InProcessExtender], api_client: kubernetes.client.ApiClient
) -> None:
    b, ext = bed
    sampler = LoadSampler(api_client, b.ns)
    sampler.start()
    try:
        spread(b)
        budget(b, "rs-c-0", minAvailable=1)  # allows no disruption: the pod may not move
        budget(b, "rs-b-0", maxUnavailable=1)  # allows one
        guarded = b.pod_of("rs-c-0")
        snapshot = b.snapshot(ext)
        plan = rebalance(snapshot, SPEC, SolveOptions(time_limit=10, workers=1))
        assert plan.improved, plan.message
        assert check_goal(snapshot, plan, SPEC) == []
        assert plan.goal is not None
        assert set(plan.goal.freed) == {b.nodes["a"], b.nodes["b"]}
        assert {m.to_node for m in plan.moves} == {b.nodes["c"]} and len(plan.moves) == 3
        run = executor(ext)
        ex = ext.call(lambda: run.execute(plan, snapshot=snapshot))
        assert ex.outcome == COMPLETED, (ex.reason, ex.events)
        for name in ("rs-a-0", "rs-a-1", "rs-b-0"):
            wait_for(
                lambda name=name: (
                    (p := b.pod_of(name)) is not None
                    and p.spec.node_name == b.nodes["c"]
                    and p.status.phase == "Running"
                ),
                LIVENESS_S,
                f"{name} running on node c",
            )
    finally:
        sampler.stop()
    after = b.pod_of("rs-c-0")
    assert after.metadata.uid == guarded.metadata.uid  # the budget that allows nothing held
    assert after.spec.node_name == b.nodes["c"]
    assert all((p.spec.node_name == b.nodes["c"]) for p in b.pods())
    assert sampler.samples > 10 and sampler.overloads == []
    assert ext.metric("carico_repack_plan_slots_open") == 0
