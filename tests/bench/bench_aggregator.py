"""Aggregator load benchmark: simulated agents calling ``Exchange`` at 1 Hz each, on loopback.

For every fleet size N, the same load runs against two servers, each fresh in its own process and
alternating over ``--rounds``: an empty gRPC handler (it returns an empty ``GlobalModel``: the cost
of gRPC itself, the baseline) and the real aggregator (validation, store, cached reply, background
recompute, metrics). The load comes from ghz, a gRPC load tester written in Go (pinned; built on
first use into ``.cache/bin``, which needs Go): N distinct ``LocalModel`` messages, one per node,
sent round-robin at N calls/s, so every node reports once a second, each report newer than the
last (ghz fills in sequence and timestamp). A Python client costs as much CPU per call as the
server, so on a small machine it would measure itself; ``--load python`` keeps it as a fallback
(separate grpc.aio client processes, each node on its own 1 Hz schedule). Every run has an
unmeasured warm-up first.

Printed per fleet size: achieved exchanges/s (answered OK), p50/p99 latency seen by the client
(the median of the rounds' figures, so that one round caught by a stall of the machine does not
decide it), the fraction of calls that started more than 100 ms behind schedule (``--load
python`` only), failed calls, the server's CPU time per exchange over the measured window (``cpu
us``; robust on a shared machine, where other work inflates latencies but not this process's CPU
time) and its ratio to the baseline's, the p99 of the server's event-loop lag (how late a 5 ms
timer fires), and p99 as a ratio of the baseline's p99. Target: 5,000 nodes at 1 Hz with p99 ≤ 3×
baseline.

    python tests/bench/bench_aggregator.py [--sizes 500,1000,2000,5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aggregator.grpc_server import start_grpc_server
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from carico.model import SubspaceModel
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
METHOD = "/carico.v1.Aggregator/Exchange"
LATE_S = 0.1


# -- servers (each in its own process) ---------------------------------------------------------


class _Empty(aggregator_pb2_grpc.AggregatorServicer):
    async def Exchange(
        self, request: aggregator_pb2.LocalModel, context: grpc.aio.ServicerContext
    ) -> aggregator_pb2.GlobalModel:
        return aggregator_pb2.GlobalModel()


async def _serve(kind: str, conn: Connection) -> None:
    service: AggregatorService | None = None
    recompute_time = [0.0, 0]  # seconds spent recomputing, recomputations
    if kind == "baseline":
        server = grpc.aio.server()
        aggregator_pb2_grpc.add_AggregatorServicer_to_server(_Empty(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
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
        server, port = await start_grpc_server(service, "127.0.0.1:0")
    conn.send(port)
    loop = asyncio.get_running_loop()
    window_cpu: list[float] = []
    lags: list[float] = []
    measuring = asyncio.Event()

    async def watch_loop() -> None:
        # How late a 5 ms timer fires: the event loop's stalls (our own blocking work, or the OS
        # not running this process), measured the same way in both servers.
        await measuring.wait()
        while measuring.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - before - 0.005)

    watcher = asyncio.create_task(watch_loop())
    # "mark" opens and closes the measured window; the server's CPU time over it is robust where
    # wall-clock latency is not (other work on a shared machine delays calls but does not add to
    # this process's CPU time).
    for _ in range(2):
        await loop.run_in_executor(None, conn.recv)
        window_cpu.append(time.process_time())
        if measuring.is_set():
            measuring.clear()
        else:
            measuring.set()
        conn.send(window_cpu[-1])
    await loop.run_in_executor(None, conn.recv)  # wait for "stop"
    await watcher
    senders = len(service.store) if service is not None else 0
    await server.stop(None)
    if service is not None:
        await service.stop()
    work: dict[str, float] = {}
    if service is not None:
        latency = service.metrics.exchange_latency
        work = {
            "handler_s": latency.sum,
            "calls": latency.count,
            "recompute_s": recompute_time[0],
            "recomputes": recompute_time[1],
        }
    conn.send({"senders": senders, "lags": lags, **work})


def _server_main(kind: str, conn: Connection, profile: str | None) -> None:
    if profile is None or kind == "baseline":
        asyncio.run(_serve(kind, conn))
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.runcall(asyncio.run, _serve(kind, conn))
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


def ghz_run(port: int, data: Path, rate: int, seconds: float, concurrency: int) -> dict[str, Any]:
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
        "4",
        "-t",
        "10s",
        "-O",
        "json",
        f"127.0.0.1:{port}",
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0 and not done.stdout.strip():
        raise SystemExit(f"ghz failed:\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


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


def _start_server(kind: str, profile: str | None) -> tuple[mp.process.BaseProcess, Connection, int]:
    ctx = mp.get_context("spawn")
    server_end, here = ctx.Pipe()
    server = ctx.Process(target=_server_main, args=(kind, server_end, profile), daemon=True)
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
    kind: str, fleet: int, data: Path, warmup: float, duration: float, profile: str | None = None
) -> Run:
    server, here, port = _start_server(kind, profile)
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
    )


def run_python(
    kind: str, fleet: int, clients: int, warmup: float, duration: float, profile: str | None = None
) -> Run:
    ctx = mp.get_context("spawn")
    server, here, port = _start_server(kind, profile)
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
        late=sum(r.late for r in runs) / max(1, ok),
        errors=sum(r.errors for r in runs),
        server_cpu_us=1e6 * sum(r.server_cpu for r in runs) / max(1, ok),
        codes=codes,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,1000,2000,5000")
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating runs of each server per fleet size"
    )
    parser.add_argument(
        "--load",
        choices=("ghz", "python"),
        default="ghz",
        help="load generator: ghz (default) or grpc.aio client processes (costly per call)",
    )
    parser.add_argument("--clients", type=int, default=2, help="client processes (--load python)")
    parser.add_argument(
        "--profile", metavar="PREFIX", help="write cProfile stats of each aggregator server run"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    load = os.getloadavg()[0]
    if args.load == "ghz":
        ensure_ghz()
        driver = f"ghz {GHZ_VERSION} (-c 50, 4 connections)"
    else:
        driver = f"{args.clients} Python client processes"
    print(
        f"aggregator Exchange at 1 Hz per node, load from {driver}, "
        f"{args.rounds} x {args.duration:g} s measured per server and size "
        f"(each after {args.warmup:g} s warm-up); "
        f"{os.cpu_count()} CPUs, load average {load:.2f} at start"
    )
    header = (
        f"{'nodes':>6} {'server':>9} {'exch/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'late':>6} {'errors':>6} {'cpu us':>7} {'cpu/base':>8} {'lag99 ms':>8} "
        f"{'p99/base':>8}"
    )
    print(header)
    print("-" * len(header))
    worst = 0.0
    for fleet in sizes:
        runs: dict[str, list[Run]] = {"baseline": [], "aggregator": []}
        data = ROOT / ".cache" / f"bench-aggregator-{fleet}.json"
        if args.load == "ghz":
            data.parent.mkdir(parents=True, exist_ok=True)
            ghz_data(fleet, data)
        # Alternate the two servers so that drifting load on the machine hits both alike.
        for round_no in range(args.rounds):
            for kind in runs:
                profile = (
                    f"{args.profile}-{fleet}-{round_no}.prof"
                    if args.profile and kind == "aggregator"
                    else None
                )
                runs[kind].append(
                    run_ghz(kind, fleet, data, args.warmup, args.duration, profile)
                    if args.load == "ghz"
                    else run_python(kind, fleet, args.clients, args.warmup, args.duration, profile)
                )
        base, real = summarise(runs["baseline"]), summarise(runs["aggregator"])
        ratio = real.p99_ms / base.p99_ms
        cpu_ratio = real.server_cpu_us / base.server_cpu_us
        worst = max(worst, ratio)
        for label, r, cpu_rel, rel in (
            ("empty", base, 1.0, 1.0),
            ("carico", real, cpu_ratio, ratio),
        ):
            print(
                f"{fleet:>6} {label:>9} {r.rate:>8.0f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} "
                f"{r.late:>6.1%} {r.errors:>6} {r.server_cpu_us:>7.0f} {cpu_rel:>8.2f} "
                f"{r.lag_p99_ms:>8.2f} {rel:>8.2f}",
                flush=True,
            )
        for label, r in (("empty", base), ("carico", real)):
            if r.codes:
                why = (
                    "ghz ends a run by closing its connections: calls still in flight then, at "
                    "most -c per run, come back Unavailable"
                    if args.load == "ghz"
                    else "CANCELLED: still unanswered 15 s after the window, when the client "
                    "closed its channels"
                )
                print(f"  note: {label} errors by status: {r.codes} ({why})")
        work = [r.work for r in runs["aggregator"]]
        calls = sum(w["calls"] for w in work)
        recomputes = sum(w["recomputes"] for w in work)
        print(
            f"  carico's own work: {1e6 * sum(w['handler_s'] for w in work) / calls:.1f} us per "
            f"call inside the handler (validation, store); "
            f"{1e3 * sum(w['recompute_s'] for w in work) / max(1, recomputes):.2f} ms per "
            f"background recompute ({recomputes} recomputes)"
        )
        held = [r.senders for r in runs["aggregator"]]
        if any(h != fleet for h in held):
            print(f"  note: aggregator held {held} senders, expected {fleet}")
    print(
        f"load average {os.getloadavg()[0]:.2f} at end; worst p99 ratio {worst:.2f} (target <= 3)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
