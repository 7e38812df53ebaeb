"""The bed of the scheduling-throughput benchmark: the e2e tier's real control plane, N nodes
without kubelets, pods created at a set rate, and a watch that times each pod's scheduling.

As in kube-scheduler's scheduler_perf, nodes are bare Node objects (4 cores, 32 GiB, 110 pods,
Ready, untainted) and a pod counts as scheduled once it is bound: no kubelet runs them. The node
lifecycle controller is not started (nothing heartbeats, and it would taint every node), only the
service-account controller that pod admission needs. kube-scheduler's client limits are raised to
scheduler_perf's 5,000 QPS so that client-side throttling never shapes the baseline.

All API traffic of the benchmark itself goes through one aiohttp session with raw JSON (``Api``):
the official client's model layer would cost the shared cores more than the pods it creates.
Neighbours: ``bench_throughput`` (the driver), ``throughput_feed`` and ``throughput_trivial``
(processes it starts), ``tests/support/throughput_stats`` (the figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from e2e_controlplane import ControlPlane  # noqa: E402

from carico_app import schedconfig  # noqa: E402

SCHEDULER_QPS = 5000.0  # scheduler_perf's client settings
CONTROLLERS = "serviceaccount,serviceaccount-token"
NODE_CPU, NODE_MEMORY, NODE_PODS = "4", "32Gi", "110"  # scheduler_perf's node-default
POD_CPU, POD_MEMORY = "100m", "500Mi"  # ... and pod-default


class BenchControlPlane(ControlPlane):
    """The e2e control plane with scheduler_perf's client limits for kube-scheduler."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, controllers=CONTROLLERS)

    def _scheduler_config_path(self) -> Path:
        cfg = schedconfig.scheduler_configuration(
            kubeconfig=str(self.kubeconfig),
            extenders=self.extenders,
            qps=SCHEDULER_QPS,
            burst=int(SCHEDULER_QPS),
            leader_elect=False,
            profiles=self.profiles,
        )
        path = self.workdir / "kube-scheduler.json"
        path.write_text(schedconfig.render(cfg))
        return path


class Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""


class Spec(msgspec.Struct):
    nodeName: str = ""


class PodView(msgspec.Struct):
    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: Spec = msgspec.field(default_factory=Spec)


class PodListView(msgspec.Struct):
    metadata: Meta = msgspec.field(default_factory=Meta)
    items: list[PodView] = msgspec.field(default_factory=list)


class Event(msgspec.Struct):
    type: str = ""
    object: PodView = msgspec.field(default_factory=PodView)


_decode_list = msgspec.json.Decoder(PodListView).decode
_decode_event = msgspec.json.Decoder(Event).decode


class ApiError(RuntimeError):
    pass


class Api:
    """Raw JSON calls to the API server as the control plane's admin."""

    def __init__(self, cp: ControlPlane, connections: int = 32) -> None:
        self.server = cp.server
        self.headers = {
            "Authorization": f"Bearer {cp.admin_token}",
            "Content-Type": "application/json",
        }
        self.ssl = ssl.create_default_context(cafile=str(cp.certs.ca_crt))
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, ssl=self.ssl),
            headers=self.headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )

    async def close(self) -> None:
        await self.session.close()

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ok: Iterable[int] = (200, 201, 202),
        content_type: str = "application/json",
    ) -> bytes:
        data = None if body is None else msgspec.json.encode(body)
        headers = {"Content-Type": content_type}
        async with self.session.request(
            method, self.server + path, data=data, headers=headers
        ) as resp:
            raw = await resp.read()
            if resp.status not in ok:
                raise ApiError(f"{method} {path}: {resp.status} {raw[:300]!r}")
            return raw

    async def get_url(self, url: str, timeout_s: float = 10.0) -> str:
        """GET ``url`` (another component's https endpoint) with the admin's token."""
        async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise ApiError(f"GET {url}: {resp.status} {text[:300]}")
            return text

    # -- namespaces and nodes --------------------------------------------------------------

    async def ensure_namespace(self, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await self.call("POST", "/api/v1/namespaces", body, ok=(201, 409))
        deadline = time.monotonic() + 60
        while True:  # the service-account controller must make "default" before pods are let in
            raw = await self.call(
                "GET", f"/api/v1/namespaces/{name}/serviceaccounts/default", ok=(200, 404)
            )
            if b'"kind":"ServiceAccount"' in raw:
                return
            if time.monotonic() > deadline:
                raise ApiError(f"no default ServiceAccount in {name} after 60 s")
            await asyncio.sleep(0.2)

    async def create_node(self, name: str) -> None:
        resources = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
        }
        await self.call("POST", "/api/v1/nodes", body, ok=(201, 409))
        # Status through its subresource; the not-ready taint that node admission puts on every
        # new node goes with a merge patch (no node lifecycle controller runs to lift it).
        status = {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "Bench"}],
            }
        }
        merge = "application/merge-patch+json"
        await self.call("PATCH", f"/api/v1/nodes/{name}/status", status, content_type=merge)
        await self.call(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"spec": {"taints": None}},
            ok=(200,),
            content_type=merge,
        )

    async def create_nodes(self, names: list[str], concurrency: int = 16) -> None:
        queue = iter(names)

        async def worker() -> None:
            for name in queue:
                await self.create_node(name)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    # -- pods ------------------------------------------------------------------------------

    @staticmethod
    def pod_body(name: str, scheduler: str) -> dict[str, Any]:
        """scheduler_perf's pod-default: a pause container asking for 100m and 500Mi."""
        resources = {"cpu": POD_CPU, "memory": POD_MEMORY}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "schedulerName": scheduler,
                "containers": [
                    {
                        "name": "pause",
                        "image": "registry.k8s.io/pause:3.10",
                        "ports": [{"containerPort": 80}],
                        "resources": {"requests": resources, "limits": resources},
                    }
                ],
            },
        }

    async def create_pods(
        self,
        namespace: str,
        names: list[str],
        rate: float,
        scheduler: str,
        clock: Callable[[], float] = time.monotonic,
        concurrency: int = 16,
    ) -> tuple[float, float]:
        """Create the pods at most ``rate`` per second; returns (first start, last done)."""
        path = f"/api/v1/namespaces/{namespace}/pods"
        start = clock()
        queue = iter(enumerate(names))
        last = start

        async def worker() -> None:
            nonlocal last
            for i, name in queue:
                due = start + i / rate
                wait = due - clock()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self.call("POST", path, self.pod_body(name, scheduler), ok=(201,))
                last = max(last, clock())

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return start, last

    async def list_pods(self, namespace: str) -> PodListView:
        return _decode_list(await self.call("GET", f"/api/v1/namespaces/{namespace}/pods"))

    async def delete_pods(self, namespace: str, timeout_s: float = 600.0) -> None:
        """Delete every pod at once (grace 0: no kubelet would confirm) and wait until none."""
        await self.call(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )
        deadline = time.monotonic() + timeout_s
        while (await self.list_pods(namespace)).items:
            if time.monotonic() > deadline:
                raise ApiError(f"pods of {namespace} still there after {timeout_s:.0f} s")
            await asyncio.sleep(1.0)


class ScheduledWatch:
    """Watches a namespace's pods and keeps, per pod, when it was first seen bound."""

    def __init__(self, api: Api, namespace: str, clock: Callable[[], float] = time.monotonic):
        self.api = api
        self.namespace = namespace
        self.clock = clock
        self.bound_at: dict[str, float] = {}
        self.node_of: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    async def start(self) -> None:
        listed = await self.api.list_pods(self.namespace)
        self._seen(listed.items)
        self._task = asyncio.create_task(self._run(listed.metadata.resourceVersion))

    def _seen(self, pods: Iterable[PodView]) -> None:
        now = self.clock()
        for pod in pods:
            node = pod.spec.nodeName
            if node and pod.metadata.name not in self.bound_at:
                self.bound_at[pod.metadata.name] = now
                self.node_of[pod.metadata.name] = node
                self.changed.set()

    async def _run(self, version: str) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while True:
            url = (
                f"{self.api.server}{path}?watch=1&resourceVersion={version}"
                "&allowWatchBookmarks=true&timeoutSeconds=3600"
            )
            async with self.api.session.get(url) as resp:
                if resp.status != 200:
                    raise ApiError(f"watch: {resp.status} {await resp.text()}")
                async for line in resp.content:
                    event = _decode_event(line)
                    if event.object.metadata.resourceVersion:
                        version = event.object.metadata.resourceVersion
                    if event.type in ("ADDED", "MODIFIED"):
                        self._seen((event.object,))
                    elif event.type == "ERROR":
                        raise ApiError(f"watch error: {line[:300]!r}")

    async def wait_for(self, count: int, budget_s: float) -> bool:
        """Wait until ``count`` pods are bound or ``budget_s`` has passed; True if all were."""
        deadline = self.clock() + budget_s
        while len(self.bound_at) < count:
            if self._task is not None and self._task.done():
                self._task.result()
            left = deadline - self.clock()
            if left <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
        return True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a live process, its reaped children included (0 if gone)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
