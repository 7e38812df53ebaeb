"""``carico extender`` with its repacker as a real process: the default, off, apply."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

LIVENESS_S = 60.0


def _carico(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "carico_app.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(url: str, data: bytes | None = None) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


Start = Callable[..., tuple[str, "subprocess.Popen[str]"]]


@pytest.fixture
def extender_process() -> Iterator[Start]:
    """``start(*flags)`` runs ``carico extender --no-kube`` on free ports until ready."""
    procs: list[subprocess.Popen[str]] = []

    def start(*flags: str) -> tuple[str, subprocess.Popen[str]]:
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "carico_app.cli", "extender", "--no-kube"]
            + ["--host=127.0.0.1", f"--port={port}", "--grpc-host=127.0.0.1", "--grpc-port=0"]
            + list(flags),
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + LIVENESS_S
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=2):
                    return url, proc
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise AssertionError("the extender never became ready")

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow  # two extender processes and a spawned solver process on a loaded machine
def test_dry_run_is_the_default_and_off_removes_the_repacker(extender_process: Start) -> None:
    url, proc = extender_process()
    status, body = _request(f"{url}/repack", data=b"")
    # An in-memory cluster with nothing in it: a definite "no improvement", solved in the
    # extender's solver process.
    assert status == 200 and isinstance(body, dict)
    assert body["mode"] == "dry-run" and body["status"] == "NO_IMPROVEMENT"
    status, plans = _request(f"{url}/api/v1/repack/plans")
    assert status == 200 and isinstance(plans, list) and [p["id"] for p in plans] == [1]
    # A clean stop, solver process included.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LIVENESS_S) == 0

    url, _ = extender_process("--repack-mode=off")
    status, body = _request(f"{url}/repack", data=b"")
    assert status == 404 and isinstance(body, dict) and "--repack-mode off" in body["Error"]
    status, _ = _request(f"{url}/api/v1/repack/plans")
    assert status == 404


@pytest.mark.slow  # an extender process and a spawned solver process on a loaded machine
def test_apply_mode_starts_with_the_plan_executor(extender_process: Start) -> None:
    url, proc = extender_process("--repack-mode=apply", "--repack-step-timeout=30")
    status, body = _request(f"{url}/repack", data=b"")
    # Nothing to improve in an empty in-memory cluster: nothing is executed either.
    assert status == 200 and isinstance(body, dict)
    assert body["mode"] == "apply" and body["status"] == "NO_IMPROVEMENT"
    assert body["execution"] is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LIVENESS_S) == 0
