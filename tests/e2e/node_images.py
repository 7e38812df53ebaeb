"""The images of the real node, built offline and imported into its containerd (no registry).

* ``carico.local/pause:1``: the pod sandbox, the ``workload`` program (``workload pause``);
* ``carico.local/workload:1``: the test jobs (``workload bpi|mem|idle``, gobuild/node/workload);
* ``carico.local/kube-scheduler:<release>``: the control plane's kube-scheduler binary, for the
  chart's scheduler Deployment (the chart's default is the upstream registry image of the same
  release; a node without a registry runs this local build of it instead);
* ``docker.io/library/carico:<version>``: Carico's own image, the OCI layout ``make image``
  (deploy/image/build.sh) writes, imported as it is (:func:`carico_image`).

The small images are docker-archive tars (``manifest.json``, a config, one layer), which
``ctr images import`` reads; they are written deterministically (fixed times and owners), so the
same binaries give the same image digest. Neighbours: real_node.py imports them; the binaries come
from gobuild/node-build.sh and gobuild/build.sh.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGE_SCRIPT = REPO / "tests" / "e2e" / "gobuild" / "image.sh"
PAUSE_IMAGE = "carico.local/pause:1"
WORKLOAD_IMAGE = "carico.local/workload:1"
SCHEDULER_REPOSITORY = "carico.local/kube-scheduler"
CARICO_REPOSITORY = "docker.io/library/carico"
# The image's user: the chart runs every Carico container as it.
NON_ROOT = "10001:10001"


@dataclass(frozen=True)
class ImageFile:
    """One file of a layer: its path in the image, where its bytes come from, its mode."""

    path: str
    source: Path
    mode: int = 0o755


@dataclass(frozen=True)
class SmallImage:
    """A one-layer image: static binaries and nothing else."""

    name: str
    files: Sequence[ImageFile]
    entrypoint: Sequence[str]
    user: str = ""
    env: Sequence[str] = field(default=("PATH=/usr/local/bin:/usr/bin:/bin",))


def _layer(files: Sequence[ImageFile]) -> bytes:
    """An uncompressed layer tar with the parent directories of every file; owner root, mtime 0."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = {"tmp"}
        for f in files:
            parts = f.path.strip("/").split("/")[:-1]
            dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        for d in sorted(dirs):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for f in sorted(files, key=lambda f: f.path):
            data = f.source.read_bytes()
            info = tarfile.TarInfo(f.path.strip("/"))
            info.size = len(data)
            info.mode = f.mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_docker_archive(image: SmallImage, out: Path) -> Path:
    """Write ``image`` as a docker-archive tar at ``out`` (what ``docker save`` writes)."""
    layer = _layer(image.files)
    layer_id = hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Entrypoint": list(image.entrypoint),
            "Env": list(image.env),
            "User": image.user,
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "carico e2e node_images"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [
        {"Config": config_name, "RepoTags": [image.name], "Layers": [f"{layer_id}/layer.tar"]}
    ]
    members = [
        (config_name, config_bytes),
        (f"{layer_id}/layer.tar", layer),
        ("manifest.json", json.dumps(manifest).encode()),
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return out


def node_images(node_bin: Path, e2e_bin: Path, kube_version: str) -> list[SmallImage]:
    """The pause, workload and kube-scheduler images from the built binaries."""
    workload = node_bin / "workload"
    return [
        SmallImage(PAUSE_IMAGE, [ImageFile("/pause", workload)], ["/pause", "pause"]),
        SmallImage(
            WORKLOAD_IMAGE,
            [ImageFile("/usr/local/bin/workload", workload)],
            ["/usr/local/bin/workload"],
            user=NON_ROOT,
        ),
        SmallImage(
            f"{SCHEDULER_REPOSITORY}:{kube_version}",
            [ImageFile("/usr/local/bin/kube-scheduler", e2e_bin / "kube-scheduler")],
            ["/usr/local/bin/kube-scheduler"],
            user=NON_ROOT,
        ),
    ]


def kube_version() -> str:
    """The pinned Kubernetes release (the control plane's and the kubelet's)."""
    for line in (REPO / "tests/e2e/gobuild/kube/go.mod").read_text().splitlines():
        if line.startswith("require k8s.io/kubernetes "):
            return line.split()[2]
    raise RuntimeError("no k8s.io/kubernetes requirement in gobuild/kube/go.mod")


def package_version() -> str:
    """Carico's version (the image tag and the chart's appVersion), from pyproject.toml."""
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise RuntimeError("no version in pyproject.toml")


def carico_image() -> Path:
    """The OCI layout of Carico's image, which ``make e2e-bin`` builds (gobuild/image.sh runs
    ``make image``, deploy/image/build.sh, unchanged: the tests run the image users get).
    RuntimeError when it is missing or older than the sources it packs."""
    done = subprocess.run(["bash", str(IMAGE_SCRIPT), "--check"], check=False)
    layout = Path(
        subprocess.run(
            ["bash", str(IMAGE_SCRIPT), "--print-dir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"Carico's image at {layout} is missing or older than the sources: run `make e2e-bin`"
        )
    return layout


__all__ = [
    "CARICO_REPOSITORY",
    "PAUSE_IMAGE",
    "SCHEDULER_REPOSITORY",
    "WORKLOAD_IMAGE",
    "SmallImage",
    "carico_image",
    "kube_version",
    "node_images",
    "package_version",
    "write_docker_archive",
]
