"""``KubernetesCluster.evict`` on the real API server: how each Eviction API answer is reported.

The executor of repack apply mode acts on these outcomes (evicted: go on; gone: drift, abort;
blocked: pause and retry), so each mapping is checked against the real API: a missing pod, a uid
precondition that no longer holds, a PodDisruptionBudget that allows no disruption (429), and an
accepted eviction that deletes the pod.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import kubernetes
import pytest
from e2e_controlplane import ControlPlane, wait_for
from fake_kubelet import FakeKubelet

from scheduler_ext.kube import KubernetesCluster
from scheduler_ext.repack.evictions import Evicted

pytestmark = [pytest.mark.e2e]

LIVENESS_S = 60.0


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubernetesCluster]:
    cluster = KubernetesCluster(str(control_plane.kubeconfig))
    yield cluster
    await cluster.close()


async def test_eviction_outcomes(
    kube: KubernetesCluster,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    namespace: str,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    policy = kubernetes.client.PolicyV1Api(api_client)
    missing = await kube.evict(namespace, "no-such-pod", "")
    assert missing.outcome is Evicted.GONE and "not found" in missing.message
    pod = core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "victim", "labels": {"app": "victim"}},
            "spec": {
                "nodeName": "e2e-node-0",
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "registry.invalid/x:1"}],
            },
        },
    )
    uid = pod.metadata.uid

    def running() -> bool:
        return bool(core.read_namespaced_pod("victim", namespace).status.phase == "Running")

    wait_for(running, LIVENESS_S, "the pod Running")
    stale = await kube.evict(namespace, "victim", "not-the-uid")
    assert stale.outcome is Evicted.GONE, stale
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "victim"}}},
        },
    )

    def budget_seen() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("keep", namespace).status
        return status is not None and status.current_healthy == 1

    wait_for(budget_seen, LIVENESS_S, "the disruption controller's view of the budget")
    blocked = await kube.evict(namespace, "victim", uid)
    assert blocked.outcome is Evicted.BLOCKED and blocked.message.startswith("429"), blocked
    policy.delete_namespaced_pod_disruption_budget("keep", namespace)
    # The API server reads budgets from its cache: the deletion may take a moment to show.
    for _ in range(int(LIVENESS_S / 0.5)):
        done = await kube.evict(namespace, "victim", uid)
        if done.outcome is not Evicted.BLOCKED:
            break
        await asyncio.sleep(0.5)
    assert done.outcome is Evicted.EVICTED, done

    def deleted() -> bool:
        return not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.uid == uid]

    wait_for(deleted, LIVENESS_S, "the evicted pod deleted")
