"""The real node leaves nothing on the host: not after a clean stop, and not after a run that was
killed outright (the next node cleans up after it from the state file it left)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from e2e_controlplane import ControlPlane, wait_for
from node_images import PAUSE_IMAGE, WORKLOAD_IMAGE, kube_version, node_images, write_docker_archive
from real_node import RealNode

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_node]

NAME = "carico-teardown-node"


def _pod(name: str) -> dict[str, Any]:
    # On the CNI bridge (a network namespace, a veth, an address) with a container of its own.
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NAME,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "idle",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": ["idle"],
                }
            ],
        },
    }


def _start(node: RealNode, control_plane: ControlPlane, api: kubernetes.client.ApiClient) -> None:
    node.start()
    for image in node_images(node.bin_dir, control_plane.bin_dir, kube_version()):
        if image.name in (PAUSE_IMAGE, WORKLOAD_IMAGE):
            tar = node.workdir / "images" / f"{image.name.replace('/', '_')}.tar"
            node.import_archive(write_docker_archive(image, tar))
    node.start_kubelet()
    node.wait_ready(api)


def _run_pod(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> str:
    """Its uid, once it runs."""
    core.create_namespaced_pod(namespace, _pod(name))
    wait_for(
        lambda: core.read_namespaced_pod(name, namespace).status.phase == "Running",
        120,
        f"pod {name} Running",
    )
    return str(core.read_namespaced_pod(name, namespace).metadata.uid)


def _pod_cgroups(uid: str) -> list[Path]:
    return list(Path("/sys/fs/cgroup").glob(f"*/kubepods/*/pod{uid}"))


def _nothing_left(node: RealNode) -> dict[str, list[str]]:
    return {k: v for k, v in node.leftovers().items() if v}


@pytest.mark.timeout(600)
def test_the_real_node_leaves_nothing_behind(
    control_plane: ControlPlane,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    try:
        # A run killed outright: the kubelet and containerd die (as the parent-death signal kills
        # them with the test run), the pod's container and its shim live on.
        crashed = RealNode(tmp_path / "crashed", control_plane.kubeconfig, name=NAME)
        _start(crashed, control_plane, api_client)
        first = _run_pod(core, namespace, "first")
        left = _nothing_left(crashed)
        # The check can fail: a running node has all of these.
        assert {"processes", "mounts", "cgroups", "links"} <= set(left), left
        for component in (crashed.kubelet, crashed.containerd):
            assert component is not None and component.pid is not None
            os.killpg(component.pid, signal.SIGKILL)
            component.proc.wait()  # type: ignore[union-attr]
        assert _pod_cgroups(first), "the pod outlives its kubelet and containerd"
        crashed.release_lock()

        # The next node finds the state file and cleans up before it starts.
        node = RealNode(tmp_path / "next", control_plane.kubeconfig, name=NAME)
        _start(node, control_plane, api_client)
        # (The kubepods tree and the kubelet's host paths are the new node's by now: checked
        # after its stop; the first pod's cgroups are gone.)
        left = _nothing_left(crashed)
        assert not left.keys() - {"cgroups", "host_paths"}, left
        assert not _pod_cgroups(first)
        core.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
        _run_pod(core, namespace, "second")
        assert _nothing_left(node)
        problems = node.stop()
        assert problems == []
        assert not _nothing_left(node), node.leftovers()
    finally:
        with contextlib.suppress(kubernetes.client.ApiException):
            core.delete_node(NAME)
