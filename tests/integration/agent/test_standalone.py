"""``carico agent --standalone`` as a subprocess on this machine's real /proc."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_standalone_prints_one_json_report_per_second() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "carico_app.cli", "agent", "--standalone", "--duration", "3.5"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "CARICO_NODE_NAME": "test-node"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # 3.5 s at one report per second; the first batch may need one more second on a loaded host.
    assert 2 <= len(lines) <= 4, proc.stdout
    reports = [json.loads(line) for line in lines]
    for r in reports:
        assert set(r) >= {
            "node",
            "avail",
            "k",
            "capacity",
            "per_pod_cost",
            "pods",
            "mode",
            "y",
            "psi_available",
            "churn",
        }
        assert r["node"] == "test-node" and r["pods"] == 0
        assert r["mode"] in ("live", "estimate")
        assert set(r["y"]) == {"cpu", "memory"}
        assert all(0.0 <= v <= 1.0 for v in r["y"].values())
        assert r["k"] >= 0 and r["avail"] >= 0 and r["per_pod_cost"] > 0
        assert math.isfinite(r["avail"])
    timestamps = [r["ts"] for r in reports]
    assert timestamps == sorted(timestamps)


@pytest.mark.slow  # five interpreter start-ups
def test_standalone_refuses_servers_and_bad_flags() -> None:
    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "carico_app.cli", "agent", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", **(env or {})},
        )

    bad = run("--standalone", "--aggregator", "127.0.0.1:1")
    assert bad.returncode == 2 and "--standalone runs without servers" in bad.stderr
    bad = run("--standalone", "--proc-root", "/nonexistent-proc")
    assert bad.returncode == 2 and "not a directory" in bad.stderr
    bad = run("--standalone", env={"CARICO_FEATURES": "cpu,disk"})
    assert bad.returncode != 0 and "CARICO_FEATURES" in bad.stderr
    bad = run("--aggregator", "127.0.0.1:1")  # a pod watch without a node name
    assert bad.returncode == 2 and "NODE_NAME" in bad.stderr
    # A pod watch without any Kubernetes configuration (HOME has no kubeconfig here).
    bad = run("--node-name", "n1", "--metrics-port", "0", env={"HOME": "/nonexistent"})
    assert bad.returncode == 2 and "cannot configure the Kubernetes client" in bad.stderr


@pytest.mark.parametrize(
    "args",
    [["--standalone"], ["--no-kube", "--metrics-port", "0", "--node-name", "n1"]],
    ids=["standalone", "service"],
)
def test_sigterm_stops_the_agent_cleanly(args: list[str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "carico_app.cli", "agent", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "CARICO_LOG_LEVEL": "info"},
    )
    try:
        assert proc.stderr is not None
        if "--standalone" in args:
            assert proc.stdout is not None
            json.loads(proc.stdout.readline())  # running: a first report arrived
        else:
            # The service logs its start-up warning once the event loop is about to run.
            for line in proc.stderr:
                if "computing capacity without reporting it" in line:
                    break
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
