"""The real Carico extender as a subprocess, and a scripted capacity feed to it, for the e2e tier.

``ExtenderProcess`` runs ``carico extender`` (the installed CLI) against the test control plane's
kubeconfig on free loopback ports; it can be killed and started again on the same ports, which is
what the restart test needs. ``CapacityFeed`` is a test-side gRPC client that streams
``NodeCapacity`` reports to the extender's real ``CapacityIngest`` service, one stream per node,
with an avail the test sets per node (a scripted telemetry source in place of measured capacity).
Its pod counts come from the fake kubelet's pod-count hook, as an agent's would from its pod watch.
It reconnects when the extender restarts, and a node can be silenced to make its data go stale.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from e2e_controlplane import free_ports, wait_for

from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc

REPORT_EVERY_S = 0.5  # twice as often as a real agent, so freshly set avails arrive quickly


class ExtenderProcess:
    """``carico extender`` on 127.0.0.1 with a fixed pair of free ports across restarts."""

    def __init__(
        self, kubeconfig: Path, log_dir: Path, *extra: str, grpc_port: int | None = None
    ) -> None:
        """``grpc_port``: listen for capacity reports there (the session agents' extender port)
        instead of on a fresh free port."""
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.extra = list(extra)
        ports = [p for p in free_ports(3) if p != grpc_port]  # the session port may be unbound
        self.port = ports[0]
        self.grpc_port = grpc_port or ports[1]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url_prefix(self) -> str:
        return f"{self.base}/scheduler"

    def start(self, timeout_s: float = 60.0) -> None:
        self.starts += 1
        log = open(self.log_dir / f"extender-{self.starts}.log", "wb")  # noqa: SIM115
        argv = [
            str(Path(sys.executable).parent / "carico"),
            "extender",
            "--kubeconfig",
            str(self.kubeconfig),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--grpc-host",
            "127.0.0.1",
            "--grpc-port",
            str(self.grpc_port),
            *self.extra,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        wait_for(self.ready, timeout_s, "the Carico extender's /readyz")

    def ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"the extender exited:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.base}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        path = self.log_dir / f"extender-{self.starts}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, the in-memory ledger is simply lost."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=5) as resp:
            return json.loads(resp.read())

    def metric(self, name: str) -> float | None:
        return metric_sample(self.base, name)

    def nodes(self) -> dict[str, dict[str, Any]]:
        """``/api/v1/nodes`` keyed by node name."""
        return {row["name"]: row for row in self.get("/api/v1/nodes")}


def metric_sample(base: str, name: str) -> float | None:
    """One sample of the ``/metrics`` served at ``base``, by its name with labels as printed
    (``carico_x_total{event="y"}``); None when absent."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


class CapacityFeed:
    """One gRPC ``Report`` stream per node with a scripted avail; survives extender restarts."""

    def __init__(
        self, target: str, nodes: Sequence[str], pods: Callable[[str], int] | None = None
    ) -> None:
        self.target = target
        self.pod_count = pods or (lambda node: 0)
        self.avail: dict[str, float] = {n: 0.0 for n in nodes}
        self.silent: set[str] = set()
        self.sent: dict[str, int] = {n: 0 for n in nodes}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True, name=f"feed-{n}")
            for n in nodes
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def set(self, **avail: float) -> None:
        """Set avail per node; keyword names use ``_`` for ``-`` (e2e_node_0 -> e2e-node-0)."""
        with self._lock:
            for key, value in avail.items():
                self.avail[key.replace("_", "-")] = value

    def set_all(self, value: float) -> None:
        with self._lock:
            for node in self.avail:
                self.avail[node] = value

    def _reports(self, node: str, sequence: Iterator[int]) -> Iterator[capacity_pb2.NodeCapacity]:
        while not self._stop.is_set():
            if node not in self.silent:
                with self._lock:
                    avail = self.avail[node]
                pods = self.pod_count(node)
                msg = capacity_pb2.NodeCapacity(
                    node=node,
                    avail=avail,
                    k=max(avail, 0.0) * 0.1,
                    capacity=2.0,
                    per_pod_cost=0.1,
                    pods=pods,
                    mode=capacity_pb2.CAPACITY_MODE_LIVE,
                    sequence=next(sequence),
                    timestamp=time.time(),
                )
                msg.health.psi_available = True
                self.sent[node] += 1
                yield msg
            self._stop.wait(REPORT_EVERY_S)

    def _run(self, node: str) -> None:
        counter = iter(range(1, 1 << 62))  # shared across reconnects: sequences keep increasing
        while not self._stop.is_set():
            channel = grpc.insecure_channel(self.target)
            try:
                stub = capacity_pb2_grpc.CapacityIngestStub(channel)
                stub.Report(self._reports(node, counter))
            except grpc.RpcError:
                pass  # extender down or restarting: reconnect
            finally:
                channel.close()
            self._stop.wait(0.3)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)


# make(*extender_flags, node_cache_capable=False, ignorable=False) -> (extender, feed)
CaricoFactory = Callable[..., tuple[ExtenderProcess, CapacityFeed]]
