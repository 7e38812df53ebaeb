"""Fixtures of the e2e tier: one real control plane and one fake kubelet per test session.

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

from e2e_controlplane import ControlPlane, ControlPlaneError, locate_binaries, wait_for
from fake_kubelet import AnnotationTiming, FakeKubelet, NodeSpec, PodCountsRecorder

FAKE_NODES = tuple(
    NodeSpec(name=f"e2e-node-{i}", cpu="8", memory="32Gi", pods=110) for i in range(3)
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
    core.delete_namespace(name)
