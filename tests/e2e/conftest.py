"""Fixtures of the e2e tier: one real control plane, one fake kubelet and (when a test asks for
them) one real Carico agent per node, per test session.

The control plane (e2e_controlplane.py) is shared by every e2e module: starting it costs tens of
seconds on a loaded machine, and tests isolate themselves by namespace instead. A missing Go
toolchain or unbuilt binaries fail the tier with a clear message; it never skips.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

# pytest runs with --import-mode=importlib, which does not put test folders on sys.path; the
# harness modules live beside this file.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_agents import AgentFedFactory, AggregatorProcess, NodeAgents, warm_up
from e2e_controlplane import ControlPlane, ControlPlaneError, locate_binaries, wait_for
from e2e_extender import CapacityFeed, CaricoFactory, ExtenderProcess
from fake_kubelet import AnnotationTiming, FakeKubelet, NodeSpec, PodCounts, PodCountsRecorder
from fake_procfs import FakeProcfs

from carico_app.schedconfig import ExtenderConfig

FAKE_NODES = tuple(
    NodeSpec(name=f"e2e-node-{i}", cpu="8", memory="32Gi", pods=110) for i in range(3)
)


E2E_DIR = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make unit`` runs two workers), every test of this tier runs in one
    worker: they share the session's control plane and agents, which are far too dear to start
    once per worker."""
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.xdist_group("e2e"))


@pytest.fixture(autouse=True)
def _e2e_grouped(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` a test of the tier must carry the group in its id: that is how
    pytest-xdist sends the group to one worker. Some pytest and pytest-xdist releases together
    drop it without a word (pytest-xdist#1386), and the tier would be split over workers, each
    starting its own control plane and real nodes that cannot share a host."""
    if getattr(request.config.option, "loadgroup", False) and not request.node.nodeid.endswith(
        "@e2e"
    ):
        pytest.fail(
            "pytest-xdist did not send the e2e tier to one worker (no '@e2e' in the test's id; "
            "pytest-xdist#1386): use the pytest and pytest-xdist versions pyproject.toml pins",
            pytrace=False,
        )


NODE_GRACE_S = 20.0
HEARTBEAT_S = 2.0


@pytest.fixture(scope="session")
def e2e_bin() -> Path:
    try:
        return locate_binaries()
    except ControlPlaneError as exc:
        pytest.fail(f"e2e tier cannot run: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, e2e_bin: Path
) -> Iterator[ControlPlane]:
    # A node is declared Unknown 20 s after its last heartbeat (kube's default is 50 s), so that
    # tests of silent nodes stay short; the fake kubelet beats every 2 s, a 10x margin.
    cp = ControlPlane(
        tmp_path_factory.mktemp("controlplane"), e2e_bin, node_monitor_grace_s=NODE_GRACE_S
    )
    try:
        cp.start()
    except ControlPlaneError as exc:
        pytest.fail(f"control plane did not start: {exc}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Iterator[kubernetes.client.ApiClient]:
    client = control_plane.api_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def pod_counts_hook() -> PodCountsRecorder:
    return PodCountsRecorder()


@pytest.fixture(scope="session")
def fake_kubelet(
    api_client: kubernetes.client.ApiClient, pod_counts_hook: PodCountsRecorder
) -> Iterator[FakeKubelet]:
    kubelet = FakeKubelet(
        api_client,
        FAKE_NODES,
        timing=AnnotationTiming(startup_delay_s=0.5),
        on_pod_counts=pod_counts_hook,
        heartbeat_s=HEARTBEAT_S,
    )
    kubelet.start()
    try:
        yield kubelet
    finally:
        kubelet.stop()


@pytest.fixture
def namespace(api_client: kubernetes.client.ApiClient) -> Iterator[str]:
    """A fresh namespace with its default ServiceAccount (the admission plugin requires it)."""
    core = kubernetes.client.CoreV1Api(api_client)
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def has_default_sa() -> bool:
        items = core.list_namespaced_service_account(name, field_selector="metadata.name=default")
        return bool(items.items)

    wait_for(has_default_sa, 60, f"ServiceAccount {name}/default")
    yield name
    # Pods held Pending must not outlive the test: a later extender would rebuild reservations
    # for them. A terminating namespace refuses new pods, so controllers (a Deployment's
    # ReplicaSet) cannot replace them; then delete at once (grace 0) and wait.
    core.delete_namespace(name)
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    wait_for(lambda: not core.list_namespaced_pod(name).items, 90, f"pods of {name} gone")


@pytest.fixture
def carico(
    control_plane: ControlPlane,
    fake_kubelet: FakeKubelet,
    pod_counts_hook: PodCountsRecorder,
    tmp_path: Path,
) -> Iterator[CaricoFactory]:
    """Start the real Carico extender (subprocess), feed it capacity, point kube-scheduler at it.

    The capacity is scripted (CapacityFeed): for tests that need avail set to exact values at
    will (the deploy-manifest and repack tests). Measured capacity from real agents:
    ``carico_agents``.

    Call it with extender flags and the scheduler's extender options; the session's scheduler goes
    back to no extender afterwards.
    """
    started: list[tuple[ExtenderProcess, CapacityFeed]] = []

    def make(
        *flags: str, node_cache_capable: bool = False, ignorable: bool = False
    ) -> tuple[ExtenderProcess, CapacityFeed]:
        ext = ExtenderProcess(control_plane.kubeconfig, tmp_path, *flags)
        ext.start()
        feed = CapacityFeed(
            f"127.0.0.1:{ext.grpc_port}",
            [n.name for n in FAKE_NODES],
            pods=lambda node: pod_counts_hook.latest.get(node, PodCounts()).pods,
        )
        feed.start()
        started.append((ext, feed))
        control_plane.restart_scheduler(
            [
                ExtenderConfig(
                    ext.url_prefix, node_cache_capable=node_cache_capable, ignorable=ignorable
                )
            ]
        )
        return ext, feed

    yield make
    if started:
        control_plane.restart_scheduler([])
    for ext, feed in started:
        feed.stop()
        ext.stop()


@pytest.fixture(scope="session")
def fake_procfs(
    tmp_path_factory: pytest.TempPathFactory, fake_kubelet: FakeKubelet
) -> Iterator[FakeProcfs]:
    """Per-node fake procfs and cgroup trees, written from the pods the fake kubelet runs."""
    procfs = FakeProcfs(
        tmp_path_factory.mktemp("procfs"), [n.name for n in FAKE_NODES], fake_kubelet.running_pods
    )
    procfs.start()
    try:
        yield procfs
    finally:
        procfs.stop()


@pytest.fixture(scope="session")
def node_agents(
    control_plane: ControlPlane,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    fake_procfs: FakeProcfs,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[NodeAgents]:
    """A real ``carico agent`` per node, warmed up (per-pod cost learned, nodes idle), exchanging
    models with a real ``carico aggregator``.

    The agents' model is frozen at the idle node they first see, so they start on empty nodes.
    """
    wait_for(
        lambda: not any(c.pods for c in fake_kubelet.pod_counts().values()),
        120,
        "empty nodes before the agents start",
    )
    log_dir = tmp_path_factory.mktemp("agents")
    aggregator = AggregatorProcess(log_dir)
    agents = NodeAgents(
        control_plane.kubeconfig,
        fake_procfs,
        [n.name for n in FAKE_NODES],
        log_dir,
        aggregator=aggregator.address,
    )
    try:
        aggregator.start()
        agents.start()
        warm_up(api_client, agents)
        yield agents
    finally:
        agents.stop()
        aggregator.stop()


@pytest.fixture
def carico_agents(
    control_plane: ControlPlane, node_agents: NodeAgents, tmp_path: Path
) -> Iterator[AgentFedFactory]:
    """Like ``carico``, but the extender listens where the session's node agents report: its
    capacity is what real agents measure from the fake procfs. Call it with extender flags and the
    scheduler's extender options. Afterwards background load is cleared and every agent runs."""
    started: list[ExtenderProcess] = []

    def make(
        *flags: str, node_cache_capable: bool = False, ignorable: bool = False
    ) -> ExtenderProcess:
        ext = ExtenderProcess(
            control_plane.kubeconfig, tmp_path, *flags, grpc_port=node_agents.extender_grpc_port
        )
        ext.start()
        started.append(ext)
        control_plane.restart_scheduler(
            [
                ExtenderConfig(
                    ext.url_prefix, node_cache_capable=node_cache_capable, ignorable=ignorable
                )
            ]
        )
        return ext

    try:
        yield make
    finally:
        if started:
            control_plane.restart_scheduler([])
        for ext in started:
            ext.stop()
        node_agents.resume_all()
        node_agents.procfs.clear_background()
