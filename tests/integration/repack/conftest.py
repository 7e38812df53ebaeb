"""A real extender with its repacker: aiohttp on 127.0.0.1 (free port), an in-memory cluster.

The cluster is ``InMemoryCluster`` (what ``--no-kube`` runs on): its ``objects`` are the nodes,
pods and PDBs a repack lists, here the fragmentation article's example. Solves run in a real
executor; the service's clock is a settable number so the trigger's windows pass without sleeping.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import pytest
from repack_builders import fragmentation_list

from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.http_server import HttpServer, build_app, start_http
from scheduler_ext.repack.service import Footprints, PlanRunner, RepackService, RepackSettings
from scheduler_ext.repack.trigger import Unscheduled
from scheduler_ext.service import ExtenderService

SCHEDULER = "carico-scheduler"
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
# Two CP-SAT workers: the article's example is proven optimal in well under a second either way,
# and the test machine has two cores.
SETTINGS = RepackSettings(time_limit=10.0, workers=2, debounce=30.0, cooldown=60.0)


def fragmented_cluster() -> dict[str, Any]:
    """The article's example; the pending pod belongs to Carico's scheduler and is Unschedulable,
    as kube-scheduler would have marked it."""
    doc = copy.deepcopy(fragmentation_list())
    for item in doc["items"]:
        if item["kind"] == "Pod" and not item["spec"].get("nodeName"):
            item["spec"]["schedulerName"] = SCHEDULER
            item["status"]["conditions"] = [UNSCHEDULABLE]
    return doc


async def unscheduled_now(cluster: InMemoryCluster) -> list[Unscheduled]:
    """What the cluster's unscheduled-pod watch lists at start."""
    got: list[Unscheduled] = []
    task = asyncio.create_task(cluster.run_unscheduled_watch(got.extend, got.append))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return got


class SettableClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class GatedCluster(InMemoryCluster):
    """An in-memory cluster whose listing waits until the test opens ``gate`` (so a run can be
    held in progress deterministically)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.listed = asyncio.Event()

    async def list_for_repack(self) -> list[bytes]:
        self.listed.set()
        await self.gate.wait()
        return await super().list_for_repack()


@dataclass
class Repacker:
    repack: RepackService
    service: ExtenderService
    cluster: InMemoryCluster
    clock: SettableClock
    http: HttpServer
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}"

    async def post(self, body: bytes | None = None) -> tuple[int, Any]:
        async with self.session.post(f"{self.url}/repack", data=body or b"") as resp:
            return resp.status, await resp.json(content_type=None)

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(f"{self.url}{path}") as resp:
            return resp.status, await resp.json(content_type=None)

    async def metrics(self) -> str:
        async with self.session.get(f"{self.url}/metrics") as resp:
            return await resp.text()


MakeRepacker = Callable[..., Any]


@pytest.fixture
def thread_pool() -> Iterator[Callable[[], Executor]]:
    pools: list[Executor] = []

    def make() -> Executor:
        pools.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="solve"))
        return pools[-1]

    yield make
    for pool in pools:
        pool.shutdown(wait=True)


@pytest.fixture
async def make_repacker(
    thread_pool: Callable[[], Executor],
) -> AsyncIterator[MakeRepacker]:
    started: list[Repacker] = []

    async def make(
        settings: RepackSettings = SETTINGS,
        *,
        cluster: InMemoryCluster | None = None,
        runner: PlanRunner | None = None,
        executor: Callable[[], Executor] | None = None,
        footprints: Footprints | None = None,
        **changes: Any,
    ) -> Repacker:
        clock = SettableClock()
        cluster = cluster if cluster is not None else InMemoryCluster()
        service = ExtenderService(cluster, clock=clock, wall=clock)
        repack = RepackService(
            replace(settings, **changes),
            cluster.list_for_repack,
            service.metrics,
            runner=runner,
            footprints=footprints,
            executor=executor or thread_pool,
            clock=clock,
            wall=clock,
        )
        http = await start_http(build_app(service, repack=repack), "127.0.0.1", 0)
        r = Repacker(repack, service, cluster, clock, http, aiohttp.ClientSession())
        started.append(r)
        return r

    yield make
    for r in started:
        await r.repack.close()
        await r.session.close()
        await r.http.close()
