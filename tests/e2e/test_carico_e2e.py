"""The Carico extender behind the real kube-scheduler, binding through the real API (DESIGN §6).

Capacity comes from a scripted feed (e2e_extender.CapacityFeed): real gRPC streams to the real
extender, with the avail each test sets. Pods that must stay bound-but-Pending carry a long
``carico.io/sim-startup-seconds``, so reservations are held until the test releases them. Every
wait is a liveness bound, far above the expected time; no assertion is about timing.
"""

from __future__ import annotations

import collections
import urllib.error
from typing import Any

import kubernetes
import pytest
from e2e_controlplane import wait_for
from e2e_extender import CaricoFactory
from fake_kubelet import STARTUP_SECONDS_ANNOTATION, FakeKubelet

from carico.schedconfig import CARICO_PROFILE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

N0, N1, N2 = (f"e2e-node-{i}" for i in range(3))  # conftest.FAKE_NODES
HOLD = {STARTUP_SECONDS_ANNOTATION: "3600"}  # bound pods stay Pending until start_now
LIVENESS_S = 90.0


def _pod(name: str, annotations: dict[str, str] | None = None, scheduler: str = CARICO_PROFILE):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "registry.invalid/x:1"}],
        },
    }


def _pods(core: kubernetes.client.CoreV1Api, ns: str) -> list[Any]:
    return list(core.list_namespaced_pod(ns).items)


def _unschedulable(pod: Any) -> bool:
    return any(
        c.type == "PodScheduled" and c.status == "False"
        for c in (pod.status.conditions or [])
        if pod.status
    )


def _placement(core: kubernetes.client.CoreV1Api, ns: str) -> collections.Counter[str]:
    return collections.Counter(p.spec.node_name for p in _pods(core, ns) if p.spec.node_name)


def _all_decided(core: kubernetes.client.CoreV1Api, ns: str, count: int) -> bool:
    pods = _pods(core, ns)
    return len(pods) == count and all(p.spec.node_name or _unschedulable(p) for p in pods)


def test_burst_respects_avail_minus_reserved(
    carico: CaricoFactory, api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    ext, feed = carico()
    feed.set(**{N0: 2.0, N1: 0.5, N2: 3.0})  # N1 is below the threshold of 1 pod
    wait_for(lambda: ext.nodes()[N2].get("avail") == 3.0, LIVENESS_S, "scripted avail reported")
    core = kubernetes.client.CoreV1Api(api_client)
    for i in range(8):  # a burst: 8 pods for 2 + 3 = 5 free places
        core.create_namespaced_pod(namespace, _pod(f"burst-{i}", HOLD))
    wait_for(lambda: _all_decided(core, namespace, 8), LIVENESS_S, "every pod bound or refused")
    assert _placement(core, namespace) == {N0: 2, N2: 3}
    # The refused pods keep being retried; none may land later either.
    nodes = ext.nodes()
    assert (nodes[N0]["reserved"], nodes[N1]["reserved"], nodes[N2]["reserved"]) == (2, 0, 3)
    pending = [p for p in _pods(core, namespace) if not p.spec.node_name]
    assert len(pending) == 3 and all(_unschedulable(p) for p in pending)


def test_reservations_released_when_pods_run(
    carico: CaricoFactory,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    namespace: str,
) -> None:
    ext, feed = carico()
    feed.set_all(2.0)
    wait_for(lambda: ext.nodes()[N0].get("avail") == 2.0, LIVENESS_S, "scripted avail reported")
    core = kubernetes.client.CoreV1Api(api_client)
    for i in range(3):
        core.create_namespaced_pod(namespace, _pod(f"run-{i}", HOLD))
    wait_for(lambda: sum(_placement(core, namespace).values()) == 3, LIVENESS_S, "3 pods bound")
    assert sum(row["reserved"] for row in ext.nodes().values()) == 3
    assert fake_kubelet.start_now(namespace) == 3
    wait_for(
        lambda: all(p.status.phase == "Running" for p in _pods(core, namespace)),
        LIVENESS_S,
        "pods Running",
    )
    wait_for(
        lambda: all(row["reserved"] == 0 for row in ext.nodes().values()),
        LIVENESS_S,
        "reservations released at /api/v1/nodes",
    )
    assert ext.get("/api/v1/reservations") == []


def test_restart_rebuilds_the_ledger_from_the_api(
    carico: CaricoFactory, api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    # fail-closed: right after the restart no report has arrived yet, and the nodes must not be
    # passed blind meanwhile (fail-open would, by design).
    ext, feed = carico("--stale-policy", "fail-closed")
    feed.set(**{N0: 2.0, N1: 1.0, N2: 1.0})
    wait_for(lambda: ext.nodes()[N0].get("avail") == 2.0, LIVENESS_S, "scripted avail reported")
    core = kubernetes.client.CoreV1Api(api_client)
    for i in range(3):
        core.create_namespaced_pod(namespace, _pod(f"first-{i}", HOLD))
    wait_for(lambda: sum(_placement(core, namespace).values()) == 3, LIVENESS_S, "3 pods bound")
    before = _placement(core, namespace)
    ext.kill()  # SIGKILL: the in-memory ledger is gone
    # Pods created while the extender is down stay pending (ignorable: false) and are in flight
    # when it comes back.
    second = [f"second-{i}" for i in range(4)]
    for name in second:
        core.create_namespaced_pod(namespace, _pod(name, HOLD))
    ext.start()
    # Ready means rebuilt from the API: the 3 bound Pending pods are reserved again, where they are.
    rebuilt = {name: row["reserved"] for name, row in ext.nodes().items()}
    assert {n: c for n, c in rebuilt.items() if c} == dict(before)
    # Total free places were 2 + 1 + 1 = 4 and 3 were taken before the restart: one more fits.
    wait_for(lambda: sum(_placement(core, namespace).values()) == 4, LIVENESS_S, "a 4th pod bound")

    def decided_by_new_extender(name: str) -> bool:
        try:
            return bool(ext.get(f"/api/v1/explain?pod={namespace}/{name}"))
        except urllib.error.HTTPError:
            return False  # 404: the restarted extender has not seen this pod yet

    # Every still-pending pod has been filtered by the restarted extender (and refused).
    wait_for(
        lambda: all(
            decided_by_new_extender(p.metadata.name)
            for p in _pods(core, namespace)
            if not p.spec.node_name
        ),
        LIVENESS_S,
        "the pending pods retried through the restarted extender",
    )
    after = _placement(core, namespace)
    assert sum(after.values()) == 4
    assert after[N0] <= 2 and after[N1] <= 1 and after[N2] <= 1, after
    rows = ext.nodes()
    assert all(rows[n]["reserved"] == after[n] for n in (N0, N1, N2)), rows


@pytest.mark.parametrize("ignorable", [True, False])
def test_extender_down(
    carico: CaricoFactory,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    ignorable: bool,
) -> None:
    ext, _ = carico(ignorable=ignorable)
    ext.stop()
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, _pod("orphan"))
    if ignorable:
        # kube-scheduler skips an ignorable extender that does not answer and binds by itself.
        wait_for(
            lambda: bool(core.read_namespaced_pod("orphan", namespace).spec.node_name),
            LIVENESS_S,
            "the pod bound without the extender",
        )
        return

    def error_event() -> bool:
        events = core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=orphan"
        ).items
        return any(
            e.reason == "FailedScheduling" and "scheduler" in (e.message or "") for e in events
        )

    wait_for(error_event, LIVENESS_S, "a FailedScheduling event naming the extender error")
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=orphan")
    messages = [e.message for e in events.items if e.reason == "FailedScheduling"]
    # The extender's URL is in kube-scheduler's error: connection refused to the extender.
    assert any(str(ext.port) in m for m in messages), messages
    assert not core.read_namespaced_pod("orphan", namespace).spec.node_name


@pytest.mark.parametrize("policy", ["fail-open", "fail-closed"])
def test_silent_node_follows_the_stale_policy(
    carico: CaricoFactory,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    policy: str,
) -> None:
    # Stale after 5 s: reports come every 0.5 s, a 10x margin for a loaded machine.
    ext, feed = carico("--stale-after", "5", "--stale-policy", policy)
    feed.set_all(0.0)  # every reporting node is full
    feed.set(**{N1: 0.0})
    feed.silent.add(N2)
    wait_for(lambda: ext.nodes().get(N2, {}).get("stale", True), LIVENESS_S, f"{N2} stale")
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, _pod("stale-0"))
    if policy == "fail-open":
        wait_for(
            lambda: bool(core.read_namespaced_pod("stale-0", namespace).spec.node_name),
            LIVENESS_S,
            "the pod bound on the stale node",
        )
        assert core.read_namespaced_pod("stale-0", namespace).spec.node_name == N2
        return
    wait_for(
        lambda: _unschedulable(core.read_namespaced_pod("stale-0", namespace)),
        LIVENESS_S,
        "the pod refused everywhere",
    )
    explain = ext.get(f"/api/v1/explain?pod={namespace}/stale-0")
    assert "stale" in str(explain) or "no capacity report" in str(explain), explain
    assert not core.read_namespaced_pod("stale-0", namespace).spec.node_name


@pytest.mark.parametrize("node_cache_capable", [False, True])
def test_both_node_cache_modes(
    carico: CaricoFactory,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    node_cache_capable: bool,
) -> None:
    ext, feed = carico(node_cache_capable=node_cache_capable)
    feed.set(**{N0: 0.0, N1: 1.0, N2: 0.0})  # only N1 has room, for one pod
    wait_for(lambda: ext.nodes()[N1].get("avail") == 1.0, LIVENESS_S, "scripted avail reported")
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, _pod("only", HOLD))
    core.create_namespaced_pod(namespace, _pod("plain", HOLD, scheduler="default-scheduler"))
    wait_for(lambda: _all_decided(core, namespace, 2), LIVENESS_S, "both pods decided")
    assert core.read_namespaced_pod("only", namespace).spec.node_name == N1
    # The default profile's pod passed through the extender untouched (full nodes included) and
    # took no reservation.
    assert core.read_namespaced_pod("plain", namespace).spec.node_name
    assert {n: r["reserved"] for n, r in ext.nodes().items()} == {N0: 0, N1: 1, N2: 0}
    explain = ext.get(f"/api/v1/explain?pod={namespace}/only")
    assert explain, "the extender recorded its filter decision"


def test_deployment_scaled_through_the_controller_manager(
    carico: CaricoFactory,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    namespace: str,
) -> None:
    ext, feed = carico()
    feed.set_all(4.0)
    wait_for(lambda: ext.nodes()[N0].get("avail") == 4.0, LIVENESS_S, "scripted avail reported")
    apps = kubernetes.client.AppsV1Api(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    labels = {"app": "web"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 6,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulerName": CARICO_PROFILE,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "registry.invalid/x:1"}],
                },
            },
        },
    }
    apps.create_namespaced_deployment(namespace, deployment)

    def running(n: int) -> bool:
        pods = [p for p in _pods(core, namespace) if not p.metadata.deletion_timestamp]
        return len(pods) == n and all(p.status.phase == "Running" for p in pods)

    def counts_match() -> bool:
        # The feed reports the kubelet's counts, as an agent would report its pod watch's.
        kubelet = fake_kubelet.pod_counts()
        reported = {n: row.get("pods", -1) for n, row in ext.nodes().items()}
        placed = _placement(core, namespace)
        return all(
            reported.get(n) == kubelet[n].pods and reported.get(n, 0) >= placed.get(n, 0)
            for n in (N0, N1, N2)
        )

    try:
        wait_for(lambda: running(6), LIVENESS_S, "6 replicas Running")
        wait_for(counts_match, LIVENESS_S, "reported pod counts = pods per node")
        # A deleted pod is replaced by the ReplicaSet controller, through the extender again.
        victim = _pods(core, namespace)[0].metadata.name
        core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
        wait_for(
            lambda: running(6) and victim not in {p.metadata.name for p in _pods(core, namespace)},
            LIVENESS_S,
            "the replacement Running",
        )
        replacement = [p.metadata.name for p in _pods(core, namespace)]
        for name in replacement:
            assert ext.get(f"/api/v1/explain?pod={namespace}/{name}"), name
        apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 2}})
        wait_for(lambda: running(2), LIVENESS_S, "scaled down to 2")
        wait_for(counts_match, LIVENESS_S, "reported pod counts follow the scale-down")
        assert sum(_placement(core, namespace).values()) == 2
    finally:
        apps.delete_namespaced_deployment("web", namespace, propagation_policy="Foreground")
        wait_for(lambda: not apps.list_namespaced_deployment(namespace).items, LIVENESS_S, "gone")
