"""The agent's pod watch against the real API server: workload pods on one node, counted live.

Pods are bound to a fake-kubelet node and turned Running by it; a real DaemonSet puts its own pod
on the node through the real controller-manager and scheduler. The watch must count the workload
pods that run there and never the DaemonSet's. Other tests' pods may share the node, so counts are
taken relative to the count when the watch first listed. Waits are liveness bounds, not timings.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import kubernetes
import pytest
from e2e_controlplane import wait_for
from fake_kubelet import FakeKubelet

from agent.kube_watch import PodWatcher
from carico.pods import PodClass, Requests

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NODE = "e2e-node-2"
TIMEOUT_S = 90


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,  # bound directly, as after a scheduling decision
            "containers": [{"name": "main", "image": "registry.invalid/sleep:1"}],
            "terminationGracePeriodSeconds": 1,
        },
    }


def _daemonset(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
                    "terminationGracePeriodSeconds": 1,
                },
            },
        },
    }


def test_watch_counts_running_workload_pods_on_its_node(
    api_client: kubernetes.client.ApiClient, fake_kubelet: FakeKubelet, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    counts: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def on_pods(count: int, changed: bool, classes: Mapping[str, PodClass] | None) -> None:
        with lock:
            counts.append((count, changed))

    watcher = PodWatcher(core, NODE, on_pods)
    watcher.start()
    try:
        wait_for(lambda: watcher.relists == 1, TIMEOUT_S, "the first list")
        base = watcher.table.count

        apps.create_namespaced_daemon_set(namespace, _daemonset("ds"))

        def ds_pod_running() -> bool:
            pods = core.list_namespaced_pod(
                namespace, label_selector="app=ds", field_selector=f"spec.nodeName={NODE}"
            ).items
            return any(p.status and p.status.phase == "Running" for p in pods)

        wait_for(ds_pod_running, TIMEOUT_S, f"the DaemonSet pod running on {NODE}")
        for name in ("w1", "w2"):
            core.create_namespaced_pod(namespace, _pod(name))
        wait_for(lambda: watcher.table.count == base + 2, TIMEOUT_S, "two workload pods counted")
        # The DaemonSet pod runs on the node but is not a workload pod.
        assert ds_pod_running() and watcher.table.count == base + 2
        # The running workload pods come with their class: these bare pods ask for nothing.
        classes = watcher.table.classes
        for name in ("w1", "w2"):
            uid = core.read_namespaced_pod(name, namespace).metadata.uid
            assert classes[uid] == PodClass("bare/best-effort", Requests())
        ds_uids = {
            p.metadata.uid
            for p in core.list_namespaced_pod(namespace, label_selector="app=ds").items
        }
        assert not ds_uids & set(classes)
        with lock:
            assert any(changed for _, changed in counts[1:])  # the events start the churn hold

        core.delete_namespaced_pod("w1", namespace)
        wait_for(lambda: watcher.table.count == base + 1, TIMEOUT_S, "the deleted pod uncounted")
        assert watcher.errors == 0
    finally:
        watcher.stop(timeout=0)
        apps.delete_namespaced_daemon_set("ds", namespace)
