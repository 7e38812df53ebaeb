"""Extender throughput and latency: filter + prioritize pairs, as kube-scheduler sends them.

Three processes: the extender under test (``carico extender --no-kube``, fed capacity reports over
gRPC), a load generator (``--concurrency`` virtual clients, one connection each, each sending a
filter and then a prioritize of the nodes that passed; the Go one in ``loadgen/``, built into
``.cache/bin`` on first use, costs the shared CPUs far less than the aiohttp fallback), and — as the
baseline measured in the same run — a trivial extender on the same server stack (aiohttp, the same
event loop, msgspec wire types) that passes every node and scores 0. Cases: 100, 1,000 and 5,000
candidate nodes, with NodeNames (nodeCacheCapable) and with full v1.Node objects. Printed per case
(median of alternating rounds): pairs/s, p50 and p99 of the pair latency, the server's CPU time per
pair (user + system, from the OS: the figure least disturbed by other work on a shared machine) and
what that makes per CPU-second, and the ratios to the trivial extender. Targets: >= 1,000 pairs/s at
1,000 node names; p99 <= 2x the trivial one.

Run: ``make bench BENCH_ARGS=extender`` (or ``python tests/bench/bench_extender.py --help``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PAYLOADS = ROOT / "tests" / "integration" / "extender" / "payloads"
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_names(count: int) -> list[str]:
    return [f"node-{i:05d}" for i in range(count)]


def filter_body(names: list[str], cache_capable: bool) -> bytes:
    """An ExtenderArgs body as kube-scheduler encodes it (realistic v1.Pod and v1.Node objects)."""
    pod = (PAYLOADS / "pod.json").read_text()
    pod = json.dumps(json.loads(pod), separators=(",", ":"))
    if cache_capable:
        return f'{{"Pod":{pod},"Nodes":null,"NodeNames":{json.dumps(names)}}}'.encode()
    template = json.dumps(json.loads((PAYLOADS / "node.json").read_text()), separators=(",", ":"))
    items = ",".join(template.replace("NODE_NAME", n) for n in names)
    return (
        f'{{"Pod":{pod},"Nodes":{{"metadata":{{}},"items":[{items}]}},"NodeNames":null}}'.encode()
    )


# -- the trivial extender (baseline) --------------------------------------------------------------


def serve_trivial(port: int, event_loop: str) -> None:
    """Every node passes, every score is 0: the throughput benchmark's trivial extender
    (throughput_trivial.py) without its bind verb, on the same aiohttp and msgspec stack."""
    from aiohttp import web
    from throughput_trivial import build

    from carico.cliargs import event_loop_factory

    app = build(None)
    web.run_app(
        app,
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
        loop=event_loop_factory(event_loop)(),
    )


# -- the load generator ---------------------------------------------------------------------------


async def _load(url: str, count: int, cache_capable: bool, duration: float, workers: int) -> dict:
    import aiohttp

    names = node_names(count)
    body = filter_body(names, cache_capable)
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=workers)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # One checked call first: it also gives the prioritize body (the nodes that passed).
        async with session.post(f"{url}/filter", data=body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            first = json.loads(await resp.read())
        if cache_capable:
            passed = first["NodeNames"]
        else:
            passed = [n["metadata"]["name"] for n in first["Nodes"]["items"]]
        prio_body = filter_body(passed, cache_capable)
        async with session.post(f"{url}/prioritize", data=prio_body, headers=headers) as resp:
            assert resp.status == 200
            scores = json.loads(await resp.read())
            assert len(scores) == len(passed)

        latencies: list[float] = []
        stop_at = 0.0
        started = 0.0
        total = [2]  # pairs sent, warm-up and the checked first pair included

        async def worker() -> None:
            while True:
                t0 = time.perf_counter()
                if t0 >= stop_at:
                    return
                async with session.post(f"{url}/filter", data=body, headers=headers) as r:
                    await r.read()
                    ok = r.status == 200
                async with session.post(f"{url}/prioritize", data=prio_body, headers=headers) as r:
                    await r.read()
                    ok = ok and r.status == 200
                if not ok:
                    raise RuntimeError("extender answered an error during the benchmark")
                total[0] += 1
                if t0 >= started:
                    latencies.append(time.perf_counter() - t0)

        # Warm-up: a short run whose figures are dropped.
        now = time.perf_counter()
        stop_at, started = now + min(1.0, duration / 3), float("inf")
        await asyncio.gather(*(worker() for _ in range(workers)))
        now = time.perf_counter()
        stop_at, started = now + duration, now
        await asyncio.gather(*(worker() for _ in range(workers)))
        elapsed = time.perf_counter() - now
    latencies.sort()
    return {
        "pairs": len(latencies),
        "pairs_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "passed": len(passed),
        "pairs_total": total[0],
    }


LOADGEN_SRC = HERE / "loadgen"
LOADGEN_BIN = ROOT / ".cache" / "bin" / "carico-loadgen"


def build_go_loadgen() -> Path | None:
    """Build the Go load generator (standard library only) unless it is fresh; None without Go."""
    sources = [LOADGEN_SRC / "main.go", LOADGEN_SRC / "go.mod"]
    if LOADGEN_BIN.exists() and all(
        LOADGEN_BIN.stat().st_mtime >= s.stat().st_mtime for s in sources
    ):
        return LOADGEN_BIN
    if shutil.which("go") is None:
        return None
    LOADGEN_BIN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["go", "build", "-o", str(LOADGEN_BIN), "."],
        cwd=LOADGEN_SRC,
        env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
        check=True,
    )
    return LOADGEN_BIN


def _checked_pair(url: str, body: bytes, cache_capable: bool) -> tuple[bytes, int]:
    """One filter + prioritize checked for shape; returns the prioritize body and nodes passed."""
    import urllib.request

    def post(verb: str, data: bytes) -> Any:
        req = urllib.request.Request(
            f"{url}/{verb}", data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 200
            return json.loads(resp.read())

    first = post("filter", body)
    if cache_capable:
        passed = first["NodeNames"]
    else:
        passed = [n["metadata"]["name"] for n in first["Nodes"]["items"]]
    prio_body = filter_body(passed, cache_capable)
    scores = post("prioritize", prio_body)
    assert len(scores) == len(passed)
    return prio_body, len(passed)


def run_go_load(
    binary: Path, url: str, count: int, cache_capable: bool, duration: float, workers: int
) -> dict:
    body = filter_body(node_names(count), cache_capable)
    prio_body, passed = _checked_pair(url, body, cache_capable)
    with tempfile.TemporaryDirectory() as tmp:
        fpath, ppath = Path(tmp) / "filter.json", Path(tmp) / "prioritize.json"
        fpath.write_bytes(body)
        ppath.write_bytes(prio_body)
        out = subprocess.run(
            [
                str(binary),
                f"-url={url}",
                f"-filter-body={fpath}",
                f"-prioritize-body={ppath}",
                f"-workers={workers}",
                f"-duration={duration}s",
                f"-warmup={min(1.0, duration / 3)}s",
            ],
            capture_output=True,
            text=True,
        )
    if out.returncode != 0:
        raise RuntimeError(f"load generator failed ({out.returncode}): {out.stderr.strip()}")
    result: dict[str, Any] = json.loads(out.stdout)
    result["passed"] = passed
    result["pairs_total"] += 1  # the checked pair
    return result


def run_load(url: str, count: int, cache_capable: bool, duration: float, workers: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--loadgen",
            url,
            "--nodes",
            str(count),
            "--mode",
            "names" if cache_capable else "nodes",
            "--duration",
            str(duration),
            "--concurrency",
            str(workers),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# -- orchestration --------------------------------------------------------------------------------


def _wait_http(url: str, proc: subprocess.Popen[bytes], path: str = "/healthz") -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + path, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def _feed_reports(grpc_port: int, count: int, seed: int) -> int:
    import grpc

    from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc

    rng = random.Random(seed)
    reports = []
    for i, name in enumerate(node_names(count)):
        # Mostly room for a few pods, ~10 % of nodes full: a realistic mix of passes and failures.
        avail = rng.uniform(0.0, 10.0)
        reports.append(
            capacity_pb2.NodeCapacity(
                node=name,
                avail=avail,
                k=avail * 0.1,
                capacity=2.0,
                per_pod_cost=0.1,
                pods=rng.randrange(0, 20),
                mode=capacity_pb2.CAPACITY_MODE_LIVE,
                sequence=1,
                timestamp=time.time() + i * 1e-6,
            )
        )
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = capacity_pb2_grpc.CapacityIngestStub(channel)
        summary = stub.Report(iter(reports), timeout=120)
    return int(summary.accepted)


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _median_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("pairs_per_s", "p50_ms", "p99_ms", "cpu_us_per_pair", "pairs")
    out = dict(results[0])
    for key in keys:
        values = sorted(r[key] for r in results)
        out[key] = values[len(values) // 2]
    return out


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run_cases(
    servers: dict[str, tuple[subprocess.Popen[bytes], str]],
    sizes: list[int],
    workers: int,
    args: argparse.Namespace,
) -> None:
    header = (
        f"{'nodes':>6} {'mode':<9} {'server':<8} {'pairs/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'cpu us/pair':>11} {'pairs/cpu-s':>11} {'tput x':>7} {'p99 x':>6} {'cpu x':>6}"
    )
    print(header)
    print("-" * len(header))
    for count in sizes:
        for cache_capable in (True, False):
            mode = "NodeNames" if cache_capable else "Nodes"
            rounds: dict[str, list[dict[str, Any]]] = {"trivial": [], "carico": []}
            # Alternate the two servers so that load from elsewhere hits both alike.
            for _ in range(args.rounds):
                for label, (proc, url) in servers.items():
                    before = _cpu_seconds(proc.pid)
                    if args.go_loadgen is not None:
                        r = run_go_load(
                            args.go_loadgen,
                            url + "/scheduler",
                            count,
                            cache_capable,
                            args.duration,
                            workers,
                        )
                    else:
                        r = run_load(
                            url + "/scheduler", count, cache_capable, args.duration, workers
                        )
                    # Server CPU over the whole run, warm-up and checks included.
                    spent = _cpu_seconds(proc.pid) - before
                    r["cpu_us_per_pair"] = 1e6 * spent / max(1, r["pairs_total"])
                    rounds[label].append(r)
            med = {label: _median_result(rs) for label, rs in rounds.items()}
            base = med["trivial"]
            for label, r in med.items():
                print(
                    f"{count:>6} {mode:<9} {label:<8} {r['pairs_per_s']:>8.0f} "
                    f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['cpu_us_per_pair']:>11.0f} "
                    f"{1e6 / r['cpu_us_per_pair']:>11.0f} "
                    f"{r['pairs_per_s'] / base['pairs_per_s']:>7.2f} "
                    f"{r['p99_ms'] / base['p99_ms']:>6.2f} "
                    f"{r['cpu_us_per_pair'] / base['cpu_us_per_pair']:>6.2f}",
                    flush=True,
                )
            print(
                f"{'':>6} ({med['carico']['passed']} of {count} nodes pass carico's filter; "
                f"median of {args.rounds} rounds; {int(med['carico']['pairs'])} pairs "
                "in the median carico round)"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000", help="candidate node counts")
    parser.add_argument("--duration", type=float, default=2.5, help="seconds measured per case")
    parser.add_argument("--concurrency", type=int, default=8, help="load generator workers")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    parser.add_argument(
        "--python-loadgen",
        action="store_true",
        help="use the Python (aiohttp) load generator even when Go is there to build the Go one",
    )
    parser.add_argument(
        "--event-loop",
        choices=["uvloop", "asyncio"],
        default="uvloop",
        help="event loop of both servers (the extender's --event-loop)",
    )
    parser.add_argument("--loadgen", help=argparse.SUPPRESS)
    parser.add_argument("--serve-trivial", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["names", "nodes"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.serve_trivial is not None:
        serve_trivial(args.serve_trivial, args.event_loop)
        return 0
    if args.loadgen:
        result = asyncio.run(
            _load(args.loadgen, args.nodes, args.mode == "names", args.duration, args.concurrency)
        )
        print(json.dumps(result))
        return 0

    sizes = [int(s) for s in args.sizes.split(",")]
    args.go_loadgen = None if args.python_loadgen else build_go_loadgen()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ext_port, grpc_port, trivial_port = _free_port(), _free_port(), _free_port()
    extender = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "carico_app.cli",
            "extender",
            "--no-kube",
            "--host=127.0.0.1",
            f"--port={ext_port}",
            "--grpc-host=127.0.0.1",
            f"--grpc-port={grpc_port}",
            # The whole run must not make the fed data stale.
            "--stale-after=3600",
            f"--event-loop={args.event_loop}",
        ],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    trivial = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve-trivial",
            str(trivial_port),
            f"--event-loop={args.event_loop}",
        ],
        env=env,
    )
    ext_url, trivial_url = f"http://127.0.0.1:{ext_port}", f"http://127.0.0.1:{trivial_port}"
    try:
        _wait_http(ext_url, extender, "/readyz")
        _wait_http(trivial_url, trivial)
        accepted = _feed_reports(grpc_port, max(sizes), args.seed)
        print(
            f"extender benchmark: {accepted} nodes reported; {args.duration:g} s per round, "
            f"loopback, {'Go' if args.go_loadgen else 'Python (aiohttp)'} load generator "
            f"in its own process; machine: {os.cpu_count()} CPUs "
            "(if shared, absolute figures are noisy; ratios and CPU per pair less so)"
        )
        print(
            "x columns: carico / trivial extender (same aiohttp + msgspec stack, passes every "
            "node, scores 0), measured alternately in this run"
        )
        servers = {"trivial": (trivial, trivial_url), "carico": (extender, ext_url)}
        for workers in sorted({1, args.concurrency}):
            what = (
                "one pair at a time, as one kube-scheduler sends them"
                if workers == 1
                else f"{workers} concurrent workers (saturation)"
            )
            print(f"\n== {what}")
            _run_cases(servers, sizes, workers, args)
    finally:
        _stop(extender)
        _stop(trivial)
    return 0


if __name__ == "__main__":
    sys.exit(main())
