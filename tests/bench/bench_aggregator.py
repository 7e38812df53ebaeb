"""Aggregator load benchmark: simulated agents exchanging models at 1 Hz each, on loopback.

Two kinds of exchange (``--rpc``, both by default): ``unary``, one ``Exchange`` call per report,
and ``stream``, one long-lived ``ExchangeStream`` per node carrying one message (and one reply) per
report, as the agents do. For every fleet size N, process layout and kind, the same load runs
against two servers, each fresh in its own process(es) and alternating over ``--rounds``: an empty
gRPC handler of the same kind (the baseline: the cost of gRPC itself; for unary a handler that
returns an empty ``GlobalModel``, for streams an echo that answers every message with one) and
the real aggregator (validation, store, cached reply, background recompute, metrics). The layouts
(``--layouts``): ``1``, one process, and ``N``, N gRPC processes sharing the port through
SO_REUSEPORT — for the aggregator ``--workers N``, i.e. N workers plus the merger that holds the
store; for the baseline N empty servers. The load comes from ``grpcload`` (``grpcload/``, Go,
built on first use into ``.cache/bin``): N distinct ``LocalModel`` messages, one per node. Unary:
sent round-robin at N calls/s over 32 connections, so every node reports once a second, each
report newer than the last. Stream: N streams spread over the same 32 connections, all opened
(and primed with one exchange) before the schedule starts, each sending its node's report once a
second on the same schedule and timing each message from its send to its reply. ``--load ghz``
uses ghz instead (dearer in CPU per call), ``--load python`` grpc.aio client processes (dearer
still); both only for unary. Every run has an unmeasured warm-up first.

Printed per fleet size, layout and kind: achieved exchanges/s (answered OK), p50/p99 latency seen
by the client (the median of the rounds' figures, so that one round caught by a stall of the
machine does not decide it), the fraction of reports sent more than 100 ms behind schedule, failed
exchanges, the server's CPU time per exchange over the measured window, all its processes
together (``cpu us``; robust on a shared machine, where other work inflates latencies but not this
CPU time) and its ratio to the baseline's, the p99 of the main server process's event-loop lag,
the cores the load generator used meanwhile (it shares the machine), and p99 as a ratio of the
baseline's p99. Target: 5,000 nodes at 1 Hz with p99 <= 3x baseline; the agents use the stream,
so the stream rows are the ones that count.

    python tests/bench/bench_aggregator.py [--sizes 1000,5000] [--layouts 1,2] [--rounds 3]
        [--rpc unary,stream] [--classes K]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aggregator.grpc_server import start_grpc_server
from aggregator.merger import Merger, reserve_port
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from aggregator.worker import WorkerConfig
from carico.cliargs import EVENT_LOOPS, event_loop_factory
from carico.model import SubspaceModel
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc, capacity_pb2

ROOT = Path(__file__).resolve().parents[2]
EVENT_LOOP = ["uvloop"]  # of every server process, both kinds alike (--event-loop)
METHODS = {
    "unary": "/carico.v1.Aggregator/Exchange",
    "stream": "/carico.v1.Aggregator/ExchangeStream",
}
METHOD = METHODS["unary"]
LATE_S = 0.1


# -- servers (each in its own process) ---------------------------------------------------------


class _Empty(aggregator_pb2_grpc.AggregatorServicer):
    async def Exchange(
        self, request: aggregator_pb2.LocalModel, context: grpc.aio.ServicerContext
    ) -> aggregator_pb2.GlobalModel:
        return aggregator_pb2.GlobalModel()

    async def ExchangeStream(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[aggregator_pb2.LocalModel],
        context: grpc.aio.ServicerContext,
    ) -> None:
        # An echo: one empty reply per message, read and written as the aggregator's handler does.
        while await context.read() is not grpc.aio.EOF:
            await context.write(aggregator_pb2.GlobalModel())


async def _serve_empty(address: str, conn: Connection) -> None:
    """One process of the empty-handler baseline (several share the port like the workers)."""
    server = grpc.aio.server()  # SO_REUSEPORT is on by default
    aggregator_pb2_grpc.add_AggregatorServicer_to_server(_Empty(), server)
    port = server.add_insecure_port(address)
    await server.start()
    conn.send(port)
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # wait for "stop"
    # A grace, not None: cancelling streams whose client has just gone makes grpc.aio print a
    # CancelledError traceback for each (noise in the benchmark's output, nothing else).
    await server.stop(2.0)


def _empty_main(address: str, conn: Connection, event_loop: str) -> None:
    with asyncio.Runner(loop_factory=event_loop_factory(event_loop)) as runner:
        runner.run(_serve_empty(address, conn))


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of another process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _serve(kind: str, workers: int, event_loop: str, conn: Connection) -> None:
    service: AggregatorService | None = None
    merger: Merger | None = None
    server: grpc.aio.Server | None = None
    empties: list[tuple[mp.process.BaseProcess, Connection]] = []
    recompute_time = [0.0, 0]  # seconds spent recomputing, recomputations
    if kind == "baseline" and workers == 1:
        server = grpc.aio.server()
        aggregator_pb2_grpc.add_AggregatorServicer_to_server(_Empty(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
    elif kind == "baseline":
        held, address = reserve_port("127.0.0.1:0")
        port = held.getsockname()[1]
        ctx = mp.get_context("spawn")
        for _ in range(workers):
            here, there = ctx.Pipe()
            process = ctx.Process(
                target=_empty_main, args=(address, there, event_loop), daemon=True
            )
            process.start()
            empties.append((process, here))
        for _, here in empties:
            await asyncio.get_running_loop().run_in_executor(None, here.recv)
    else:
        service = AggregatorService(AggregatorConfig(name="bench"), AggregatorMetrics())
        untimed = service.recompute

        def timed_recompute() -> None:
            began = time.perf_counter()
            untimed()
            recompute_time[0] += time.perf_counter() - began
            recompute_time[1] += 1

        service.recompute = timed_recompute  # type: ignore[method-assign]
        await service.start()
        if workers == 1:
            server, port = await start_grpc_server(service, "127.0.0.1:0")
        else:
            merger = Merger(service, "127.0.0.1:0", workers, WorkerConfig(event_loop=event_loop))
            port = await merger.start()
    pids = (
        [p.pid for p, _ in empties]
        if empties
        else [p.pid for p in merger.processes()]
        if merger is not None
        else []
    )
    conn.send(port)
    loop = asyncio.get_running_loop()
    window_cpu: list[float] = []
    lags: list[float] = []
    measuring = asyncio.Event()

    async def watch_loop() -> None:
        # How late a 5 ms timer fires: the event loop's stalls (our own blocking work, or the OS
        # not running this process), measured the same way in both servers (with workers: the
        # main process's loop).
        await measuring.wait()
        while measuring.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - before - 0.005)

    watcher = asyncio.create_task(watch_loop())
    # "mark" opens and closes the measured window; the server's CPU time over it (every process
    # of it) is robust where wall-clock latency is not (other work on a shared machine delays
    # calls but does not add to this process's CPU time).
    for _ in range(2):
        await loop.run_in_executor(None, conn.recv)
        window_cpu.append(time.process_time() + sum(_cpu_seconds(pid) for pid in pids))
        if measuring.is_set():
            measuring.clear()
        else:
            measuring.set()
        conn.send(window_cpu[-1])
    await loop.run_in_executor(None, conn.recv)  # wait for "stop"
    await watcher
    senders = len(service.store) if service is not None else 0
    if server is not None:
        await server.stop(2.0)  # a grace, as in _serve_empty
    if merger is not None:
        await merger.stop()
    for process, here in empties:
        here.send("stop")
        process.join(10)
    if service is not None:
        await service.stop()
    work: dict[str, float] = {}
    if service is not None:
        registry = service.metrics.registry
        work = {
            "handler_s": registry.get_sample_value("carico_aggregator_exchange_latency_seconds_sum")
            or 0.0,
            "calls": registry.get_sample_value("carico_aggregator_exchange_latency_seconds_count")
            or 0.0,
            "recompute_s": recompute_time[0],
            "recomputes": recompute_time[1],
        }
    conn.send({"senders": senders, "lags": lags, **work})


def _server_main(
    kind: str, workers: int, event_loop: str, conn: Connection, profile: str | None
) -> None:
    with asyncio.Runner(loop_factory=event_loop_factory(event_loop)) as runner:
        if profile is None or kind == "baseline":
            runner.run(_serve(kind, workers, event_loop, conn))
            return
        import cProfile

        profiler = cProfile.Profile()
        profiler.runcall(runner.run, _serve(kind, workers, event_loop, conn))
    profiler.dump_stats(profile)


# -- simulated agents ---------------------------------------------------------------------------


def _factors(nodes: list[str], seed: int) -> dict[str, aggregator_pb2.SubspaceFactor]:
    rng = np.random.default_rng(seed)
    result = {}
    for node in nodes:
        u, sigma = SubspaceModel.from_batch(rng.uniform(size=(2, 10))).to_arrays()
        result[node] = aggregator_pb2.SubspaceFactor(
            d=2, r=2, u=u.ravel().tolist(), sigma=sigma.tolist(), feature_names=["cpu", "memory"]
        )
    return result


async def _drive(
    port: int,
    nodes: list[str],
    offsets: list[float],
    start: float,
    warmup: float,
    duration: float,
    channels: int,
    seed: int,
) -> dict[str, object]:
    factors = _factors(nodes, seed)
    chans = [
        # Distinct channel ids: separate connections, as separate agents would have.
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.channel_id", i)])
        for i in range(channels)
    ]
    # No (de)serialisers: bytes in, bytes out.
    calls: list[grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = [
        c.unary_unary(METHOD) for c in chans
    ]
    latencies: list[float] = []
    counts = {"late": 0, "errors": 0, "outstanding": 0}
    measure_from, end = start + warmup, start + warmup + duration
    sequence = dict.fromkeys(nodes, 0)
    perf_counter = time.perf_counter

    async def one(i: int, node: str, scheduled: float) -> None:
        sequence[node] += 1
        request = aggregator_pb2.LocalModel(
            node=node,
            sequence=sequence[node],
            timestamp=time.time(),
            weight=1,
            model=factors[node],
        ).SerializeToString()
        sent = perf_counter()
        try:
            await calls[i % channels](request, timeout=10)
            ok = True
        except grpc.aio.AioRpcError as exc:
            ok = False
            if measure_from <= sent < end:
                codes[exc.code().name] = codes.get(exc.code().name, 0) + 1
        finally:
            counts["outstanding"] -= 1
        if not measure_from <= sent < end:
            return
        if not ok:
            counts["errors"] += 1
            return
        latencies.append(perf_counter() - sent)
        if sent - scheduled > LATE_S:
            counts["late"] += 1

    tasks: set[asyncio.Task[None]] = set()
    codes: dict[str, int] = {}

    def fire(i: int, node: str, scheduled: float) -> None:
        counts["outstanding"] += 1
        task = asyncio.create_task(one(i, node, scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    # Every node fires at start + offset + k seconds; walk that schedule in order, waking at most
    # every 2 ms and firing whatever is due.
    order = sorted(range(len(nodes)), key=lambda i: offsets[i])
    second = 0
    while start + second < end:
        base = start + second
        for i in order:
            due = base + offsets[i]
            if due >= end:
                break
            delay = due - perf_counter()
            if delay > 0.002:
                await asyncio.sleep(delay)
            fire(i, nodes[i], due)
        second += 1
    deadline = perf_counter() + 15
    while counts["outstanding"] and perf_counter() < deadline:
        await asyncio.sleep(0.01)
    for c in chans:
        await c.close()
    return {
        "latencies": latencies,
        "late": counts["late"],
        "errors": counts["errors"],
        "codes": codes,
    }


def _client_main(
    port: int,
    nodes: list[str],
    offsets: list[float],
    start: float,
    warmup: float,
    duration: float,
    channels: int,
    seed: int,
    conn: Connection,
) -> None:
    conn.send(asyncio.run(_drive(port, nodes, offsets, start, warmup, duration, channels, seed)))


# -- ghz, the load generator -------------------------------------------------------------------

# ghz (a gRPC load tester written in Go) costs the client side a small fraction of what a Python
# grpc.aio client does per call, so on a small machine it leaves the CPU to the server under test.
# Pinned, and built on first use into an ignored cache directory of this repository.
GHZ_MODULE = "github.com/bojand/ghz/cmd/ghz"
GHZ_VERSION = "v0.93.0"
GHZ_BIN = ROOT / ".cache" / "bin" / f"ghz-{GHZ_VERSION}"
PROTO = "protos/carico/v1/aggregator.proto"


def ensure_ghz() -> Path:
    if GHZ_BIN.exists():
        return GHZ_BIN
    go = shutil.which("go")
    if go is None:
        raise SystemExit(
            "the aggregator benchmark needs ghz, built from source with Go, and `go` is not on "
            "PATH: install Go (https://go.dev/dl/) or run with --load python"
        )
    build = ROOT / ".cache" / "ghz-build"
    print(f"building ghz {GHZ_VERSION} into {GHZ_BIN.relative_to(ROOT)} (first use only)")
    env = {**os.environ, "GOBIN": str(build), "GOTOOLCHAIN": "local"}
    done = subprocess.run(
        [go, "install", f"{GHZ_MODULE}@{GHZ_VERSION}"], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"building ghz failed:\n{done.stderr}")
    GHZ_BIN.parent.mkdir(parents=True, exist_ok=True)
    (build / "ghz").replace(GHZ_BIN)
    return GHZ_BIN


def ghz_data(fleet: int, path: Path) -> None:
    """One LocalModel per node (distinct names): ghz sends them round-robin, so at ``--rps N``
    every node reports once a second. Sequence and timestamp are filled per call by ghz's
    templates, so every report is newer than the one before it."""
    nodes = [f"node-{i:05d}" for i in range(fleet)]
    factors = _factors(nodes, seed=fleet)
    messages = [
        {
            "node": node,
            "sequence": "{{.RequestNumber}}",
            "timestamp": "{{.TimestampUnix}}",
            "weight": 1,
            "model": {
                "d": f.d,
                "r": f.r,
                "u": list(f.u),
                "sigma": list(f.sigma),
                "featureNames": list(f.feature_names),
            },
        }
        for node, f in factors.items()
    ]
    path.write_text(json.dumps(messages))


# Connections ghz opens: with worker processes sharing the port, the kernel spreads connections
# (not calls) over them by a hash, so a handful of connections could all land on one worker. Real
# agents each hold their own connection; 32 spread well enough and cost ghz little.
GHZ_CONNECTIONS = 32


def ghz_run(port: int, data: Path, rate: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """Run ghz; its report gets ``cpu_s``, the CPU time ghz itself used."""
    cmd = [
        str(ensure_ghz()),
        "--insecure",
        "--proto",
        PROTO,
        "--import-paths",
        ".",
        "--call",
        "carico.v1.Aggregator.Exchange",
        "-D",
        str(data),
        "--rps",
        str(rate),
        "-z",
        f"{seconds:g}s",
        "-c",
        str(concurrency),
        "--connections",
        str(GHZ_CONNECTIONS),
        "-t",
        "10s",
        "-O",
        "json",
        f"127.0.0.1:{port}",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 and not done.stdout.strip():
        raise SystemExit(f"ghz failed:\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    report["cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return report


# -- grpcload, the default load generator ------------------------------------------------------

# A small Go program (grpcload/): pre-serialised messages through grpc-go, only sequence and
# timestamp appended per call; it costs the shared machine less CPU per call than ghz, whose
# requests are built from JSON templates by reflection. Built on first use into .cache/bin.
GRPCLOAD_SRC = Path(__file__).resolve().parent / "grpcload"
GRPCLOAD_BIN = ROOT / ".cache" / "bin" / "carico-grpcload"


def ensure_grpcload() -> Path:
    sources = [GRPCLOAD_SRC / name for name in ("main.go", "go.mod", "go.sum")]
    if GRPCLOAD_BIN.exists() and all(
        GRPCLOAD_BIN.stat().st_mtime >= src.stat().st_mtime for src in sources
    ):
        return GRPCLOAD_BIN
    go = shutil.which("go")
    if go is None:
        raise SystemExit(
            "the aggregator benchmark builds its load generator with Go, and `go` is not on "
            "PATH: install Go (https://go.dev/dl/) or run with --load python"
        )
    GRPCLOAD_BIN.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [go, "build", "-o", str(GRPCLOAD_BIN), "."],
        cwd=GRPCLOAD_SRC,
        env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"building grpcload failed:\n{done.stderr}")
    return GRPCLOAD_BIN


def _classes(fleet: int, per_node: int) -> list[list[capacity_pb2.ClassFootprint]]:
    """``per_node`` learned classes for each node, drawn from 4x as many Deployments (at least
    64), so that the reply carries up to that many fleet medians."""
    rng = np.random.default_rng(fleet + 1)
    pool = [f"team-{k % 13}/Deployment/service-{k:04d}" for k in range(max(64, 4 * per_node))]
    return [
        [
            capacity_pb2.ClassFootprint(
                workload_class=pool[k],
                cpu_cores=float(rng.uniform(0.05, 4.0)),
                memory_bytes=float(rng.uniform(5e7, 8e9)),
                source="learned",
                samples=int(rng.integers(1, 10_000)),
                request_cpu_cores=0.25 * (1 + k % 8),
                request_memory_bytes=2.0**28 * (1 + k % 16),
            )
            for k in rng.choice(len(pool), size=per_node, replace=False)
        ]
        for _ in range(fleet)
    ]


def grpcload_data(fleet: int, path: Path, classes: int = 0) -> None:
    """One LocalModel per node without sequence and timestamp (grpcload appends those per call,
    so every report is newer than the node's last), each prefixed by its length; with
    ``classes``, each carries that many learned classes (the same in every report)."""
    nodes = [f"node-{i:05d}" for i in range(fleet)]
    factors = _factors(nodes, seed=fleet)
    learned = _classes(fleet, classes) if classes else [[] for _ in nodes]
    with path.open("wb") as out:
        for node, mine in zip(nodes, learned, strict=True):
            raw = aggregator_pb2.LocalModel(
                node=node, weight=1, model=factors[node], class_footprints=mine
            )
            data = raw.SerializeToString()
            out.write(struct.pack("<I", len(data)) + data)


def _await_line(stream: Any, wanted: str) -> None:
    for line in stream:
        if line.strip() == wanted:
            return
        print(f"  grpcload: {line.rstrip()}", file=sys.stderr)
    raise SystemExit(f"grpcload ended before {wanted!r}")


def run_grpcload(
    kind: str,
    workers: int,
    fleet: int,
    data: Path,
    warmup: float,
    duration: float,
    profile: str | None = None,
    rpc: str = "unary",
) -> Run:
    server, here, port = _start_server(kind, workers, profile)
    load = subprocess.Popen(
        [
            str(GRPCLOAD_BIN),
            *(["-stream"] if rpc == "stream" else []),
            "-method",
            METHODS[rpc],
            "-addr",
            f"127.0.0.1:{port}",
            "-data",
            str(data),
            "-rate",
            str(fleet),
            "-warmup",
            f"{warmup}s",
            "-duration",
            f"{duration}s",
            "-connections",
            str(GHZ_CONNECTIONS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert load.stderr is not None
    _await_line(load.stderr, "measure")
    before, load_before = _mark(here), _cpu_seconds(load.pid)
    _await_line(load.stderr, "end")
    load_cpu = _cpu_seconds(load.pid) - load_before
    cpu = _mark(here) - before
    out, err = load.communicate(timeout=60)
    if load.returncode != 0:
        raise SystemExit(f"grpcload failed:\n{err}")
    report = json.loads(out)
    codes = {k: int(v) for k, v in report["codes"].items()}
    return _finish(
        server,
        here,
        cpu,
        float(report["seconds"]),
        p50=report["p50_ms"] / 1e3,
        p99=report["p99_ms"] / 1e3,
        ok=int(report["ok"]),
        late=int(report["late"]),
        errors=sum(codes.values()),
        codes=codes,
        load_cpu=load_cpu,
    )


# -- one run ------------------------------------------------------------------------------------


@dataclass
class Run:
    p50: float  # seconds
    p99: float
    ok: int  # calls answered OK in the measured window
    late: int
    errors: int
    codes: dict[str, int]
    server_cpu: float
    senders: int
    duration: float
    work: dict[str, float]
    lags: np.ndarray  # event-loop lag samples of the server, seconds
    load_cpu: float = math.nan  # CPU seconds the load generator used in the measured window


def _start_server(
    kind: str, workers: int, profile: str | None
) -> tuple[mp.process.BaseProcess, Connection, int]:
    ctx = mp.get_context("spawn")
    server_end, here = ctx.Pipe()
    # Not a daemon: with workers it starts processes of its own.
    server = ctx.Process(
        target=_server_main, args=(kind, workers, EVENT_LOOP[0], server_end, profile)
    )
    server.start()
    if not here.poll(60):
        raise SystemExit(f"the {kind} server did not start")
    return server, here, int(here.recv())


def _mark(here: Connection) -> float:
    here.send("mark")
    return float(here.recv())


def _finish(
    server: mp.process.BaseProcess, here: Connection, cpu: float, duration: float, **calls: Any
) -> Run:
    here.send("stop")
    stats = here.recv()
    server.join()
    return Run(
        server_cpu=cpu,
        senders=int(stats["senders"]),
        duration=duration,
        work={k: float(v) for k, v in stats.items() if k not in ("senders", "lags")},
        lags=np.asarray(stats["lags"], dtype=float),
        **calls,
    )


def run_ghz(
    kind: str,
    workers: int,
    fleet: int,
    data: Path,
    warmup: float,
    duration: float,
    profile: str | None = None,
) -> Run:
    server, here, port = _start_server(kind, workers, profile)
    concurrency = 50  # workers; ghz paces them to --rps, so this only bounds calls in flight
    ghz_run(port, data, fleet, warmup, concurrency)  # unmeasured: connections, caches, the store
    before = _mark(here)
    report = ghz_run(port, data, fleet, duration, concurrency)
    cpu = _mark(here) - before
    percentiles = {int(p["percentage"]): p["latency"] / 1e9 for p in report["latencyDistribution"]}
    codes = {k: int(v) for k, v in report.get("statusCodeDistribution", {}).items()}
    ok = codes.pop("OK", 0)
    return _finish(
        server,
        here,
        cpu,
        report["total"] / 1e9,
        p50=percentiles[50],
        p99=percentiles[99],
        ok=ok,
        late=0,
        errors=sum(codes.values()),
        codes=codes,
        load_cpu=float(report["cpu_s"]),
    )


def run_python(
    kind: str,
    workers: int,
    fleet: int,
    clients: int,
    warmup: float,
    duration: float,
    profile: str | None = None,
) -> Run:
    ctx = mp.get_context("spawn")
    server, here, port = _start_server(kind, workers, profile)
    nodes = [f"node-{i:05d}" for i in range(fleet)]
    offsets = [(i * 0.6180339887) % 1.0 for i in range(fleet)]  # even spread over the second
    start = time.perf_counter() + 2.0  # time for the clients to start and build their models
    procs, pipes = [], []
    for c in range(clients):
        mine = list(range(c, fleet, clients))
        parent_end, child_end = ctx.Pipe()
        p = ctx.Process(
            target=_client_main,
            args=(
                port,
                [nodes[i] for i in mine],
                [offsets[i] for i in mine],
                start,
                warmup,
                duration,
                4,
                c,
                child_end,
            ),
            daemon=True,
        )
        p.start()
        procs.append(p)
        pipes.append(parent_end)
    time.sleep(max(0.0, start + warmup - time.perf_counter()))
    before = _mark(here)
    time.sleep(max(0.0, start + warmup + duration - time.perf_counter()))
    cpu = _mark(here) - before
    limit = time.monotonic() + 90
    outs = []
    for pipe in pipes:
        if not pipe.poll(max(1.0, limit - time.monotonic())):
            raise SystemExit("a client process did not report back (crashed or hung)")
        outs.append(pipe.recv())
    for p in procs:
        p.join()
    codes: dict[str, int] = {}
    for o in outs:
        for code, n in o["codes"].items():
            codes[code] = codes.get(code, 0) + n
    latencies = np.concatenate([np.asarray(o["latencies"], dtype=float) for o in outs])
    return _finish(
        server,
        here,
        cpu,
        duration,
        p50=float(np.percentile(latencies, 50)) if len(latencies) else math.nan,
        p99=float(np.percentile(latencies, 99)) if len(latencies) else math.nan,
        ok=len(latencies),
        late=sum(o["late"] for o in outs),
        errors=sum(o["errors"] for o in outs),
        codes=codes,
    )


@dataclass
class Summary:
    rate: float
    p50_ms: float
    p99_ms: float
    late: float
    errors: int
    server_cpu_us: float  # server CPU per completed exchange in the measured window
    lag_p99_ms: float  # p99 of the server's event-loop lag
    codes: dict[str, int]
    load_cpu: float  # the load generator's CPU use over the measured windows, in cores


def summarise(runs: list[Run]) -> Summary:
    """Pool the rounds: calls and CPU summed; p50 and p99 the median of the rounds' figures, so
    that one round hit by a stall of the shared machine does not decide them."""
    codes: dict[str, int] = {}
    for r in runs:
        for code, n in r.codes.items():
            codes[code] = codes.get(code, 0) + n
    lags = np.concatenate([r.lags for r in runs])
    ok = sum(r.ok for r in runs)
    return Summary(
        rate=ok / sum(r.duration for r in runs),
        p50_ms=float(np.median([r.p50 for r in runs])) * 1e3,
        p99_ms=float(np.median([r.p99 for r in runs])) * 1e3,
        lag_p99_ms=float(np.percentile(lags, 99)) * 1e3 if len(lags) else math.nan,
        late=sum(r.late for r in runs) / max(1, ok + sum(r.errors for r in runs)),
        errors=sum(r.errors for r in runs),
        server_cpu_us=1e6 * sum(r.server_cpu for r in runs) / max(1, ok),
        codes=codes,
        load_cpu=sum(r.load_cpu for r in runs) / sum(r.duration for r in runs),
    )


def _measure(args: argparse.Namespace, rpc: str, fleet: int, workers: int, data: Path) -> float:
    """Run one fleet size, layout and exchange kind against both servers; print their rows and
    return the p99 ratio."""
    runs: dict[str, list[Run]] = {"baseline": [], "aggregator": []}
    # Alternate the two servers so that drifting load on the machine hits both alike.
    for round_no in range(args.rounds):
        for kind in runs:
            profile = (
                f"{args.profile}-{fleet}-{workers}-{rpc}-{round_no}.prof"
                if args.profile and kind == "aggregator"
                else None
            )
            if args.load == "python":
                run = run_python(
                    kind, workers, fleet, args.clients, args.warmup, args.duration, profile
                )
            elif args.load == "ghz":
                run = run_ghz(kind, workers, fleet, data, args.warmup, args.duration, profile)
            else:
                run = run_grpcload(
                    kind, workers, fleet, data, args.warmup, args.duration, profile, rpc
                )
            runs[kind].append(run)
    base, real = summarise(runs["baseline"]), summarise(runs["aggregator"])
    ratio = real.p99_ms / base.p99_ms
    cpu_ratio = real.server_cpu_us / base.server_cpu_us
    procs = "1" if workers == 1 else f"{workers}w"
    for label, r, cpu_rel, rel in (
        ("empty", base, 1.0, 1.0),
        ("carico", real, cpu_ratio, ratio),
    ):
        print(
            f"{fleet:>6} {procs:>5} {rpc:>6} {label:>7} {r.rate:>8.0f} {r.p50_ms:>8.2f} "
            f"{r.p99_ms:>8.2f} {r.late:>6.1%} {r.errors:>6} {r.server_cpu_us:>7.0f} "
            f"{cpu_rel:>8.2f} {r.lag_p99_ms:>8.2f} {r.load_cpu:>8.2f} {rel:>8.2f}",
            flush=True,
        )
    for label, r in (("empty", base), ("carico", real)):
        if r.codes:
            why = {
                "grpcload": "calls (or streamed messages) that failed in the measured window; "
                "Canceled: not answered within the 10 s deadline",
                "ghz": "ghz ends a run by closing its connections: calls still in "
                "flight then, at most -c per run, come back Unavailable",
                "python": "CANCELLED: still unanswered 15 s after the window, when the "
                "client closed its channels",
            }[args.load]
            print(f"  note: {label} errors by status: {r.codes} ({why})")
    work = [r.work for r in runs["aggregator"]]
    calls = sum(w["calls"] for w in work)
    recomputes = sum(w["recomputes"] for w in work)
    print(
        f"  carico's own work: {1e6 * sum(w['handler_s'] for w in work) / max(1, calls):.1f} us "
        f"per exchange inside the handler (validation, store or forwarding); "
        f"{1e3 * sum(w['recompute_s'] for w in work) / max(1, recomputes):.2f} ms per "
        f"background recompute ({recomputes} recomputes)"
    )
    held = [r.senders for r in runs["aggregator"]]
    if any(h != fleet for h in held):
        print(f"  note: aggregator held {held} senders, expected {fleet}")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,1000,2000,3000,4000,5000")
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating runs of each server per fleet size"
    )
    parser.add_argument(
        "--layouts",
        default=f"1,{len(os.sched_getaffinity(0))}",
        help="server process layouts to compare: 1 (one process) and/or N (N gRPC worker "
        "processes; the aggregator adds its merger, as --workers N does)",
    )
    parser.add_argument(
        "--load",
        choices=("grpcload", "ghz", "python"),
        default="grpcload",
        help="load generator: grpcload (default, Go, built on first use), ghz, or grpc.aio "
        "client processes (costly per call)",
    )
    parser.add_argument("--clients", type=int, default=2, help="client processes (--load python)")
    parser.add_argument(
        "--rpc",
        default="unary,stream",
        help="exchange kinds to load, each against its own empty handler: unary (one Exchange "
        "call per report) and/or stream (one ExchangeStream per node; --load grpcload only)",
    )
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="uvloop",
        help="event loop of every server process, baseline and aggregator alike",
    )
    parser.add_argument(
        "--classes",
        type=int,
        default=0,
        help="learned classes in every node's model (--load grpcload only; the same in every "
        "report, so the per-class summary is built once: this measures carrying the classes)",
    )
    parser.add_argument(
        "--profile", metavar="PREFIX", help="write cProfile stats of each aggregator server run"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    EVENT_LOOP[0] = args.event_loop
    layouts = [int(w) for w in args.layouts.split(",")]
    rpcs = args.rpc.split(",")
    if not set(rpcs) <= set(METHODS):
        parser.error(f"--rpc: choose from {', '.join(METHODS)}")
    if args.classes and args.load != "grpcload":
        parser.error("--classes needs --load grpcload")
    if "stream" in rpcs and args.load != "grpcload":
        parser.error("--rpc stream needs --load grpcload")
    load = os.getloadavg()
    if args.load == "grpcload":
        ensure_grpcload()
        driver = f"grpcload ({GHZ_CONNECTIONS} connections)"
    elif args.load == "ghz":
        ensure_ghz()
        driver = f"ghz {GHZ_VERSION} (-c 50, {GHZ_CONNECTIONS} connections)"
    else:
        driver = f"{args.clients} Python client processes"
    print(
        f"aggregator exchanges at 1 Hz per node ({' and '.join(rpcs)}), load from {driver}, "
        f"servers on {args.event_loop}, {args.classes} learned classes per model, "
        f"{args.rounds} x {args.duration:g} s measured per server and size "
        f"(each after {args.warmup:g} s warm-up); "
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start"
    )
    header = (
        f"{'nodes':>6} {'procs':>5} {'rpc':>6} {'server':>7} {'exch/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'late':>6} {'errors':>6} {'cpu us':>7} {'cpu/base':>8} {'lag99 ms':>8} "
        f"{'load cpu':>8} {'p99/base':>8}"
    )
    print(header)
    print("-" * len(header))
    worst = {(rpc, w): 0.0 for rpc in rpcs for w in layouts}
    for fleet in sizes:
        data = ROOT / ".cache" / f"bench-aggregator-{fleet}.json"
        data.parent.mkdir(parents=True, exist_ok=True)
        if args.load == "ghz":
            ghz_data(fleet, data)
        elif args.load == "grpcload":
            data = data.with_suffix(".bin")
            grpcload_data(fleet, data, args.classes)
        for workers in layouts:
            for rpc in rpcs:
                worst[rpc, workers] = max(
                    worst[rpc, workers], _measure(args, rpc, fleet, workers, data)
                )
    load = os.getloadavg()
    print(
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at end; worst p99 ratio "
        + ", ".join(
            f"{worst[rpc, w]:.2f} ({rpc}, {'1 process' if w == 1 else f'{w} workers'})"
            for rpc in rpcs
            for w in layouts
        )
        + " (target <= 3)"
    )
    print(
        "procs: 1 = one process; Nw = N gRPC processes on one port (the aggregator's merger "
        "besides). cpu us: CPU of all server processes per answered exchange. load cpu: cores "
        "the load generator used meanwhile (it shares the machine)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
