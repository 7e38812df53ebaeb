"""``POST /repack`` and ``GET /api/v1/repack/plans`` on a real extender HTTP server (dry-run)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from repack.driver.solver import SolveOptions
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.repack.service import solver_process_pool
from scheduler_ext.repack.trigger import Unscheduled

from .conftest import SETTINGS, GatedCluster, MakeRepacker, fragmented_cluster


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in a /metrics page, None when absent."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}(?:\{{([^}}]*)\}})? (\S+)", line)
        if m and ",".join(sorted((m.group(1) or "").split(","))) == want:
            return float(m.group(2))
    return None


async def test_post_repack_returns_the_plan_and_changes_nothing(
    make_repacker: MakeRepacker,
) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects(fragmented_cluster())
    before = json.dumps(cluster.objects, sort_keys=True)
    # The default executor: a spawned solver process, as in production.
    r = await make_repacker(cluster=cluster, executor=solver_process_pool)
    status, body = await r.post()
    assert status == 200, body
    assert body["trigger"] == "http" and body["mode"] == "dry-run"
    assert body["status"] == "OPTIMAL" and body["execution"] is None
    assert body["pending"] == ["default/pending"]
    plan = body["plan"]
    assert plan["placements"] == [{"pod": "default/pending", "to": "node-a"}]
    assert len(plan["moves"]) == 1 and plan["moves"][0]["from"] == "node-a"
    assert plan["evictions"] == []
    assert [s["action"] for s in plan["steps"]] == ["move", "place"]
    assert plan["before"]["placed_by_priority"] == {"0": 9}
    assert plan["after"]["placed_by_priority"] == {"0": 10}

    # Dry-run: the cluster is exactly as it was and nothing was bound.
    assert json.dumps(cluster.objects, sort_keys=True) == before
    assert cluster.bindings == []

    status, plans = await r.get("/api/v1/repack/plans")
    assert status == 200 and plans == [body]
    text = await r.metrics()
    assert metric(text, "carico_repack_runs_total", trigger="http", status="OPTIMAL") == 1.0
    assert metric(text, "carico_repack_solve_seconds_count") == 1.0
    assert metric(text, "carico_repack_plan_actions", kind="move") == 1.0
    assert metric(text, "carico_repack_plan_actions", kind="placement") == 1.0
    assert metric(text, "carico_repack_plan_actions", kind="eviction") == 0.0


async def test_plans_are_listed_newest_first_and_limited(make_repacker: MakeRepacker) -> None:
    r = await make_repacker(history=2)
    for _ in range(3):
        status, _ = await r.post()
        assert status == 200
    status, plans = await r.get("/api/v1/repack/plans")
    assert status == 200 and [p["id"] for p in plans] == [3, 2]  # history=2 keeps the last two
    # An empty cluster has nothing pending: a definite "no improvement".
    assert {p["status"] for p in plans} == {"NO_IMPROVEMENT"}
    status, plans = await r.get("/api/v1/repack/plans?limit=1")
    assert status == 200 and [p["id"] for p in plans] == [3]
    for bad in ("0", "-2", "x"):
        status, body = await r.get(f"/api/v1/repack/plans?limit={bad}")
        assert status == 400 and "limit" in body["Error"]


class RecordingPool(ThreadPoolExecutor):
    """The service's solver executor, recording the options of every solve handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="solve")
        self.options: list[SolveOptions] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.options += [a for a in args if isinstance(a, SolveOptions)]
        return super().submit(fn, *args, **kwargs)


async def test_the_time_limit_of_a_request_is_used(make_repacker: MakeRepacker) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects(fragmented_cluster())
    pool = RecordingPool()
    try:
        r = await make_repacker(cluster=cluster, executor=lambda: pool)
        status, body = await r.post(b'{"time_limit": 2.5, "dry_run": true}')
        assert status == 200 and body["status"] == "OPTIMAL"
        # without one, the setting's limit (10 s here)
        status, body = await r.post(b'{"dry_run": true}')
        assert status == 200 and body["status"] == "OPTIMAL"
    finally:
        pool.shutdown(wait=True)
    assert [o.time_limit for o in pool.options] == [2.5, SETTINGS.time_limit]


async def test_bad_requests_are_refused_with_the_reason(make_repacker: MakeRepacker) -> None:
    r = await make_repacker(max_time_limit=60.0)
    cases = {
        b"{": "malformed JSON",
        b"[1]": "JSON object",
        b'{"timelimit": 3}': "unknown field",
        b'{"time_limit": 0}': "time_limit must be in (0, 60]",
        b'{"time_limit": 61}': "time_limit must be in (0, 60]",
        b'{"time_limit": "3"}': "number of seconds",
        b'{"time_limit": true}': "number of seconds",
        b'{"dry_run": "yes"}': "dry_run must be true or false",
        b'{"time_limit":' + b"[" * 1000: "nested too deeply",
        b'{"\\ud800": 1}': "unknown field(s) '\\ud800'",
        b'{"time_limit": "\xff"}': "malformed JSON",
    }
    for body, reason in cases.items():
        status, reply = await r.post(body)
        assert status == 400, body
        assert reason in reply["Error"], (body, reply)
    status, reply = await r.post(b'{"time_limit": 1' + b" " * 5000 + b"}")
    assert status == 413 and "4096" in reply["Error"]
    async with r.session.post(
        f"{r.url}/repack", data=b"abc", headers={"Content-Encoding": "gzip"}
    ) as resp:
        assert resp.status == 400 and "not valid gzip" in (await resp.json())["Error"]
    status, plans = await r.get("/api/v1/repack/plans")
    assert plans == []  # nothing ran


async def test_a_second_request_while_one_runs_gets_409(make_repacker: MakeRepacker) -> None:
    cluster = GatedCluster()
    cluster.set_objects(fragmented_cluster())
    r = await make_repacker(cluster=cluster)
    first = asyncio.create_task(r.post())
    await asyncio.wait_for(cluster.listed.wait(), 30)  # liveness bound only
    status, reply = await r.post()
    assert status == 409 and "already computing" in reply["Error"]
    status, state = await r.get("/api/v1/repack")
    assert state["in_progress"] == "computing"
    cluster.gate.set()
    status, body = await first
    assert status == 200 and body["status"] == "OPTIMAL"
    status, _ = await r.post()  # and free again afterwards
    assert status == 200


async def test_a_cluster_that_cannot_be_read_is_a_500_with_the_reason(
    make_repacker: MakeRepacker,
) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects({"kind": "List", "items": [{"kind": "Node", "metadata": {}}]})
    r = await make_repacker(cluster=cluster)
    status, reply = await r.post()
    assert status == 500
    assert "cannot read the cluster" in reply["Error"] and "metadata.name" in reply["Error"]
    assert reply["run"]["status"] == "ERROR"
    _, plans = await r.get("/api/v1/repack/plans")
    assert [p["status"] for p in plans] == ["ERROR"]  # kept, so the dashboard shows it
    text = await r.metrics()
    assert metric(text, "carico_repack_runs_total", trigger="http", status="ERROR") == 1.0


class UnreachableCluster(InMemoryCluster):
    """An in-memory cluster whose API cannot be listed (as when the API server is down)."""

    async def list_for_repack(self) -> list[bytes]:
        raise RuntimeError("503 ServiceUnavailable: etcd is down")


async def test_an_unreachable_api_is_a_500_and_the_trigger_waits_a_cooldown(
    make_repacker: MakeRepacker,
) -> None:
    r = await make_repacker(cluster=UnreachableCluster(), debounce=0.0, cooldown=60.0)
    status, reply = await r.post()
    assert status == 500
    assert reply["Error"] == "repack: cannot list the cluster: 503 ServiceUnavailable: etcd is down"
    # A stuck pod does not make the repacker hammer a failing API: the cooldown holds.
    r.repack.on_unscheduled_event(stuck_pod())
    assert await r.repack.tick() is None
    r.clock.now += 60.0
    record = await r.repack.tick()
    assert record is not None and record.trigger == "unschedulable" and record.status == "ERROR"
    _, plans = await r.get("/api/v1/repack/plans")
    assert [(p["trigger"], p["status"]) for p in plans] == [
        ("unschedulable", "ERROR"),
        ("http", "ERROR"),
    ]


def stuck_pod() -> Unscheduled:
    return Unscheduled("default/pending", "carico-scheduler", unschedulable=True)
