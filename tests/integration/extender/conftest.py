"""A real extender (aiohttp + gRPC on 127.0.0.1, free ports) over an in-memory cluster.

Payloads are shaped exactly as kube-scheduler sends them: a full v1.Pod and either ``"Nodes": null``
with ``NodeNames`` (nodeCacheCapable) or a v1.NodeList with ``"NodeNames": null``. The clock is a
settable number so tests never sleep to make data stale or reservations expire.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from protos.carico.v1 import capacity_pb2
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.grpc_server import GrpcServer, start_grpc
from scheduler_ext.http_server import HttpServer, build_app, start_http
from scheduler_ext.service import ExtenderService, Settings

PAYLOADS = Path(__file__).parent / "payloads"
POD = json.loads((PAYLOADS / "pod.json").read_text())
NODE_TEMPLATE = (PAYLOADS / "node.json").read_text()


class SettableClock:
    """The service's clock: starts at 1000 s and moves only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def node_object(name: str) -> dict[str, Any]:
    return json.loads(NODE_TEMPLATE.replace("NODE_NAME", name))


def pod_object(
    name: str = "web-7d4b9c8f6d-x2kqp", namespace: str = "shop", uid: str = "", **changes: Any
) -> dict[str, Any]:
    pod = copy.deepcopy(POD)
    pod["metadata"]["name"] = name
    pod["metadata"]["namespace"] = namespace
    pod["metadata"]["uid"] = uid or f"uid-{namespace}-{name}"
    for path, value in changes.items():
        target = pod
        *parents, leaf = path.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return pod


def extender_args(pod: dict[str, Any], names: list[str], cache_capable: bool = True) -> bytes:
    """An ExtenderArgs body as kube-scheduler encodes it (both keys present, one null)."""
    if cache_capable:
        body: dict[str, Any] = {"Pod": pod, "Nodes": None, "NodeNames": names}
    else:
        items = [node_object(n) for n in names]
        body = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    return json.dumps(body).encode()


def report(
    node: str,
    avail: float,
    *,
    sequence: int = 1,
    timestamp: float = 1.7e9,
    pods: int = 3,
    **fields: Any,
) -> capacity_pb2.NodeCapacity:
    msg = capacity_pb2.NodeCapacity(
        node=node,
        avail=avail,
        k=avail * 0.1,
        capacity=2.0,
        per_pod_cost=0.1,
        pods=pods,
        mode=capacity_pb2.CAPACITY_MODE_LIVE,
        sequence=sequence,
        timestamp=timestamp,
        **fields,
    )
    msg.health.psi_available = True
    return msg


@dataclass
class Extender:
    service: ExtenderService
    cluster: InMemoryCluster
    clock: SettableClock
    http: HttpServer
    grpc: GrpcServer
    session: aiohttp.ClientSession
    watch: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}"

    def feed(self, node: str, avail: float, **kw: Any) -> None:
        """Put a report in the table as the gRPC stream would (own stream per call)."""
        outcome, why = self.service.ingest(report(node, avail, **kw), object())
        assert outcome.value == "accepted", why

    async def post(self, verb: str, body: bytes) -> tuple[int, Any]:
        async with self.session.post(
            f"{self.url}/scheduler/{verb}",
            data=body,
            headers={"Content-Type": "application/json"},
        ) as resp:
            raw = await resp.read()
            try:
                return resp.status, json.loads(raw)
            except json.JSONDecodeError:
                return resp.status, raw.decode()

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(f"{self.url}{path}") as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except json.JSONDecodeError:
                return resp.status, text


MakeExtender = Callable[..., Any]


@pytest.fixture
async def make_extender() -> AsyncIterator[MakeExtender]:
    started: list[Extender] = []

    async def make(
        settings: Settings | None = None,
        *,
        cluster: InMemoryCluster | None = None,
        max_body: int = 1 << 20,
        watch: bool = True,
    ) -> Extender:
        clock = SettableClock()
        cluster = cluster or InMemoryCluster()
        service = ExtenderService(cluster, settings or Settings(), clock=clock, wall=clock)
        grpc_server = await start_grpc(service, "127.0.0.1:0")
        service.readiness.capacity_listening = True
        http = await start_http(build_app(service, max_body=max_body), "127.0.0.1", 0)
        session = aiohttp.ClientSession()
        ext = Extender(service, cluster, clock, http, grpc_server, session)
        if watch:
            # What run_background does first: the list (ledger rebuild), then live events.
            ext.watch = asyncio.create_task(
                cluster.run_pod_watch(service.on_pod_list, service.on_pod_event)
            )
            await asyncio.sleep(0)
        started.append(ext)
        return ext

    yield make
    for ext in started:
        if ext.watch is not None:
            ext.watch.cancel()
        await ext.session.close()
        await ext.http.close()
        await ext.grpc.close(None)


@pytest.fixture
async def extender(make_extender: MakeExtender) -> Extender:
    ext: Extender = await make_extender()
    return ext
