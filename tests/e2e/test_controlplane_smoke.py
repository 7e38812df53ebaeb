"""The test bed itself: the real scheduler, controller-manager and API drive the fake kubelet.

No extender is configured here; these tests prove the bed that the Carico e2e suite builds on.
Waits are liveness bounds (see e2e_controlplane.wait_for), never pass/fail timings.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from e2e_controlplane import ControlPlane, wait_for
from fake_kubelet import RUN_SECONDS_ANNOTATION, FakeKubelet, NodeSpec, PodCountsRecorder

from carico_app.schedconfig import CARICO_PROFILE, DEFAULT_PROFILE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Generous: a pod goes Pending -> bound -> Running in about a second on an idle machine.
POD_TIMEOUT_S = 60


def _pod(
    name: str, scheduler: str | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.invalid/sleep:1"}],
        "terminationGracePeriodSeconds": 5,
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": spec,
    }


def _phase(core: kubernetes.client.CoreV1Api, ns: str, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, ns)
    return pod.status.phase if pod.status else None


def _scheduled_by(core: kubernetes.client.CoreV1Api, ns: str, name: str) -> set[str]:
    """Which scheduler profiles reported a successful binding of this pod."""
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return {
        e.reporting_component or (e.source.component if e.source else "")
        for e in events
        if e.reason == "Scheduled"
    }


def test_binaries_carry_the_pinned_version(control_plane: ControlPlane) -> None:
    gomod = Path(__file__).parent / "gobuild" / "kube" / "go.mod"
    pinned = re.search(r"k8s\.io/kubernetes (v\S+)", gomod.read_text())
    assert pinned is not None
    version = kubernetes.client.VersionApi(control_plane.api_client()).get_code()
    assert version.git_version == pinned.group(1)


def test_default_scheduler_binds_and_pod_runs(
    api_client: kubernetes.client.ApiClient, fake_kubelet: FakeKubelet, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, _pod("plain"))
    wait_for(lambda: _phase(core, namespace, "plain") == "Running", POD_TIMEOUT_S, "plain Running")
    pod = core.read_namespaced_pod("plain", namespace)
    assert pod.spec.node_name in set(fake_kubelet.nodes)
    assert pod.status.pod_ip and pod.status.host_ip
    ready = {c.type: c.status for c in pod.status.conditions}
    assert ready["Ready"] == "True" and ready["PodScheduled"] == "True"
    wait_for(lambda: bool(_scheduled_by(core, namespace, "plain")), 30, "Scheduled event")
    assert _scheduled_by(core, namespace, "plain") == {DEFAULT_PROFILE}
    assert fake_kubelet.errors == []


def test_carico_profile_schedules_its_pods(
    api_client: kubernetes.client.ApiClient, fake_kubelet: FakeKubelet, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    # Control: no profile is named "nobody", so that pod must stay unbound while ours is placed.
    core.create_namespaced_pod(namespace, _pod("orphan", scheduler="nobody"))
    core.create_namespaced_pod(namespace, _pod("opted-in", scheduler=CARICO_PROFILE))
    wait_for(
        lambda: _phase(core, namespace, "opted-in") == "Running", POD_TIMEOUT_S, "opted-in Running"
    )
    assert core.read_namespaced_pod("opted-in", namespace).spec.node_name in set(fake_kubelet.nodes)
    wait_for(lambda: bool(_scheduled_by(core, namespace, "opted-in")), 30, "Scheduled event")
    assert _scheduled_by(core, namespace, "opted-in") == {CARICO_PROFILE}
    orphan = core.read_namespaced_pod("orphan", namespace)
    assert orphan.spec.node_name is None and orphan.status.phase == "Pending"


def test_run_time_annotation_completes_the_pod(
    api_client: kubernetes.client.ApiClient, fake_kubelet: FakeKubelet, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    created = core.create_namespaced_pod(
        namespace, _pod("batch", annotations={RUN_SECONDS_ANNOTATION: "1.5"})
    )
    # Watching from the creation's resourceVersion delivers every later update as an event, so
    # the phases seen here are every phase the pod had, however late the watch starts.
    phases: list[str] = [created.status.phase]
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        core.list_namespaced_pod,
        namespace,
        field_selector="metadata.name=batch",
        resource_version=created.metadata.resource_version,
        timeout_seconds=POD_TIMEOUT_S,
    ):
        phase = event["object"].status.phase
        if not phases or phases[-1] != phase:
            phases.append(phase)
        if phase == "Succeeded":
            watch.stop()
    assert phases == ["Pending", "Running", "Succeeded"]
    pod = core.read_namespaced_pod("batch", namespace)
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0 and terminated.reason == "Completed"


def _deployment_pods(core: kubernetes.client.CoreV1Api, ns: str) -> list[Any]:
    return [
        p
        for p in core.list_namespaced_pod(ns, label_selector="app=web").items
        if p.metadata.deletion_timestamp is None
    ]


def _running(core: kubernetes.client.CoreV1Api, ns: str, count: int, nodes: set[str]) -> bool:
    pods = core.list_namespaced_pod(ns, label_selector="app=web").items
    return len(pods) == count and all(
        p.status.phase == "Running" and p.spec.node_name in nodes for p in pods
    )


def _hook_matches_api(
    core: kubernetes.client.CoreV1Api, hook: PodCountsRecorder, nodes: set[str]
) -> bool:
    """The counts fed to agents equal the pods the API shows on each node."""
    occupying: dict[str, int] = dict.fromkeys(nodes, 0)
    for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items:
        if (
            p.spec.node_name in occupying
            and p.status.phase in ("Pending", "Running")
            and p.metadata.deletion_timestamp is None
        ):
            occupying[p.spec.node_name] += 1
    return all(
        hook.latest.get(n) is not None and hook.latest[n].pods == c for n, c in occupying.items()
    )


def test_deployment_scales_through_the_controller_manager(
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    pod_counts_hook: PodCountsRecorder,
    namespace: str,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    nodes = set(fake_kubelet.nodes)
    template = _pod("unused", scheduler=CARICO_PROFILE)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
        },
    }
    apps.create_namespaced_deployment(namespace, deployment)
    for replicas in (3, 6, 1):
        if replicas != 3:
            apps.patch_namespaced_deployment_scale(
                "web",
                namespace,
                {"spec": {"replicas": replicas}},
                _content_type="application/merge-patch+json",
            )
        wait_for(
            lambda r=replicas: _running(core, namespace, r, nodes),
            POD_TIMEOUT_S,
            f"{replicas} Running",
        )
        wait_for(
            lambda r=replicas: (
                apps.read_namespaced_deployment("web", namespace).status.ready_replicas == r
            ),
            POD_TIMEOUT_S,
            f"deployment readyReplicas={replicas}",
        )
        wait_for(
            lambda: _hook_matches_api(core, pod_counts_hook, nodes), 30, "pod-count hook = API"
        )
        assert sum(1 for _ in _deployment_pods(core, namespace)) == replicas
    assert fake_kubelet.errors == []


def test_nodes_are_ready_with_capacity_and_leases(
    api_client: kubernetes.client.ApiClient, fake_kubelet: FakeKubelet
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    leases = kubernetes.client.CoordinationV1Api(api_client)
    for name, spec in fake_kubelet.nodes.items():
        node = core.read_node(name)
        assert node.status.allocatable == {
            "cpu": spec.cpu,
            "memory": spec.memory,
            "pods": str(spec.pods),
        }
        assert node.status.capacity == node.status.allocatable
        # The node lifecycle controller lifted the not-ready taint: it saw the node Ready.
        assert fake_kubelet.node_ready(name)
        lease = leases.read_namespaced_lease(name, "kube-node-lease")
        assert lease.spec.holder_identity == name
        assert [(o.kind, o.name) for o in lease.metadata.owner_references] == [("Node", name)]


def test_heartbeats_renew_the_lease(control_plane: ControlPlane) -> None:
    client = control_plane.api_client()
    leases = kubernetes.client.CoordinationV1Api(client)
    kubelet = FakeKubelet(client, [NodeSpec("e2e-heartbeat-node")], heartbeat_s=0.2)
    kubelet.start()
    try:
        first = leases.read_namespaced_lease(
            "e2e-heartbeat-node", "kube-node-lease"
        ).spec.renew_time
        wait_for(
            lambda: (
                leases.read_namespaced_lease(
                    "e2e-heartbeat-node", "kube-node-lease"
                ).spec.renew_time
                > first
            ),
            30,
            "a renewed lease",
        )
    finally:
        kubelet.stop(delete_nodes=True)
    assert kubelet.errors == []


def _ready_status(core: kubernetes.client.CoreV1Api, name: str) -> str | None:
    conditions = core.read_node(name).status.conditions or []
    return next((c.status for c in conditions if c.type == "Ready"), None)


def test_leases_are_what_keeps_nodes_ready(
    control_plane: ControlPlane, api_client: kubernetes.client.ApiClient, fake_kubelet: FakeKubelet
) -> None:
    """A node whose heartbeats stop goes Unknown after the grace period; the session's nodes,
    whose status was written once at registration (before this node's), stay Ready, so their
    leases alone keep them Ready."""
    core = kubernetes.client.CoreV1Api(api_client)
    silent = FakeKubelet(control_plane.api_client(), [NodeSpec("e2e-silent-node")], heartbeat_s=2)
    silent.start()
    try:
        silent.stop()  # heartbeats end; the Node object stays
        # Bound: grace period (20 s in conftest) + monitor period (5 s) + a loaded machine.
        wait_for(lambda: _ready_status(core, "e2e-silent-node") == "Unknown", 120, "Unknown")
        assert all(fake_kubelet.node_ready(n) for n in fake_kubelet.nodes)
    finally:
        silent.stop(delete_nodes=True)
