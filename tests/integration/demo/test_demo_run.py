"""``carico demo`` as a person runs it: a real subprocess with every component on 127.0.0.1.

Leftovers are found by an environment marker every descendant inherits (the children run in their
own sessions, so the process tree alone would not show them once the demo is gone).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.slow


def _with_marker(marker: str) -> list[int]:
    found = []
    needle = f"CARICO_TEST_MARKER={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _wait_gone(marker: str, timeout: float = 10.0) -> list[int]:
    # PDEATHSIG/SIGTERM delivery is asynchronous: give the kernel a moment, then report.
    deadline = time.monotonic() + timeout
    while (left := _with_marker(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _start(args: list[str], marker: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CARICO_TEST_MARKER": marker}
    return subprocess.Popen(
        [sys.executable, "-m", "carico_app.cli", "demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_headless_demo_places_pods_prints_a_summary_and_leaves_nothing() -> None:
    marker = uuid.uuid4().hex
    proc = _start(["--headless", "--duration", "15", "--nodes", "3"], marker)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert "dashboard at http://127.0.0.1:" in out
    assert "carico demo summary" in out
    placed = re.search(r"placed (\d+),", out)
    assert placed is not None and int(placed.group(1)) > 0, out
    per_node = {}
    for node in ("sim-1", "sim-2", "sim-3"):
        # every node reported; its pods placed, peak running pods and peak threads per core
        row = re.search(rf"{node}\s+placed\s+(\d+)\s+peak\s+(\d+) pods.*avail\s+\d", out)
        assert row is not None, out
        per_node[node] = int(row.group(1))
    # Carico spreads the pods (they once all landed on the first node: the demo's pods named no
    # scheduler and were exempt), and no node ran over its capacity while another had room.
    assert sum(1 for n in per_node.values() if n > 0) >= 2, out
    assert "while another had room: 0.0 s" in out, out
    assert "errors: 0" in out
    assert _wait_gone(marker) == []


def test_ctrl_c_stops_the_demo_and_every_child() -> None:
    marker = uuid.uuid4().hex
    proc = _start(["--nodes", "2"], marker)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert "dashboard at" in line, line
        assert len(_with_marker(marker)) >= 3  # the demo, the aggregator and the real agent
        proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed: leave nothing running (its children follow)
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert "carico demo summary" in out
    assert _wait_gone(marker) == []


def test_headless_needs_a_duration() -> None:
    proc = _start(["--headless"], uuid.uuid4().hex)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "--headless needs --duration" in err
