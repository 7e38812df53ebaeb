"""The cgroup churn hint with real inotify on a directory tree laid out like kubepods."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cgroup_watch import CgroupChurnHint, HintUnavailable, locate

from .conftest import wait_for

UID = "3f1c2a4e_5b6d_4c7e_8f9a_0b1c2d3e4f5a"


def systemd_tree(root: Path) -> Path:
    top = root / "kubepods.slice"
    (top / "kubepods-burstable.slice").mkdir(parents=True)
    (top / "kubepods-besteffort.slice").mkdir()
    return top


def test_locate_finds_both_drivers_and_refuses_a_missing_tree(tmp_path: Path) -> None:
    top = systemd_tree(tmp_path / "v2")
    assert locate(str(tmp_path / "v2")) == [
        str(top),
        str(top / "kubepods-burstable.slice"),
        str(top / "kubepods-besteffort.slice"),
    ]
    v1 = tmp_path / "v1" / "cpu" / "kubepods"
    (v1 / "burstable").mkdir(parents=True)
    assert locate(str(tmp_path / "v1")) == [str(v1), str(v1 / "burstable")]
    with pytest.raises(HintUnavailable, match="no kubepods cgroup under"):
        locate(str(tmp_path / "empty"))


async def test_pod_cgroups_coming_and_going_are_hints(tmp_path: Path) -> None:
    top = systemd_tree(tmp_path)
    seen: list[str] = []
    hint = CgroupChurnHint(str(tmp_path), seen.append)
    task = asyncio.create_task(hint.run())
    try:
        burstable = top / "kubepods-burstable.slice"
        pod_dir = burstable / f"kubepods-burstable-pod{UID}.slice"
        pod_dir.mkdir()
        (burstable / "not-a-pod").mkdir()  # ignored
        guaranteed = top / f"kubepods-pod{UID}.slice"
        guaranteed.mkdir()
        await wait_for(lambda: len(seen) == 2)
        pod_dir.rmdir()
        await wait_for(lambda: len(seen) == 3)
        assert seen == [pod_dir.name, guaranteed.name, pod_dir.name]
        assert hint.events == 3
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_enabling_an_unavailable_hint_is_a_clear_start_up_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "carico_app.cli",
            "agent",
            "--no-kube",
            "--metrics-port",
            "0",
            "--churn-hint",
            "cgroup",
            "--cgroup-root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "CARICO_NODE_NAME": "n1"},
    )
    assert proc.returncode == 2
    assert "--churn-hint cgroup: no kubepods cgroup under" in proc.stderr
