"""The real agent (``carico agent``, a subprocess) learns a class from a pod's cgroup and the
extender receives it over real gRPC.

The agent watches its node's pods with the real Kubernetes client against a small fake API server
(list and watch of pods, on loopback), samples a fake procfs and reads a fake cgroup v2 tree
(systemd driver), both in temporary directories kept current by a writer task, and streams its
reports to a real extender's gRPC ingest. Fakes, because a real kubelet and cgroup filesystem
need root; the e2e tier runs the same agent against the real control plane.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.grpc_server import start_grpc
from scheduler_ext.service import ExtenderService, Settings

from .conftest import wait_for

GI = 2**30
NODE = "n1"
WEB_UID = "3f1c2a4e-5b6d-4c7e-8f9a-0b1c2d3e4f5a"
DS_UID = "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"
WEB = "shop/Deployment/web"
CORES = 4
MEM_TOTAL_KB = 8 * 2**20  # 8 GiB
WEB_CORES = 1.0  # the web pod keeps one core busy
NODE_UTIL = 0.25  # of the node's cores: one core of four, the web pod's
WRITE_EVERY = 0.01  # seconds between two writes of the fake files
WIDTH = 20  # digits of every counter: the files never change length


def pod_json(uid: str, name: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": uid,
            "resourceVersion": "5",
            "labels": {"pod-template-hash": "5d8f9"},
            "ownerReferences": [{**owner, "apiVersion": "apps/v1", "uid": "o", "controller": True}],
        },
        "spec": {
            "nodeName": NODE,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/web:1",
                    "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


PODS = [
    pod_json(WEB_UID, "web-5d8f9-a", {"kind": "ReplicaSet", "name": "web-5d8f9"}),
    pod_json(DS_UID, "logs-x", {"kind": "DaemonSet", "name": "logs"}),  # not a workload pod
]


async def fake_apiserver() -> tuple[web.AppRunner, int, list[str]]:
    """``GET /api/v1/pods``: the list, or (``watch``) a stream that stays open without events."""
    seen: list[str] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        seen.append(request.query.get("fieldSelector", ""))
        if request.query.get("watch", "").lower() in ("true", "1"):
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            while True:  # until the agent hangs up or the server stops
                await asyncio.sleep(1)
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"}}
        return web.json_response({**body, "items": PODS})

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, int(port), seen


def kubeconfig(path: Path, port: int) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "agent", "user": {"token": "test"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


class FakeHost:
    """A procfs and a cgroup v2 tree (systemd driver) rewritten in place, as the kernel shows
    them: a 4-core, 8 GiB node whose only load is the web pod's one busy core."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        (self.proc / "pressure").mkdir(parents=True)
        self.cgroup = root / "cgroup"
        slices = self.cgroup / "kubepods.slice" / "kubepods-burstable.slice"
        self.pods = {
            uid: slices / f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
            for uid in (WEB_UID, DS_UID)
        }
        for d in self.pods.values():
            d.mkdir(parents=True)
        self._fds: dict[Path, int] = {}
        self.t = 0.0

    def _write(self, path: Path, text: str) -> None:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(fd, text.encode(), 0)

    def write(self, dt: float) -> None:
        self.t += dt
        n = lambda x: f"{int(x):0{WIDTH}d}"  # noqa: E731
        busy, idle = NODE_UTIL * CORES * self.t * 1e4, (1 - NODE_UTIL) * CORES * self.t * 1e4
        line = f"{n(busy)} 0 0 {n(idle)} 0 0 0 0 0 0\n"
        cpus = "".join(f"cpu{i} {line}" for i in range(CORES))
        self._write(self.proc / "stat", f"cpu  {line}{cpus}intr 0\n")
        self._write(
            self.proc / "meminfo",
            f"MemTotal: {n(MEM_TOTAL_KB)} kB\nMemFree: {n(MEM_TOTAL_KB // 2)} kB\n"
            f"MemAvailable: {n(MEM_TOTAL_KB // 2)} kB\n",
        )
        for resource in ("cpu", "memory", "io"):
            self._write(
                self.proc / "pressure" / resource,
                f"some avg10=0.00 avg60=0.00 avg300=0.00 total={n(0)}\n"
                f"full avg10=0.00 avg60=0.00 avg300=0.00 total={n(0)}\n",
            )
        for uid, d in self.pods.items():
            cores = WEB_CORES if uid == WEB_UID else 0.1
            self._write(d / "cpu.stat", f"usage_usec {n(cores * self.t * 1e6)}\nuser_usec 0\n")
            # 0.75 GiB charged, 0.25 GiB of it inactive file cache: a 0.5 GiB working set.
            self._write(d / "memory.current", f"{n(0.75 * GI)}\n")
            self._write(d / "memory.stat", f"anon {n(0.5 * GI)}\ninactive_file {n(0.25 * GI)}\n")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(WRITE_EVERY)
            now = loop.time()
            self.write(now - last)
            last = now

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)


@pytest.mark.slow  # an interpreter start-up and a few seconds of sampling
async def test_a_pods_cgroup_usage_becomes_a_learned_class_at_the_extender(
    tmp_path: Path,
) -> None:
    host = FakeHost(tmp_path)
    host.write(0.0)
    writer = asyncio.create_task(host.run())
    api, api_port, selectors = await fake_apiserver()
    extender = ExtenderService(InMemoryCluster(), Settings())
    ext_server = await start_grpc(extender, "127.0.0.1:0")
    log = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "carico_app.cli",
            "agent",
            "--node-name",
            NODE,
            "--proc-root",
            str(host.proc),
            "--cgroup-root",
            str(host.cgroup),
            "--kubeconfig",
            str(kubeconfig(tmp_path / "kubeconfig", api_port)),
            "--extender",
            f"127.0.0.1:{ext_server.port}",
            "--metrics-port",
            "0",
            "--log-level",
            "info",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[3])},
    )
    try:

        def learned_at_extender() -> bool:
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()
            report = extender.table.report(NODE)
            if report is None or report.classes is None:
                return False
            web_class = report.classes.classes.get(WEB)
            return web_class is not None and web_class.source == "learned"

        # A liveness bound: an interpreter start-up, the first list and a few readings.
        await wait_for(learned_at_extender, timeout=90)
        report = extender.table.report(NODE)
        assert report is not None and report.classes is not None
        view = report.classes
        assert selectors and all(s == f"spec.nodeName={NODE}" for s in selectors)
        # Only the workload pod has a class; the DaemonSet pod's cgroup is read but not learned.
        assert set(view.classes) == {WEB} and view.pods == {WEB: 1} and report.pods == 1
        web_class = view.classes[WEB]
        # The node gave the pod all it asked (utilisation 0.25, no pressure): its demand is its
        # usage. The files are at most one write (10 ms) older than the agent's reading, 0.5 s
        # apart: a 2 % error on one reading, less once averaged; 5 % is a safe bound.
        assert web_class.footprint.cpu == pytest.approx(WEB_CORES, rel=0.05)
        assert web_class.footprint.memory == 0.5 * GI  # 0.75 GiB minus 0.25 GiB inactive cache
        assert web_class.requests.cpu == 0.25 and web_class.requests.memory == 64 * 2**20
        assert (view.cores, view.memory_bytes) == (CORES, MEM_TOTAL_KB * 1024)
        assert view.feature_names == ("cpu", "memory")
        assert all(h > 0 for h in view.headroom)
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        log.close()
        writer.cancel()
        await ext_server.close(None)
        await api.cleanup()
        host.close()
