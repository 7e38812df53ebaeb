"""The real node with Carico installed from its chart: the e2e fixtures' building blocks, and
``make real-node`` (``python tests/e2e/real_node_bed.py``), which runs it by hand.

:func:`real_node_up` starts a :class:`real_node.RealNode` against a control plane, imports the
test images and Carico's image into its containerd and waits for the node to be Ready;
:func:`carico_installed` installs the chart on it (chart_install.py) while the control plane's own
kube-scheduler serves ``default-scheduler`` only, so that ``carico-scheduler`` pods are placed by
the chart's scheduler Deployment, as in a cluster where Carico is installed. Both undo everything
on exit.

``make real-node`` starts a control plane (e2e_controlplane.py), one real node and Carico, prints
a kubeconfig and how to try it, and stays up until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chart_install import NAMESPACE, REAL_NODE_LABEL, CaricoRelease
from e2e_controlplane import ControlPlane
from node_images import (
    CARICO_REPOSITORY,
    carico_image,
    kube_version,
    node_images,
    write_docker_archive,
)
from real_node import RealNode, RealNodeError, locate_node_binaries

from carico_app import schedconfig

NODE_NAME = "carico-real-node"


def import_images(node: RealNode, e2e_bin: Path, carico_layout: Path) -> None:
    """The pause, workload and kube-scheduler images, and Carico's own."""
    for image in node_images(node.bin_dir, e2e_bin, kube_version()):
        tar = node.workdir / "images" / f"{image.name.replace('/', '_').replace(':', '_')}.tar"
        node.import_archive(write_docker_archive(image, tar))
    node.import_oci_layout(carico_layout, CARICO_REPOSITORY)


@contextlib.contextmanager
def real_node_up(
    control_plane: ControlPlane, api: kubernetes.client.ApiClient, workdir: Path
) -> Iterator[RealNode]:
    """One Ready real node named NODE_NAME, labelled with REAL_NODE_LABEL; removed on exit
    (its Node object too)."""
    bin_dir = locate_node_binaries()
    layout = carico_image()
    node = RealNode(
        workdir, control_plane.kubeconfig, bin_dir, name=NODE_NAME, labels=dict([REAL_NODE_LABEL])
    )
    problems: list[str] = []
    try:
        node.start()
        import_images(node, control_plane.bin_dir, layout)
        node.start_kubelet()
        node.wait_ready(api)
        yield node
    finally:
        problems = node.stop()
        problems += [f"{k}: {v}" for k, v in node.leftovers().items() if v]
        with contextlib.suppress(kubernetes.client.ApiException):
            kubernetes.client.CoreV1Api(api).delete_node(NODE_NAME)
    if problems:
        raise RealNodeError(f"the real node left things behind: {problems}")


@contextlib.contextmanager
def carico_installed(control_plane: ControlPlane, workdir: Path) -> Iterator[CaricoRelease]:
    """Carico's chart installed and Ready on the real node; uninstalled on exit, and the control
    plane's kube-scheduler given back both profiles."""
    control_plane.restart_scheduler([], profiles=[schedconfig.DEFAULT_PROFILE])
    release = CaricoRelease(control_plane, workdir)
    try:
        release.install()
        release.wait_ready()
        yield release
    finally:
        with contextlib.suppress(Exception):
            release.uninstall()
        control_plane.restart_scheduler([])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="A control plane, one real node (containerd, runc, kubelet) and Carico "
        "installed with its Helm chart; stays up until Ctrl-C."
    )
    parser.add_argument("--workdir", type=Path, help="state directory (default: a new temp dir)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="carico-real-node-"))
    stop = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    # a shell without job control starts background commands with SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _serve(workdir, lambda: stop)
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped and cleaned up")
    print(f"stopped and cleaned up; logs kept in {workdir}")
    return 0


def _serve(workdir: Path, stopped: Callable[[], bool]) -> None:
    started = time.monotonic()
    with ControlPlane(workdir / "controlplane", node_monitor_grace_s=20) as cp:
        api = cp.api_client()
        print(f"control plane up ({time.monotonic() - started:.0f} s); starting the real node")
        with real_node_up(cp, api, workdir / "node") as node:
            print(f"node {node.name} Ready ({time.monotonic() - started:.0f} s); installing Carico")
            with carico_installed(cp, workdir / "carico") as release:
                print(f"Carico Ready ({time.monotonic() - started:.0f} s)\n")
                _print_usage(cp, node, release)
                print("Ctrl-C stops everything and cleans up.", flush=True)
                try:
                    while not stopped():
                        time.sleep(0.5)
                except KeyboardInterrupt:
                    pass
                print("stopping", flush=True)


def _print_usage(cp: ControlPlane, node: RealNode, release: CaricoRelease) -> None:
    kubectl = cp.bin_dir / "kubectl"
    ca = release.pki / "ca.crt"
    print(f"  export KUBECONFIG={cp.kubeconfig}")
    print(f"  {kubectl} get nodes,pods -A")
    print(f"  {kubectl} -n {NAMESPACE} get pods -o wide")
    print(f"  curl --cacert {ca} https://127.0.0.1:{release.extender_port}/api/v1/nodes")
    print(f"  dashboard: https://127.0.0.1:{release.extender_port}/ (CA {ca})")
    print(
        "  a pod for Carico: spec.schedulerName: carico-scheduler, image carico.local/workload:1 "
        "(args: bpi -threads N -digits D -rounds R), imagePullPolicy: Never"
    )
    print(f"  pod logs: {node.workdir / 'pod-logs'}; logs: {cp.log_dir}, {node.log_dir}\n")


if __name__ == "__main__":
    raise SystemExit(main())
