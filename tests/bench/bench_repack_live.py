"""Extender responsiveness while a repack solves: filter latency during a solve, against idle.

The extender (its real HTTP server and service, in-memory cluster) serves filter requests for
100 candidate nodes to a client in another process, which sends them one after another and times
each. Meanwhile a repack of a generated Priority-Matters instance (32 nodes, 8 pods per node, 100 %
usage, 4 tiers: one that uses its whole time budget) runs

* ``process`` — in the extender's solver process (what ``carico extender`` does);
* ``thread`` — in a thread of the extender's own process (the alternative the process avoids:
  model building, heuristics and bounds are Python and hold the GIL).

Baseline, measured in the same run: the same client against the idle extender (before and after).
Printed: requests answered, p50, p99 and max latency, and p50/p99 as ratios to idle. CP-SAT runs
with one worker so a two-core machine keeps a core for the server.

Run: ``make bench BENCH_ARGS=repack_live`` (or ``python tests/bench/bench_repack_live.py --help``).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from repack.problem.generator import Cell, instances  # noqa: E402
from repack.problem.snapshot import Snapshot  # noqa: E402
from scheduler_ext.cluster import InMemoryCluster  # noqa: E402
from scheduler_ext.http_server import build_app, start_http  # noqa: E402
from scheduler_ext.repack.service import (  # noqa: E402
    RepackService,
    RepackSettings,
    solver_process_pool,
)
from scheduler_ext.service import ExtenderService  # noqa: E402
from tests.integration.extender.conftest import extender_args, pod_object, report  # noqa: E402

CANDIDATES = 100


def list_document(snapshot: Snapshot) -> dict[str, Any]:
    """A generated instance as the kubectl-style List the repacker reads."""
    items: list[dict[str, Any]] = [
        {
            "kind": "Node",
            "metadata": {"name": n.name},
            "status": {"allocatable": {k: str(v) for k, v in n.allocatable.items()}},
        }
        for n in snapshot.nodes
    ]
    for p in snapshot.pods:
        kind, name = p.owner.split("/", 1)
        requests = {"cpu": f"{p.requests['cpu']}m", "memory": str(p.requests["memory"])}
        spec: dict[str, Any] = {
            "priority": p.priority,
            "schedulerName": "carico-scheduler",
            "containers": [{"name": "c", "resources": {"requests": requests}}],
        }
        if p.node:
            spec["nodeName"] = p.node
        meta = {
            "name": p.name,
            "namespace": p.namespace,
            "uid": p.uid,
            "ownerReferences": [{"kind": kind, "name": name, "controller": True}],
        }
        items.append({"kind": "Pod", "metadata": meta, "spec": spec, "status": {}})
    return {"kind": "List", "items": items}


def client(port: int, body: bytes, seconds: float) -> list[float]:
    """Filter requests one after another for ``seconds``; each one's latency (another process)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        conn.request("POST", "/scheduler/filter", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
        out.append(time.perf_counter() - start)
    conn.close()
    return out


def summary(latencies: list[float]) -> tuple[int, float, float, float]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return len(ordered), statistics.median(ordered), p99, ordered[-1]


async def run(seconds: float) -> int:
    [(seed, snapshot)] = instances(Cell(32, 8, 100, 4), 1)
    document = list_document(snapshot)
    cluster = InMemoryCluster()
    cluster.set_objects(document)
    service = ExtenderService(cluster)
    nodes = [f"bench-{i:03d}" for i in range(CANDIDATES)]
    for name in nodes:
        service.ingest(report(name, 5.0, timestamp=time.time()), object())
    body = extender_args(pod_object(), nodes)
    executors: dict[str, Executor] = {}

    def pool(kind: str) -> Executor:
        if kind not in executors:
            executors[kind] = (
                solver_process_pool()
                if kind == "process"
                else ThreadPoolExecutor(max_workers=1, thread_name_prefix="solve")
            )
        return executors[kind]

    settings = RepackSettings(time_limit=seconds, max_time_limit=seconds, workers=1)
    repackers = {
        kind: RepackService(
            settings, cluster.list_for_repack, service.metrics, executor=lambda k=kind: pool(k)
        )
        for kind in ("process", "thread")
    }
    http = await start_http(build_app(service), "127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    clients = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    rows: list[tuple[str, list[float], str]] = []
    try:
        # Warm-up: client process, solver process and the solver's imports in this process.
        await loop.run_in_executor(clients, client, http.port, body, 0.5)
        for r in repackers.values():
            await r.run("http", time_limit=0.5)
        for label in ("idle", "process", "thread", "idle again"):
            measured = loop.run_in_executor(clients, client, http.port, body, seconds)
            note = ""
            if label in repackers:
                record = await repackers[label].run("http", time_limit=seconds)
                assert record is not None and record.plan is not None
                note = f"{record.status}, solve {record.plan['solve_seconds']:.1f} s"
            rows.append((label, await measured, note))
    finally:
        clients.shutdown()
        for r in repackers.values():
            await r.close()
        await http.close()
    idle = summary(rows[0][1] + rows[-1][1])
    print(
        f"instance n32-ppn8-u100-k4 seed {seed}; {CANDIDATES} candidate nodes per filter; "
        f"{seconds:g} s per case; CP-SAT 1 worker"
    )
    print(
        f"{'case':<11} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'p50/idle':>9} {'p99/idle':>9}  solve"
    )
    for label, lat, note in rows:
        n, p50, p99, worst = summary(lat)
        print(
            f"{label:<11} {n:>8} {p50 * 1e3:>8.2f} {p99 * 1e3:>8.2f} {worst * 1e3:>8.1f} "
            f"{p50 / idle[1]:>9.2f} {p99 / idle[2]:>9.2f}  {note}"
        )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="solve budget and window")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.seconds))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
