"""The build of the control plane: clear failure without Go, and pins that match the release."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from e2e_controlplane import BUILD_SCRIPT, ControlPlaneError, locate_binaries

pytestmark = pytest.mark.e2e

GOBUILD = BUILD_SCRIPT.parent


def _path_without_go(tmp_path: Path) -> str:
    """A PATH with only the few tools build.sh uses before it looks for go."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("dirname", "awk"):
        found = shutil.which(tool)
        assert found is not None
        (bindir / tool).symlink_to(found)
    return str(bindir)


def test_build_without_go_fails_with_a_clear_message(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(BUILD_SCRIPT)],
        env={"PATH": _path_without_go(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "Go toolchain" in done.stderr and "required" in done.stderr


def test_fixture_without_go_fails_rather_than_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CARICO_E2E_BIN", raising=False)
    monkeypatch.setenv("PATH", _path_without_go(tmp_path))
    with pytest.raises(ControlPlaneError, match="Go toolchain"):
        locate_binaries()


def test_unbuilt_binaries_name_the_make_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CARICO_E2E_BIN", str(tmp_path))
    with pytest.raises(ControlPlaneError, match="make e2e-bin"):
        locate_binaries()


def _requirements(gomod: str) -> dict[str, str]:
    """module -> version for every requirement in a go.mod text (block and one-line forms)."""
    found = re.findall(r"^\s*(?:require\s+)?([a-z0-9.\-]+\.[a-z]+/\S+)\s+(v\S+)", gomod, re.M)
    return dict(found)


def test_pins_replace_every_staging_module_of_the_release() -> None:
    kube_mod = (GOBUILD / "kube" / "go.mod").read_text()
    version = _requirements(kube_mod)["k8s.io/kubernetes"]
    major_minor_patch = re.fullmatch(r"v1\.(\d+)\.(\d+)", version)
    assert major_minor_patch is not None, version
    staging_version = f"v0.{major_minor_patch.group(1)}.{major_minor_patch.group(2)}"
    # The release's own go.mod, from the module cache that make e2e-bin filled.
    info = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        cwd=GOBUILD / "kube",
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    release_mod = Path(json.loads(info.stdout)["GoMod"]).read_text()
    release = _requirements(release_mod)
    staging = {m for m, v in release.items() if m.startswith("k8s.io/") and v == "v0.0.0"}
    replaced = dict(re.findall(r"^\s*(k8s\.io/\S+) => \S+ (v\S+)$", kube_mod, re.M))
    assert staging and set(replaced) == staging
    assert set(replaced.values()) == {staging_version}
    etcd_mod = (GOBUILD / "etcd" / "go.mod").read_text()
    etcd = _requirements(etcd_mod)["go.etcd.io/etcd/server/v3"]
    assert etcd == release["go.etcd.io/etcd/server/v3"]
