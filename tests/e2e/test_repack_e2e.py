"""Repacking on the real control plane, dry-run: the fragmentation article's example.

Design: docs/architecture.md#repack-execution.

Three extra nodes of 1000m / 2 GB (a second fake kubelet, labelled as a pool) carry nine
ReplicaSet pods laid out as in the article: 600m and 1200 MB free in total, but no node with both
300m and 600 MB. A pending 300m / 600 MB pod of Carico's scheduler is marked Unschedulable by the
real kube-scheduler. The layout is made by binding each ReplicaSet's pod to its node through the
Binding API (the pods name a scheduler nobody runs), so it is exactly the article's whatever the
scheduler's scores would say; every pod is restricted to the pool by a nodeSelector, so the plan
must be found inside it. One of the two pods the plan could move is protected by a PDB.

The extender (real process, real watch) must produce the plan through its debounce trigger and
through ``POST /repack``, ``carico repack --kubeconfig`` must find it too, and nothing in the
cluster may change. Every wait is a liveness bound, far above the expected time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from e2e_controlplane import ControlPlane, wait_for
from e2e_extender import CaricoFactory
from e2e_workloads import replica_set
from fake_kubelet import FakeKubelet, NodeSpec

from carico_app.schedconfig import CARICO_PROFILE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

POOL_LABEL = "carico.io/e2e-pool"
POOL = "fragmented"
A, B, C = "repack-e2e-a", "repack-e2e-b", "repack-e2e-c"
# Per-pod requests are ours; the article gives only the totals (same layout as the unit tests).
LAYOUT = {
    A: [("300m", "700M"), ("200m", "600M"), ("200m", "600M")],
    B: [("400m", "500M"), ("200m", "400M"), ("200m", "400M")],
    C: [("300m", "600M"), ("300m", "500M"), ("300m", "500M")],
}
LAYOUT_SCHEDULER = "e2e-layout"  # no scheduler runs under this name: the test binds these pods
LIVENESS_S = 90.0


@pytest.fixture
def small_pool(
    api_client: kubernetes.client.ApiClient, fake_kubelet: FakeKubelet
) -> Iterator[None]:
    """Three 1000m / 2 GB nodes for this test only, deleted afterwards."""
    kubelet = FakeKubelet(
        api_client,
        [NodeSpec(n, cpu="1", memory="2G", pods=110, labels={POOL_LABEL: POOL}) for n in LAYOUT],
        heartbeat_s=2.0,
    )
    kubelet.start()
    try:
        yield
    finally:
        kubelet.stop(delete_nodes=True)


def _replicaset(name: str, cpu: str, memory: str, scheduler: str) -> dict[str, Any]:
    return replica_set(name, cpu, memory, scheduler, {POOL_LABEL: POOL})


def _pod_of(core: kubernetes.client.CoreV1Api, ns: str, app: str) -> Any:
    pods = core.list_namespaced_pod(ns, label_selector=f"app={app}").items
    return pods[0] if len(pods) == 1 else None


def _state(core: kubernetes.client.CoreV1Api, ns: str) -> dict[str, tuple[str, str | None, bool]]:
    """name -> (uid, node, terminating) of every pod in the namespace."""
    return {
        p.metadata.name: (
            p.metadata.uid,
            p.spec.node_name,
            p.metadata.deletion_timestamp is not None,
        )
        for p in core.list_namespaced_pod(ns).items
    }


def _unschedulable(pod: Any) -> bool:
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in (pod.status.conditions or [])
    )


def _lay_out(core: kubernetes.client.CoreV1Api, apps: kubernetes.client.AppsV1Api, ns: str) -> None:
    for node, pods in LAYOUT.items():
        for i, (cpu, memory) in enumerate(pods):
            name = f"{node[-1]}-{i}"
            apps.create_namespaced_replica_set(ns, _replicaset(name, cpu, memory, LAYOUT_SCHEDULER))
            wait_for(lambda n=name: _pod_of(core, ns, n) is not None, LIVENESS_S, f"pod of {name}")
            pod = _pod_of(core, ns, name)
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": pod.metadata.name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            # _preload_content=False: the client cannot deserialise this response (#547).
            core.create_namespaced_pod_binding(
                pod.metadata.name, ns, binding, _preload_content=False
            ).release_conn()


def _check_plan(plan: dict[str, Any], ns: str, incoming: str, owners: dict[str, str]) -> None:
    """The article's answer: one 200m/600M pod leaves A for B, and the pending pod goes to A.
    A-1's PDB allows no disruption, so it must be A-2 that moves."""
    assert plan["status"] == "OPTIMAL" and plan["optimal"] is True, plan
    assert plan["placements"] == [{"pod": f"{ns}/{incoming}", "to": A}]
    assert plan["evictions"] == []
    [move] = plan["moves"]
    assert (move["from"], move["to"]) == (A, B)
    assert move["owner"] == "ReplicaSet/a-2" == owners[move["pod"]]
    assert [s["action"] for s in plan["steps"]] == ["move", "place"]
    # Only the pool's pods count here; the session's other nodes may hold pods of their own.
    before, after = plan["before"]["placed_by_priority"], plan["after"]["placed_by_priority"]
    assert after["0"] == before["0"] + 1


def test_dry_run_plans_the_article_repack_and_changes_nothing(
    carico: CaricoFactory,
    small_pool: None,
    api_client: kubernetes.client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    policy = kubernetes.client.PolicyV1Api(api_client)
    ext, _ = carico("--repack-debounce", "1", "--repack-cooldown", "3600", "--log-level", "info")

    _lay_out(core, apps, namespace)
    wait_for(
        lambda: sum(1 for _, node, _ in _state(core, namespace).values() if node) == 9,
        LIVENESS_S,
        "the nine pods bound",
    )
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-a-1"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a-1"}}},
        },
    )
    apps.create_namespaced_replica_set(
        namespace, _replicaset("incoming", "300m", "600M", CARICO_PROFILE)
    )
    wait_for(
        lambda: (p := _pod_of(core, namespace, "incoming")) is not None and _unschedulable(p),
        LIVENESS_S,
        "kube-scheduler to mark the incoming pod Unschedulable",
    )
    incoming = _pod_of(core, namespace, "incoming").metadata.name
    owners = {
        f"{namespace}/{p.metadata.name}": f"ReplicaSet/{p.metadata.labels['app']}"
        for p in core.list_namespaced_pod(namespace).items
    }
    before = _state(core, namespace)

    # 1. The debounce trigger: the extender's watch saw the pod stuck, and solved on its own.
    def automatic() -> dict[str, Any] | None:
        runs = [p for p in ext.get("/api/v1/repack/plans") if p["trigger"] == "unschedulable"]
        return runs[0] if runs else None

    wait_for(lambda: automatic() is not None, LIVENESS_S, "an automatic repack run")
    run = automatic()
    assert run is not None and run["mode"] == "dry-run" and run["execution"] is None
    assert f"{namespace}/{incoming}" in run["pending"]
    _check_plan(run["plan"], namespace, incoming, owners)

    # 2. On demand: POST /repack computes the same plan.
    request = json.dumps({"time_limit": 10}).encode()
    req = urllib.request.Request(f"{ext.base}/repack", data=request, method="POST")
    with urllib.request.urlopen(req, timeout=LIVENESS_S) as resp:
        assert resp.status == 200
        on_demand = json.loads(resp.read())
    assert on_demand["trigger"] == "http" and on_demand["mode"] == "dry-run"
    _check_plan(on_demand["plan"], namespace, incoming, owners)

    # 3. The command line against the same cluster, through the kubeconfig and its context.
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "carico"),
            "repack",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--context",
            "e2e",
            "--scheduler",
            CARICO_PROFILE,
            "--time-limit",
            "10",
            "--workers",
            "2",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=LIVENESS_S,
    )
    assert out.returncode == 0, out.stderr
    _check_plan(json.loads(out.stdout), namespace, incoming, owners)

    # Dry-run: the same pods (same uids) on the same nodes, none terminating, the pod pending.
    assert _state(core, namespace) == before
    assert before[incoming][1] is None
    metrics = urllib.request.urlopen(f"{ext.base}/metrics", timeout=10).read().decode()
    assert 'carico_repack_runs_total{status="OPTIMAL",trigger="unschedulable"} 1.0' in metrics
    assert 'carico_repack_runs_total{status="OPTIMAL",trigger="http"} 1.0' in metrics
    assert "carico_repack_unschedulable_pods 1.0" in metrics
    assert "repack #1 (unschedulable, dry-run): OPTIMAL" in ext.log_tail(200)
