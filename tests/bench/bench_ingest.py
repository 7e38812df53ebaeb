"""The extender's capacity ingest: its CPU per report, against gRPC's own cost per message.

N simulated nodes (``--nodes``, default 2,000) each keep one ``CapacityIngest.Report`` stream open,
as agents do, and send a report every ``--every`` seconds (default 1, the agent's cadence: one
report per batch of ten 10 Hz samples), each a full report with per-class data (3 features, 3
classes, the global workload), every one newer than the last. The streams come from a grpc.aio
client in this process; the server runs in a process of its own, on uvloop as the extender does,
so that its CPU time is its own. Two servers, fresh in turn over ``--rounds``:

* the baseline: the same generic stream handler reading every message and dropping it (the cost
  of being a gRPC stream server in Python at all);
* the extender's: ``scheduler_ext.grpc_server`` on an ``ExtenderService``: parse, validate, the
  capacity table (ordering, verdicts, per-class data), metrics.

Printed: reports/s taken, the server's CPU per report over the measured window (``--seconds``,
after ``--warmup``) and its ratio to the baseline's, and what the extender's figure means at 5,000
nodes: the cores its ingest takes at one report per node per second and per five seconds. Last,
the capacity table's own share (parse + ingest of the same reports in a loop, no gRPC).

    python tests/bench/bench_ingest.py [--nodes 2000] [--every 1] [--seconds 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator
from multiprocessing.connection import Connection
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc  # noqa: E402

SERVICE = "carico.v1.CapacityIngest"
STREAMS_PER_CHANNEL = 250  # as the throughput benchmark's feed: a few HTTP/2 connections


def node_report(node: str, sequence: int, timestamp: float) -> capacity_pb2.NodeCapacity:
    """A report as an agent with per-class data sends it (the fields the extender reads)."""
    msg = capacity_pb2.NodeCapacity(
        node=node,
        avail=random.uniform(0.0, 8.0),
        k=0.4,
        capacity=8.0,
        per_pod_cost=0.5,
        pods=3,
        mode=capacity_pb2.CAPACITY_MODE_LIVE,
        sequence=sequence,
        timestamp=timestamp,
        features=[random.uniform(0.2, 0.8), 0.45, 0.5],
        feature_names=["cpu", "memory", "psi_cpu"],
        headroom=[random.uniform(0.0, 0.5), 0.4, 0.3],
        full_level=0.85,
        cpu_cores=4.0,
        memory_bytes=32 << 30,
    )
    msg.health.psi_available = True
    msg.health.global_model = True
    for _ in range(3):
        scale = msg.scale.add()
        scale.per_core, scale.per_byte = 0.25, 1.0 / (32 << 30)
    msg.default_footprint.cpu_cores, msg.default_footprint.memory_bytes = 0.5, 256 << 20
    for i, name in enumerate(("shop/Deployment/web", "batch/Job/etl", "ml/Job/train")):
        c = msg.classes.add()
        c.workload_class, c.source, c.samples, c.pods = name, "learned", 40, i + 1
        c.cpu_cores, c.memory_bytes = 0.3 * (i + 1), float(200 << 20)
        c.request_cpu_cores, c.request_memory_bytes = 0.25, float(256 << 20)
    gw = msg.global_workload
    gw.has_model, gw.version, gw.contributing_nodes = True, 7, 100
    gw.expected_workload.extend([0.3, 0.2, 0.1])
    gw.feature_names.extend(["cpu", "memory", "psi_cpu"])
    return msg


# -- the server process ----------------------------------------------------------------------


class _Drop:
    """The baseline's handler: read every message, count it, keep nothing."""

    def __init__(self) -> None:
        self.taken = 0

    async def Report(
        self, request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> capacity_pb2.ReportSummary:
        async for _ in request_iterator:
            self.taken += 1
        return capacity_pb2.ReportSummary()


async def _serve(kind: str, conn: Connection) -> None:
    if kind == "extender":
        from scheduler_ext.cluster import InMemoryCluster
        from scheduler_ext.grpc_server import start_grpc
        from scheduler_ext.service import ExtenderService

        service = ExtenderService(InMemoryCluster())
        server = await start_grpc(service, "127.0.0.1:0")
        port = server.port

        def taken() -> int:
            value = service.metrics.registry.get_sample_value(
                "carico_extender_reports_total", {"outcome": "accepted"}
            )
            return int(value or 0)

    else:
        drop = _Drop()
        raw = grpc.aio.server()
        handler = grpc.stream_unary_rpc_method_handler(
            drop.Report,
            request_deserializer=None,  # bytes, as the extender registers it
            response_serializer=capacity_pb2.ReportSummary.SerializeToString,
        )
        raw.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Report": handler}),)
        )
        port = raw.add_insecure_port("127.0.0.1:0")
        await raw.start()

        def taken() -> int:
            return drop.taken

    loop = asyncio.get_running_loop()
    conn.send(port)
    # Commands: "mark" answers (cpu seconds, reports taken) now; "stop" ends the process.
    while True:
        command = await loop.run_in_executor(None, conn.recv)
        if command == "mark":
            conn.send((time.process_time(), taken()))
        else:
            break


def _server_main(kind: str, conn: Connection) -> None:
    import uvloop

    sys.setswitchinterval(0.0005)  # as the extender runs (scheduler_ext/cli.py)
    uvloop.run(_serve(kind, conn))


def _table_us_per_report(nodes: int, reports: int) -> float:
    """Parse + the service's ingest of ``reports`` serialized reports, CPU µs each (no gRPC)."""
    from scheduler_ext.cluster import InMemoryCluster
    from scheduler_ext.service import ExtenderService

    service = ExtenderService(InMemoryCluster())
    raws = [
        node_report(f"node-{i % nodes}", 1 + i // nodes, 1.7e9 + i).SerializeToString()
        for i in range(reports)
    ]
    parse = capacity_pb2.NodeCapacity.FromString
    stream = object()
    start = time.process_time()
    for raw in raws:
        service.ingest(parse(raw), stream)
    return (time.process_time() - start) / reports * 1e6


# -- the load ---------------------------------------------------------------------------------


async def _node(stub: capacity_pb2_grpc.CapacityIngestStub, node: str, every: float) -> None:
    async def reports() -> AsyncIterator[capacity_pb2.NodeCapacity]:
        sequence = 0
        await asyncio.sleep(random.uniform(0.0, every))  # an even spread over the period
        while True:
            sequence += 1
            yield node_report(node, sequence, time.time())
            await asyncio.sleep(every)

    await stub.Report(reports())


async def _load(
    port: int, nodes: int, every: float, conn: Connection, warmup: float, seconds: float
) -> tuple[float, int]:
    channels = [
        grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        for _ in range(max(1, -(-nodes // STREAMS_PER_CHANNEL)))
    ]
    stubs = [capacity_pb2_grpc.CapacityIngestStub(c) for c in channels]
    tasks = [
        asyncio.create_task(_node(stubs[i % len(stubs)], f"node-{i}", every)) for i in range(nodes)
    ]
    loop = asyncio.get_running_loop()

    async def mark() -> tuple[float, int]:
        conn.send("mark")
        return await loop.run_in_executor(None, conn.recv)  # type: ignore[no-any-return]

    await asyncio.sleep(warmup)
    cpu0, n0 = await mark()
    await asyncio.sleep(seconds)
    cpu1, n1 = await mark()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in channels:
        await c.close()
    return cpu1 - cpu0, n1 - n0


def measure(kind: str, args: argparse.Namespace) -> tuple[float, float]:
    """(reports/s taken, server CPU µs per report) for one fresh server of ``kind``."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_server_main, args=(kind, child), daemon=True)
    proc.start()
    try:
        port = parent.recv()
        cpu, taken = asyncio.run(
            _load(port, args.nodes, args.every, parent, args.warmup, args.seconds)
        )
        parent.send("stop")
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    if taken <= 0:
        raise SystemExit(f"{kind}: no report taken in {args.seconds} s")
    return taken / args.seconds, cpu / taken * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--every", type=float, default=1.0, help="seconds between a node's reports")
    p.add_argument("--seconds", type=float, default=20.0, help="measured window")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    rows: dict[str, list[tuple[float, float]]] = {"baseline": [], "extender": []}
    for _ in range(args.rounds):
        for kind in rows:  # alternating, so that a slow spell of the machine hits both
            rows[kind].append(measure(kind, args))
    base = statistics.median(us for _, us in rows["baseline"])
    ext = statistics.median(us for _, us in rows["extender"])
    print(
        f"ingest: {args.nodes} streams, a report every {args.every:g} s each, "
        f"{args.seconds:g} s measured, {args.rounds} round(s); server CPU per report (median)"
    )
    for kind, runs in rows.items():
        rate = statistics.median(r for r, _ in runs)
        us = statistics.median(u for _, u in runs)
        print(
            f"  {kind:9s} {rate:8.0f} reports/s  {us:6.1f} us/report  "
            f"({us / base:.2f}x baseline; runs: {', '.join(f'{u:.1f}' for _, u in runs)})"
        )
    table = _table_us_per_report(args.nodes, 20_000)
    print(
        f"  the capacity table alone (parse + ingest, no gRPC): {table:.1f} us/report "
        f"({table / ext:.0%} of the extender's)"
    )
    for every in (1.0, 5.0):
        print(
            f"  5,000 nodes at one report per {every:g} s: the extender's ingest takes "
            f"{5000 / every * ext / 1e6:.2f} cores (gRPC alone {5000 / every * base / 1e6:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
