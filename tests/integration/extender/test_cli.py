"""``carico extender`` as a real process: --help, --no-kube serving, HTTPS, clean stop."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import grpc
import psutil
import pytest

from carico.tls import make_ca, make_leaf, write_pair
from protos.carico.v1 import capacity_pb2_grpc

from .conftest import extender_args, pod_object, report

FLAGS = [
    "--host",
    "--port",
    "--prefix",
    "--max-body-bytes",
    "--grpc-host",
    "--grpc-port",
    "--tls-cert",
    "--tls-key",
    "--tls-client-ca",
    "--grpc-tls-cert",
    "--grpc-tls-key",
    "--grpc-tls-client-ca",
    "--threshold",
    "--stale-after",
    "--stale-policy",
    "--score-shape",
    "--score-weights",
    "--excluded-namespaces",
    "--managed-schedulers",
    "--reservation-ttl",
    "--forget-after",
    "--explain-pods",
    "--no-kube",
    "--kubeconfig",
    "--api-workers",
    "--log-level",
    "--log-format",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_help_documents_every_flag_with_its_environment_variable() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "carico_app.cli", "extender", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    for flag in FLAGS:
        assert flag in out, flag
        env = "CARICO_" + flag.lstrip("-").replace("-", "_").upper()
        assert env in out, env


def test_mismatched_tls_flags_are_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "carico_app.cli", "extender", "--no-kube", "--tls-cert", "x.crt"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--tls-cert and --tls-key go together" in done.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--score-shape", "0:0,50:5,40:10"], "shape point 3 (40:10): utilisation must be greater"),
        (["--score-shape", "0:0,100:11"], "shape point 2 (100:11): score must be in 0..10"),
        (["--score-weights", "cpu=0"], "weight of cpu is 0, not in 1..100"),
    ],
)
def test_a_bad_score_shape_is_refused_naming_the_point(flags: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "carico_app.cli", "extender", "--no-kube", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert flags[0] in done.stderr and message in done.stderr, done.stderr


async def _wait_ready(
    session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[str]
) -> None:
    deadline = time.monotonic() + 60  # generous: the machine may be loaded
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            async with session.get(f"{url}/readyz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("extender never became ready")


async def test_no_kube_process_serves_and_stops_cleanly(tmp_path: Path) -> None:
    http_port, grpc_port = _free_port(), _free_port()
    now = dt.datetime.now(dt.UTC)
    ca = make_ca(now=now)
    ca_file, _ = write_pair(ca, tmp_path, "ca")
    crt, key = write_pair(make_leaf(ca, "ext", now=now, hosts=("127.0.0.1",)), tmp_path, "ext")
    env = {**os.environ, "CARICO_THRESHOLD": "2", "CARICO_NO_KUBE": "true"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "carico_app.cli",
            "extender",
            "--host=127.0.0.1",
            f"--port={http_port}",
            "--grpc-host=127.0.0.1",
            f"--grpc-port={grpc_port}",
            "--prefix=/carico/",
            f"--tls-cert={crt}",
            f"--tls-key={key}",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client_ssl = ssl.create_default_context(cafile=str(ca_file))
        url = f"https://127.0.0.1:{http_port}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as s:
            await _wait_ready(s, url, proc)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                stub = capacity_pb2_grpc.CapacityIngestStub(channel)
                reports = [report("big", 3.0), report("small", 1.5)]
                assert (await stub.Report(iter(reports), timeout=10)).accepted == 2
            body = extender_args(pod_object(), ["big", "small"])
            async with s.post(f"{url}/carico/filter", data=body) as resp:
                assert resp.status == 200
                reply = json.loads(await resp.read())
            # CARICO_THRESHOLD=2 came from the environment: 1.5 fails.
            assert reply["NodeNames"] == ["big"]
            assert reply["FailedNodes"] == {"small": "carico: avail 1.5 - reserved 0 < 2"}
            bind = {"PodName": "p", "PodNamespace": "shop", "PodUID": "u", "Node": "big"}
            async with s.post(f"{url}/carico/bind", data=json.dumps(bind)) as resp:
                assert json.loads(await resp.read()) == {"Error": ""}
            async with s.get(f"{url}/api/v1/nodes") as resp:
                nodes = {n["name"]: n for n in json.loads(await resp.read())}
            assert nodes["big"]["reserved"] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow  # imports the kubernetes client, seconds on a busy machine
def test_missing_kubernetes_credentials_are_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update({"HOME": str(tmp_path), "KUBECONFIG": ""})
    done = subprocess.run(
        [sys.executable, "-m", "carico_app.cli", "extender", "--port=0", "--grpc-port=0"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 1
    assert "cannot load Kubernetes credentials" in done.stderr
    assert "--no-kube" in done.stderr


async def test_plain_http_listens_on_loopback_unless_told_otherwise() -> None:
    http_port, grpc_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if k != "CARICO_HOST"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "carico_app.cli",
            "extender",
            "--no-kube",
            f"--port={http_port}",
            "--grpc-host=127.0.0.1",
            f"--grpc-port={grpc_port}",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        async with aiohttp.ClientSession() as session:
            await _wait_ready(session, f"http://127.0.0.1:{http_port}", proc)
        listening = {
            c.laddr.ip
            for c in psutil.Process(proc.pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == http_port
        }
        assert listening == {"127.0.0.1"}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
    assert f"carico extender: http://127.0.0.1:{http_port}/scheduler" in stderr, stderr
