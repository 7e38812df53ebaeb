"""``carico aggregator`` as a real process: serves, logs JSON, stops on SIGTERM with a checkpoint,
restores it on the next start, and documents every flag."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

import grpc
import numpy as np
import pytest

from carico.cliargs import env_name
from carico.model import SubspaceModel
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc

ROOT = Path(__file__).resolve().parents[3]


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "carico_app.cli",
            "aggregator",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            "127.0.0.1:0",
            "--name",
            "cli-agg",
            "--log-format",
            "json",
            "--log-level",
            "info",
            "--checkpoint",
            str(tmp_path / "ckpt.json"),
            *extra,
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_for(stream: IO[str], msg: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read JSON log lines until one has ``msg``; every line must be one JSON object."""
    seen: list[dict[str, Any]] = []
    for line in stream:
        entry = json.loads(line)
        seen.append(entry)
        if entry["msg"] == msg:
            return entry, seen
    raise AssertionError(f"process ended before logging {msg!r}: {seen}")


def _exchange(port: int, node: str, batch: np.ndarray) -> aggregator_pb2.GlobalModel:
    u, sigma = SubspaceModel.from_batch(batch).to_arrays()
    message = aggregator_pb2.LocalModel(
        node=node,
        sequence=1,
        timestamp=1.0,
        weight=1,
        model=aggregator_pb2.SubspaceFactor(
            d=2, r=2, u=u.ravel().tolist(), sigma=sigma.tolist(), feature_names=["cpu", "memory"]
        ),
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply: aggregator_pb2.GlobalModel = aggregator_pb2_grpc.AggregatorStub(channel).Exchange(
            message, timeout=10
        )
        return reply


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def _gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie left to init does not run either)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_serves_stops_on_sigterm_with_a_checkpoint_and_restores_it(
    tmp_path: Path, workers: str
) -> None:
    rng = np.random.default_rng(3)
    proc = _start(tmp_path, "--workers", workers)
    try:
        assert proc.stderr is not None
        serving, _ = _wait_for(proc.stderr, "serving")
        assert serving["workers"] == int(workers)
        port, ops_port = serving["grpc_port"], serving["ops_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{ops_port}/healthz", timeout=10) as resp:
            assert resp.status == 200
        children = _children(proc.pid)
        # The workers (and, with spawned processes, multiprocessing's resource tracker).
        assert len(children) >= (int(workers) if workers != "1" else 0)
        _exchange(port, "node-a", rng.uniform(size=(2, 5)))
        proc.send_signal(signal.SIGTERM)
        _wait_for(proc.stderr, "stopped")
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    # Nothing of the aggregator keeps running (the tracker ends when it sees its parent gone).
    deadline = time.monotonic() + 30
    while not all(_gone(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(child) for child in children), children
    saved = json.loads((tmp_path / "ckpt.json").read_text())
    assert [e["node"] for e in saved["entries"]] == ["node-a"]

    proc = _start(tmp_path, "--workers", workers)
    try:
        assert proc.stderr is not None
        serving, seen = _wait_for(proc.stderr, "serving")
        assert any(e["msg"] == "checkpoint restored" and e["entries"] == 1 for e in seen)
        reply = _exchange(serving["grpc_port"], "node-b", rng.uniform(size=(2, 5)))
        # Answered before node-b is folded in: the restored node-a alone.
        assert reply.has_model and reply.contributing_nodes == 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_help_documents_every_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "carico_app.cli", "aggregator", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    source = (ROOT / "aggregator" / "cli.py").read_text() + (
        ROOT / "carico" / "logs.py"
    ).read_text()
    flags = set(re.findall(r'"(--[a-z][a-z-]+)"', source))
    assert {"--listen", "--parent", "--tls-client-ca", "--checkpoint", "--ttl"} <= flags
    for flag in flags:
        assert re.search(rf"^\s+{flag}\b", out, re.M), flag
        assert f"(env {env_name(flag)};" in " ".join(out.split()), flag


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "Bad_Name"], "DNS-1123"),
        (["--tls-cert", "x.crt"], "--tls-cert and --tls-key go together"),
        (["--parent-tls-cert", "a", "--parent-tls-key", "b"], "--parent-tls-cert needs"),
    ],
)
def test_bad_flag_combinations_exit_2_with_a_message(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "carico_app.cli", "aggregator", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and message in result.stderr


def test_an_address_in_use_exits_1_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "carico_app.cli",
                "aggregator",
                "--listen",
                f"127.0.0.1:{port}",
                "--ops-listen",
                "127.0.0.1:0",
                "--checkpoint",
                str(tmp_path / "c.json"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1 and f"cannot serve on 127.0.0.1:{port}" in result.stderr
