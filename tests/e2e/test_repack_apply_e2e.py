"""Repack apply mode on the real control plane (docs/architecture.md#repack-execution).

Three nodes of 1000m / 2Gi (a fake kubelet of their own, labelled as this test's pool) carry the
fragmentation article's nine ReplicaSet pods; a tenth ReplicaSet's 300m / 600Mi pod fits no node
although the pool has room in total. The plan is computed from the live objects, then the
``PlanExecutor`` carries it out on the loop of an in-process extender that the real kube-scheduler
calls (``e2e_inprocess_extender``): evictions through the real Eviction API, replacement pods
created by the real ReplicaSet controller, scheduled by the real kube-scheduler and steered by the
extender's plan slots. A pod watch samples every node's requested total on every change, so "no
node is ever over capacity" is checked at every step, not only at the end.

The initial fragmented placement is forced by cordoning: the pods meant for a node are created
while the other pool nodes are cordoned (the scheduler's node filter is then the only way in).
Every wait is a liveness bound far above the expected time; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from e2e_controlplane import ControlPlane, wait_for
from e2e_extender import CaricoFactory
from e2e_inprocess_extender import InProcessExtender
from e2e_workloads import replica_set
from fake_kubelet import FakeKubelet, NodeSpec
from kubernetes.client.rest import ApiException

from carico_app.schedconfig import CARICO_PROFILE, ExtenderConfig
from repack.driver.solver import SolveOptions, solve
from repack.problem.plan import Plan
from repack.problem.snapshot import Snapshot, parse_list, parse_resource_quantity
from scheduler_ext.repack.executor import ABORTED, COMPLETED, ExecutorOptions, PlanExecutor
from scheduler_ext.repack.live import merge_lists

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

POOL = "carico.io/e2e-pool"
LIVENESS_S = 120.0
# node -> the requests of its three pods (the article gives totals; these split them)
LAYOUT = {
    "a": [("300m", "700Mi"), ("200m", "600Mi"), ("200m", "600Mi")],
    "b": [("400m", "500Mi"), ("200m", "400Mi"), ("200m", "400Mi")],
    "c": [("300m", "600Mi"), ("300m", "500Mi"), ("300m", "500Mi")],
}
ALLOC = {"cpu": 1000, "memory": 2 * 1024**3}
OPTIONS = ExecutorOptions(
    plan_timeout=240, step_timeout=120, blocked_timeout=60, poll_seconds=0.5, backoff_max=4
)


class Bed:
    """The pool's nodes, the namespace, and the API clients a test uses."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.apps = kubernetes.client.AppsV1Api(api)
        self.policy = kubernetes.client.PolicyV1Api(api)
        self.ns = namespace
        self.nodes = {k: f"{namespace}-{k}" for k in LAYOUT}

    def replica_set(self, name: str, cpu: str, memory: str) -> None:
        self.apps.create_namespaced_replica_set(
            self.ns, replica_set(name, cpu, memory, CARICO_PROFILE, {POOL: self.ns}, 0)
        )

    def pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.ns).items)

    def pod_of(self, app: str) -> Any:
        found = [p for p in self.pods() if (p.metadata.labels or {}).get("app") == app]
        return found[0] if len(found) == 1 else None

    def wait_pending_pod_running(self) -> None:
        wait_for(
            lambda: (p := self.pod_of("rs-new")) is not None and p.status.phase == "Running",
            LIVENESS_S,
            "the formerly pending pod Running",
        )

    def _placed_on(self, key: str) -> bool:
        """Whether node ``key``'s three pods run there. A pod bound elsewhere raced the cordons
        (kube-scheduler's node informer had not seen them yet, which a loaded machine can make
        last): it is deleted, and its ReplicaSet's next pod is placed under the cordons."""
        placed = True
        for i in range(3):
            pod = self.pod_of(f"rs-{key}-{i}")
            if pod is None or pod.metadata.deletion_timestamp is not None:
                placed = False
            elif pod.spec.node_name and pod.spec.node_name != self.nodes[key]:
                self.core.delete_namespaced_pod(pod.metadata.name, self.ns, grace_period_seconds=0)
                placed = False
            elif pod.spec.node_name != self.nodes[key] or pod.status.phase != "Running":
                placed = False
        return placed

    def cordon(self, node: str, on: bool) -> None:
        self.core.patch_node(node, {"spec": {"unschedulable": on}})

    def fragment(self) -> None:
        """Place the nine pods as LAYOUT says, then add the pending tenth."""
        for key, pods in LAYOUT.items():
            for other in LAYOUT:
                self.cordon(self.nodes[other], other != key)
            for i, (cpu, mem) in enumerate(pods):
                self.replica_set(f"rs-{key}-{i}", cpu, mem)
            wait_for(
                lambda key=key: self._placed_on(key),
                LIVENESS_S,
                f"the pods of node {key} running there",
                detail=lambda key=key: ", ".join(
                    f"{p.metadata.name} on {p.spec.node_name} {p.status.phase}"
                    for p in self.pods()
                    if p.metadata.name.startswith(f"rs-{key}-")
                ),
            )
        for node in self.nodes.values():
            self.cordon(node, False)
        self.replica_set("rs-new", "300m", "600Mi")

        def pending_unschedulable() -> bool:
            p = self.pod_of("rs-new")
            return p is not None and any(
                c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                for c in (p.status.conditions or [])
            )

        wait_for(pending_unschedulable, LIVENESS_S, "the tenth pod pending as Unschedulable")

    def snapshot(self, ext: InProcessExtender) -> Snapshot:
        """The live objects of this pool and namespace, as the extender lists them to repack."""
        raws = ext.call(lambda: ext.svc.cluster.list_for_repack())  # type: ignore[attr-defined]
        document = merge_lists(raws)
        pool = set(self.nodes.values())
        items = [
            i
            for i in document["items"]
            if (i["kind"] == "Node" and i["metadata"]["name"] in pool)
            or (i["kind"] != "Node" and i["metadata"].get("namespace") == self.ns)
        ]
        return parse_list({"items": items})

    def plan(self, ext: InProcessExtender) -> Plan:
        """A plan computed from the live objects of this pool and namespace."""
        plan = solve(self.snapshot(ext), SolveOptions(time_limit=10, workers=1))
        assert plan.improved, plan.message
        return plan


class LoadSampler:
    """Watches the namespace's pods and records any moment a node's requests exceed its room."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.ns = namespace
        self.pods: dict[str, tuple[str, dict[str, int]]] = {}
        self.samples = 0
        self.overloads: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="load-sampler")

    def _record(self, kind: str, pod: Any) -> None:
        uid = pod.metadata.uid
        phase = pod.status.phase if pod.status else ""
        if kind == "DELETED" or phase in ("Succeeded", "Failed") or not pod.spec.node_name:
            self.pods.pop(uid, None)
        else:
            need: dict[str, int] = {}
            for c in pod.spec.containers:
                for r, v in ((c.resources and c.resources.requests) or {}).items():
                    need[r] = need.get(r, 0) + parse_resource_quantity(r, v)
            self.pods[uid] = (pod.spec.node_name, need)
        load: dict[str, dict[str, int]] = {}
        for node, need in self.pods.values():
            for r, v in need.items():
                load.setdefault(node, {})[r] = load.setdefault(node, {}).get(r, 0) + v
        self.samples += 1
        for node, per in load.items():
            for r, v in per.items():
                if r in ALLOC and v > ALLOC[r]:
                    self.overloads.append(f"{node}: {r} {v} > {ALLOC[r]}")

    def _run(self) -> None:
        while not self._stop.is_set():
            w = kubernetes.watch.Watch()
            try:
                for event in w.stream(self.core.list_namespaced_pod, self.ns, timeout_seconds=5):
                    self._record(event["type"], event["object"])
                    if self._stop.is_set():
                        w.stop()
                        break
            except ApiException:
                self._stop.wait(0.5)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


@pytest.fixture
def pool(
    api_client: kubernetes.client.ApiClient, fake_kubelet: FakeKubelet, namespace: str
) -> Iterator[Bed]:
    """This test's three 1000m / 2Gi nodes (a fake kubelet of their own), deleted afterwards."""
    b = Bed(api_client, namespace)
    kubelet = FakeKubelet(
        api_client,
        [NodeSpec(n, cpu="1", memory="2Gi", labels={POOL: namespace}) for n in b.nodes.values()],
        heartbeat_s=2.0,
    )
    kubelet.start()
    try:
        yield b
    finally:
        kubelet.stop(delete_nodes=True)
        assert kubelet.errors == []


@pytest.fixture
def bed(control_plane: ControlPlane, pool: Bed) -> Iterator[tuple[Bed, InProcessExtender]]:
    """The pool, and an in-process extender that kube-scheduler calls."""
    ext = InProcessExtender(Path(control_plane.kubeconfig))
    ext.start()
    control_plane.restart_scheduler([ExtenderConfig(ext.url_prefix, node_cache_capable=True)])
    try:
        yield pool, ext
    finally:
        control_plane.restart_scheduler([])
        ext.stop()


def executor(ext: InProcessExtender, options: ExecutorOptions = OPTIONS) -> PlanExecutor:
    svc = ext.svc
    return PlanExecutor(
        svc.cluster,
        svc.slots,
        options,
        on_outcome=lambda outcome: svc.metrics.repack_executions.labels(outcome).inc(),
    )


def test_fragmentation_example_ends_with_the_pending_pod_running(
    bed: tuple[Bed, InProcessExtender], api_client: kubernetes.client.ApiClient
) -> None:
    b, ext = bed
    sampler = LoadSampler(api_client, b.ns)
    sampler.start()
    try:
        b.fragment()
        plan = b.plan(ext)
        assert {s.action for s in plan.steps} >= {"move", "place"}
        run = executor(ext)
        ex = ext.call(lambda: run.execute(plan))
        assert ex.outcome == COMPLETED, (ex.reason, ex.events)
        b.wait_pending_pod_running()
    finally:
        sampler.stop()
    place = next(s for s in plan.steps if s.action == "place")
    assert b.pod_of("rs-new").spec.node_name == place.to_node
    for move in (s for s in plan.steps if s.action == "move"):
        app = plan.owners[move.pod].split("/", 1)[1]
        assert b.pod_of(app).spec.node_name == move.to_node
    assert sampler.samples > 10  # the sampler saw the whole run
    assert sampler.overloads == []
    assert ext.metric("carico_repack_plan_slots_open") == 0
    assert ext.metric('carico_repack_executions_total{outcome="completed"}') == 1


def test_pod_protected_by_its_pdb_is_not_moved(
    bed: tuple[Bed, InProcessExtender],
) -> None:
    b, ext = bed
    b.fragment()
    unprotected = b.plan(ext)
    moved_app = unprotected.owners[next(s for s in unprotected.steps if s.action == "move").pod]
    app = moved_app.split("/", 1)[1]
    b.policy.create_namespaced_pod_disruption_budget(
        b.ns,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-" + app},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        },
    )
    protected = b.pod_of(app)

    def budget_observed() -> bool:
        pdb = b.policy.read_namespaced_pod_disruption_budget("keep-" + app, b.ns)
        return pdb.status is not None and pdb.status.current_healthy == 1

    wait_for(budget_observed, LIVENESS_S, "the disruption controller's view of the budget")
    plan = b.plan(ext)
    assert all(plan.owners.get(s.pod) != moved_app for s in plan.steps)
    run = executor(ext)
    ex = ext.call(lambda: run.execute(plan))
    assert ex.outcome == COMPLETED, (ex.reason, ex.events)
    after = b.pod_of(app)
    assert after.metadata.uid == protected.metadata.uid
    assert after.spec.node_name == protected.spec.node_name
    b.wait_pending_pod_running()


def test_eviction_refused_by_a_budget_aborts_and_leaves_no_slot(
    bed: tuple[Bed, InProcessExtender], api_client: kubernetes.client.ApiClient
) -> None:
    b, ext = bed
    b.fragment()
    plan = b.plan(ext)
    move = next(s for s in plan.steps if s.action == "move")
    app = plan.owners[move.pod].split("/", 1)[1]
    before = b.pod_of(app)
    # The budget appears after planning: the Eviction API answers 429, the plan pauses.
    b.policy.create_namespaced_pod_disruption_budget(
        b.ns,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "late"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        },
    )
    options = ExecutorOptions(
        plan_timeout=120, step_timeout=60, blocked_timeout=12, poll_seconds=0.5, backoff_max=2
    )
    run = executor(ext, options)
    task = asyncio.run_coroutine_threadsafe(run.execute(plan), ext.loop)
    # While paused, the plan holds its slots: the pending pod's and the replacement's.
    wait_for(
        lambda: ext.metric("carico_repack_plan_slots_open") == 2,
        LIVENESS_S,
        "two slots open during the pause",
    )
    pending = b.pod_of("rs-new")
    manifest = api_client.sanitize_for_serialization(pending)
    nodes = sorted(b.nodes.values())
    steered = ext.filter(manifest, nodes)
    assert steered["NodeNames"] == [next(s for s in plan.steps if s.action == "place").to_node]
    ex = task.result(LIVENESS_S)
    assert ex.outcome == ABORTED and "disruption budget" in ex.reason, ex.reason
    after = b.pod_of(app)
    assert after.metadata.uid == before.metadata.uid and after.spec.node_name == move.from_node
    assert ext.metric("carico_repack_plan_slots_open") == 0
    assert ext.metric('carico_repack_executions_total{outcome="aborted"}') == 1
    # No slot steers the pending pod any more: every pool node passes the extender's filter.
    assert ext.filter(manifest, nodes)["NodeNames"] == nodes
    assert ext.svc.table.reserved_counts() == {}


def test_apply_mode_of_the_extender_executes_its_own_plan(
    carico: CaricoFactory, pool: Bed, api_client: kubernetes.client.ApiClient
) -> None:
    """The whole path in the real extender process: the Unschedulable trigger, the solve, the
    ``--repack-mode apply`` executor, the slots in its filter, the plans API and /metrics."""
    b = pool
    ext, _ = carico(
        "--repack-mode",
        "apply",
        "--repack-debounce",
        "1",
        "--repack-cooldown",
        "3600",
        "--log-level",
        "info",
        node_cache_capable=True,
    )
    sampler = LoadSampler(api_client, b.ns)
    sampler.start()
    try:
        b.fragment()

        def executed() -> dict[str, Any] | None:
            runs = [r for r in ext.get("/api/v1/repack/plans") if r.get("execution")]
            done = [r for r in runs if r["execution"]["state"] != "running"]
            return done[0] if done else None

        wait_for(lambda: executed() is not None, LIVENESS_S * 2, "an executed repack plan")
        run = executed()
        assert run is not None and run["mode"] == "apply"
        assert run["execution"]["state"] == "completed", run["execution"]
        b.wait_pending_pod_running()
    finally:
        sampler.stop()
    [place] = run["plan"]["placements"]
    assert b.pod_of("rs-new").spec.node_name == place["to"]
    assert sampler.overloads == [] and sampler.samples > 10
    metrics = urllib.request.urlopen(f"{ext.base}/metrics", timeout=10).read().decode()
    assert 'carico_repack_executions_total{outcome="completed"} 1.0' in metrics
    assert "carico_repack_plan_slots_open 0.0" in metrics
