"""``POST /repack`` with a balancing goal, and the periodic balancing run, on a real extender
HTTP server in dry-run (docs/architecture.md#balancing)."""

from __future__ import annotations

import json

from repack_builders import kube_list, node_obj, pod_obj

from carico.pods import class_of_pod
from repack.problem.goal_spec import Limits
from scheduler_ext.cluster import InMemoryCluster

from .conftest import MakeRepacker
from .test_repack_http import metric

# node-a runs two cpu-heavy pods, node-b two memory-heavy ones (4 cores / 8Gi each): one swap
# gives each node the cluster's mix
LAYOUT = {
    "cpu-1": ("node-a", "1600m", "1Gi"),
    "cpu-2": ("node-a", "1600m", "1Gi"),
    "mem-1": ("node-b", "500m", "3Gi"),
    "mem-2": ("node-b", "500m", "3Gi"),
}


def mixed_cluster() -> dict[str, object]:
    return kube_list(
        *(node_obj(n, cpu="4", memory="8Gi") for n in ("node-a", "node-b")),
        *(
            pod_obj(name, cpu, mem, node=at, owner=("ReplicaSet", f"rs-{name}"))
            for name, (at, cpu, mem) in LAYOUT.items()
        ),
    )


async def test_post_repack_with_a_goal_returns_a_balancing_plan(
    make_repacker: MakeRepacker,
) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects(mixed_cluster())
    before = json.dumps(cluster.objects, sort_keys=True)
    r = await make_repacker(cluster=cluster)
    status, body = await r.post(json.dumps({"mode": "balance", "time_limit": 5}).encode())
    assert status == 200, body
    assert body["goal"] == "balance" and body["trigger"] == "http" and body["mode"] == "dry-run"
    plan = body["plan"]
    assert body["status"] in ("OPTIMAL", "FEASIBLE")
    assert plan["placements"] == [] and plan["evictions"] == []
    assert sorted(m["pod"] for m in plan["moves"])[0].startswith("default/cpu")
    assert len(plan["moves"]) == 2
    goal = plan["goal"]
    assert goal["basis"] == "requests" and goal["after"] < goal["before"] * 0.05
    assert goal["touched"] == ["node-a", "node-b"]
    assert json.dumps(cluster.objects, sort_keys=True) == before  # dry-run changes nothing
    text = await r.metrics()
    assert metric(text, "carico_repack_goal_measure", goal="balance") == goal["before"]
    status, body = await r.post(json.dumps({"mode": "tidy"}).encode())
    assert status == 400 and "mode must be one of" in body["Error"]
    status, state = await r.get("/api/v1/repack")
    assert status == 200 and state["balance"]["goal"] == "balance"
    assert state["balance"]["max_moves"] == Limits().max_moves


async def test_balance_goal_on_measured_footprints_says_so(make_repacker: MakeRepacker) -> None:
    # every pod requests the same; the footprints the agents measured make a and b lopsided
    doc = kube_list(
        *(node_obj(n, cpu="4", memory="8Gi") for n in ("node-a", "node-b")),
        *(
            pod_obj(f"{kind}-{i}", "1", "2Gi", node=at, owner=("ReplicaSet", f"rs-{kind}"))
            for kind, at in (("burn", "node-a"), ("hold", "node-b"))
            for i in range(2)
        ),
    )
    classes = {
        class_of_pod(i).name: i["metadata"]["name"].split("-")[0]
        for i in doc["items"]
        if i["kind"] == "Pod"
    }
    footprints = {
        name: (1.5, 0.2 * 2**30) if kind == "burn" else (0.1, 3.0 * 2**30)
        for name, kind in classes.items()
    }
    cluster = InMemoryCluster()
    cluster.set_objects(doc)
    r = await make_repacker(cluster=cluster, footprints=lambda: footprints)
    status, body = await r.post(json.dumps({"mode": "balance"}).encode())
    assert status == 200, body
    goal = body["plan"]["goal"]
    assert goal["basis"] == "telemetry" and len(body["plan"]["moves"]) == 2
    plain = await make_repacker(cluster=cluster)
    status, body = await plain.post(json.dumps({"mode": "balance"}).encode())
    assert status == 200 and body["status"] == "NO_IMPROVEMENT"
    assert body["plan"]["goal"]["basis"] == "requests"


async def test_periodic_consolidation_runs_once_per_period_and_state(
    make_repacker: MakeRepacker,
) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects(
        kube_list(
            *(node_obj(n) for n in ("node-a", "node-b", "node-c")),
            *(
                pod_obj(f"p-{n}", "200m", "300M", node=n, owner=("ReplicaSet", f"rs-{n}"))
                for n in ("node-a", "node-b", "node-c")
            ),
        )
    )
    r = await make_repacker(
        cluster=cluster,
        balance_period=120.0,
        balance_goal="consolidate",
        balance_limits=Limits(max_share=1.0),
    )
    first = await r.repack.tick()
    assert first is not None and first.trigger == "period" and first.goal == "consolidate"
    assert first.plan is not None and len(first.plan["goal"]["freed"]) >= 1
    assert await r.repack.tick() is None  # within the period
    r.clock.now += 121
    assert await r.repack.tick() is None  # the same cluster state: not solved again
    status, plans = await r.get("/api/v1/repack/plans")
    assert status == 200 and [p["trigger"] for p in plans] == ["period"]
