"""scheduler_ext.kube.KubernetesCluster on the real API server: bind, pod watch, ledger rebuild.

Pods here name a scheduler that does not exist, so nothing but the code under test binds them; the
ones bound carry a long start-up delay, so the fake kubelet keeps them Pending until told.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kubernetes
import pytest
from e2e_controlplane import ControlPlane
from fake_kubelet import STARTUP_SECONDS_ANNOTATION, FakeKubelet

from protos.carico.v1 import capacity_pb2
from scheduler_ext.cluster import BindError
from scheduler_ext.http_server import build_app, start_http
from scheduler_ext.kube import KubernetesCluster
from scheduler_ext.ledger import PodState
from scheduler_ext.pods import PodFacts
from scheduler_ext.repack.trigger import Unscheduled
from scheduler_ext.service import ExtenderService, Settings

pytestmark = [pytest.mark.e2e]

N0, N1 = "e2e-node-0", "e2e-node-1"  # conftest.FAKE_NODES
LIVENESS_S = 60.0


def _create(core: kubernetes.client.CoreV1Api, ns: str, name: str, scheduler: str) -> PodFacts:
    pod = core.create_namespaced_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "annotations": {STARTUP_SECONDS_ANNOTATION: "3600"}},
            "spec": {
                "schedulerName": scheduler,
                "containers": [{"name": "main", "image": "registry.invalid/x:1"}],
            },
        },
    )
    return PodFacts(ns, name, pod.metadata.uid, scheduler=scheduler)


async def _until(predicate: Any, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + LIVENESS_S
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@pytest.fixture
async def kube(
    control_plane: ControlPlane, fake_kubelet: FakeKubelet
) -> AsyncIterator[KubernetesCluster]:
    cluster = KubernetesCluster(str(control_plane.kubeconfig), workers=4)
    yield cluster
    await cluster.close()


async def test_bind_sets_node_name_and_rebind_is_a_clear_error(
    kube: KubernetesCluster, api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    facts = _create(core, namespace, "bind-me", "no-such-scheduler")
    await kube.bind(facts, N0)
    assert core.read_namespaced_pod("bind-me", namespace).spec.node_name == N0
    with pytest.raises(BindError) as err:
        await kube.bind(facts, N1)
    assert "already assigned" in str(err.value) and "409" in str(err.value), err.value
    assert core.read_namespaced_pod("bind-me", namespace).spec.node_name == N0
    other = _create(core, namespace, "wrong-uid", "no-such-scheduler")
    with pytest.raises(BindError) as err:
        await kube.bind(PodFacts(namespace, other.name, "not-its-uid"), N0)
    assert "wrong-uid" in str(err.value)
    with pytest.raises(BindError, match="not found"):
        await kube.bind(PodFacts(namespace, "no-such-pod"), N0)


async def test_annotate_sets_one_annotation_and_checks_the_uid(
    kube: KubernetesCluster, api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    facts = _create(core, namespace, "wake-me", "no-such-scheduler")
    await kube.annotate(facts, "carico.io/room-seen-at", "1.5")
    annotations = core.read_namespaced_pod("wake-me", namespace).metadata.annotations
    # Set beside the pod's own annotations, which the merge patch keeps.
    assert annotations == {STARTUP_SECONDS_ANNOTATION: "3600", "carico.io/room-seen-at": "1.5"}
    with pytest.raises(BindError) as err:  # a pod recreated under the name is left alone
        await kube.annotate(PodFacts(namespace, "wake-me", "not-its-uid"), "x.io/y", "z")
    assert "uid" in str(err.value).lower(), err.value
    assert "x.io/y" not in core.read_namespaced_pod("wake-me", namespace).metadata.annotations
    with pytest.raises(BindError, match="not found"):
        await kube.annotate(PodFacts(namespace, "no-such-pod"), "x.io/y", "z")


async def test_list_then_watch_bound_pending_pods(
    kube: KubernetesCluster,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    namespace: str,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    early = _create(core, namespace, "early", "no-such-scheduler")
    await kube.bind(early, N0)
    _create(core, namespace, "unbound", "no-such-scheduler")
    lists: list[list[PodState]] = []
    events: list[PodState] = []
    watch = asyncio.create_task(kube.run_pod_watch(lists.append, events.append))
    try:
        await _until(lambda: bool(lists), "the initial list")
        listed = {p.facts.key: p for p in lists[0] if p.facts.namespace == namespace}
        # Only bound Pending pods are listed: the unbound one is no concern of the ledger.
        assert set(listed) == {f"{namespace}/early"}
        assert listed[f"{namespace}/early"].node == N0
        late = _create(core, namespace, "late", "no-such-scheduler")
        await kube.bind(late, N1)

        def seen(name: str, **want: Any) -> bool:
            return any(
                e.facts.namespace == namespace
                and e.facts.name == name
                and all(getattr(e, k) == v for k, v in want.items())
                for e in events
            )

        await _until(lambda: seen("late", node=N1, deleted=False), "the bound pod's event")
        # Running takes the pod out of the selection: the watch says DELETED. The kubelet's own
        # watch may see the bind after the extender's does; start only what it has seen.
        await _until(lambda: fake_kubelet.starting(namespace) == 2, "the kubelet seeing both")
        assert fake_kubelet.start_now(namespace) == 2
        await _until(lambda: seen("early", deleted=True), "early leaving the selection")
        await _until(lambda: seen("late", deleted=True), "late leaving the selection")
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)


async def test_one_watch_of_pending_pods_feeds_the_ledger_and_the_repack_trigger(
    kube: KubernetesCluster,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    namespace: str,
) -> None:
    """``run_pending_watch`` gives the ledger what ``run_pod_watch`` gives it, and the repack
    trigger its unbound pods, from one watch; a binding is one event for both."""
    core = kubernetes.client.CoreV1Api(api_client)
    early = _create(core, namespace, "early", "no-such-scheduler")
    await kube.bind(early, N0)
    _create(core, namespace, "waiting", "no-such-scheduler")
    lists: list[list[PodState]] = []
    events: list[PodState] = []
    views: list[list[Unscheduled]] = []
    changes: list[Unscheduled] = []
    watch = asyncio.create_task(
        kube.run_pending_watch(lists.append, events.append, views.append, changes.append)
    )
    try:
        await _until(lambda: bool(lists) and bool(views), "the initial lists")
        assert {p.facts.key: p.node for p in lists[0] if p.facts.namespace == namespace} == {
            f"{namespace}/early": N0
        }
        mine = [v for v in views[0] if v.key.startswith(f"{namespace}/")]
        assert mine == [Unscheduled(f"{namespace}/waiting", "no-such-scheduler", False)]
        # kube-scheduler's verdict on a pod it cannot place: the trigger sees it stuck.
        core.patch_namespaced_pod_status(
            "waiting",
            namespace,
            {
                "status": {
                    "conditions": [
                        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                    ]
                }
            },
        )
        key = f"{namespace}/waiting"
        await _until(
            lambda: any(c.key == key and c.unschedulable and not c.gone for c in changes),
            "the trigger seeing the pod stuck",
        )
        assert not any(e.facts.key == key for e in events)  # unbound: no concern of the ledger
        # Bound: the ledger gets the pod on its node, the trigger sees it gone, in one event.
        await kube.bind(PodFacts(namespace, "waiting", ""), N1)
        await _until(lambda: any(e.facts.key == key and e.node == N1 for e in events), "bound")
        await _until(lambda: any(c.key == key and c.gone for c in changes), "gone from trigger")
        # Leaving Pending: a deletion for the ledger, as from run_pod_watch.
        await _until(lambda: fake_kubelet.starting(namespace) == 2, "the kubelet seeing both")
        assert fake_kubelet.start_now(namespace) == 2
        await _until(
            lambda: any(e.facts.key == key and e.deleted for e in events), "leaving Pending"
        )
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)


async def test_ledger_rebuilt_from_the_api_on_start(
    kube: KubernetesCluster, api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    for name, node in (("a", N0), ("b", N0), ("c", N1)):
        await kube.bind(_create(core, namespace, name, "carico-x"), node)
    await kube.bind(_create(core, namespace, "unmanaged", "no-such-scheduler"), N1)
    service = ExtenderService(kube, Settings(managed_schedulers=frozenset({"carico-x"})))
    background = asyncio.create_task(service.run_background())
    try:
        await _until(lambda: service.readiness.ledger_rebuilt, "the ledger rebuild")
        held = {r.key: r.node for r in service.ledger.reservations() if r.key.startswith(namespace)}
        assert held == {f"{namespace}/a": N0, f"{namespace}/b": N0, f"{namespace}/c": N1}
        # Deleting a pod releases its reservation through the watch.
        core.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
        await _until(
            lambda: f"{namespace}/a" not in {r.key for r in service.ledger.reservations()},
            "the deleted pod's reservation released",
        )
    finally:
        background.cancel()
        await asyncio.gather(background, return_exceptions=True)


async def test_a_bind_the_api_refuses_409_leaves_the_ledger_as_it_was(
    kube: KubernetesCluster, api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    """kube-scheduler retries a bind whose reply timed out after the binding was made; the API
    server answers the retry 409 Conflict. That refusal must not free the first bind's unit."""
    core = kubernetes.client.CoreV1Api(api_client)
    facts = _create(core, namespace, "retried", "carico-x")
    service = ExtenderService(kube, Settings(managed_schedulers=frozenset({"carico-x"})))
    report = capacity_pb2.NodeCapacity(
        node=N0, avail=5.0, capacity=2.0, per_pod_cost=0.1, sequence=1, timestamp=time.time()
    )
    assert service.ingest(report, object())[0].value == "accepted"
    http = await start_http(build_app(service), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{http.port}/scheduler/bind"
    args = {"PodName": "retried", "PodNamespace": namespace, "PodUID": facts.uid, "Node": N0}

    def ledger() -> object:
        held = [(r.key, r.uid, r.node) for r in service.ledger.reservations()]
        return held, service.table.reserved_counts()

    try:
        async with aiohttp.ClientSession() as session:

            async def bind(**change: str) -> str:
                body = json.dumps({**args, **change}).encode()
                async with session.post(url, data=body) as resp:
                    assert resp.status == 200
                    return str((await resp.json())["Error"])

            assert await bind() == ""
            before = ledger()
            assert before == ([(f"{namespace}/retried", facts.uid, N0)], {N0: 1})
            refused = await bind()  # the retry: the binding exists already
            assert "409" in refused and "already assigned" in refused, refused
            assert ledger() == before
            refused = await bind(PodUID="not-its-uid")  # the API's uid precondition fails
            assert "409" in refused, refused
            assert ledger() == before
            assert await bind(Node=N1) != ""  # the extender refuses a second node itself
            assert ledger() == before
    finally:
        await http.close()
    assert core.read_namespaced_pod("retried", namespace).spec.node_name == N0
