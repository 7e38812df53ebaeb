"""Memory of the extender and the aggregator under hostile input, against their idle baseline.

Starts a real ``carico extender --no-kube`` and a real ``carico aggregator --workers 1`` and drives
each with what an attacker or a careless client can send, one kind after another, while a thread
samples the resident memory (RSS) of the server's whole process tree every 20 ms. Printed per
phase: requests sent, how they were answered, the RSS after the phase and the peak during it, both
as MB above the server's own idle baseline measured at the start of the same run, next to the
bound docs/operations.md states ("Hostile input, limits and crashes").

Extender phases: filters of distinct pods with the longest names Kubernetes allows (the
remembered pods fill up), filters and binds with names of 1 MiB (refused), distinct candidate
lists of 60,000 short names (the list cache), gzip bodies that inflate to 256 MiB, uploads of
60 MiB that never finish (the body budget), capacity reports for ever new node names over gRPC
(--max-nodes), filters over 5,000 of those nodes (the explain memory fills up to its byte bound)
and the views of all of them. Aggregator phases: a model
claiming a million nodes with 100,000 costs of 1e6, messages of 64 MiB (refused by gRPC from their
length), and models from ever new senders up to --max-senders.

Run: ``make bench BENCH_ARGS=hostile_memory`` (``--senders`` and ``--fake-nodes`` shorten it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

MIB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sampler:
    """RSS of a process (with ``tree``, and its children), sampled every 20 ms; peak since the
    last ``mark``."""

    def __init__(self, pid: int, tree: bool = True) -> None:
        self.proc = psutil.Process(pid)
        self.tree = tree
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> int:
        total = 0
        for p in [self.proc, *(self.proc.children(recursive=True) if self.tree else ())]:
            with contextlib.suppress(psutil.Error):  # a child that has just exited
                total += p.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.rss())

    def mark(self) -> None:
        self.peak = self.rss()

    def stop(self) -> None:
        self._stop.set()


def _wait_http(url: str, deadline: float = 60.0) -> None:
    import urllib.request

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} never answered")


class Report:
    def __init__(self, name: str, sampler: Sampler) -> None:
        self.name = name
        self.sampler = sampler
        time.sleep(1.0)
        self.base = sampler.rss()
        print(f"\n{name}: idle RSS {self.base / MIB:.0f} MB (baseline of the rows below)")
        print(f"{'phase':58} {'answers':28} {'after':>8} {'peak':>8}")

    async def phase(self, label: str, run: Callable[[], object]) -> None:
        self.sampler.mark()
        outcome = await run()  # type: ignore[misc]
        await asyncio.sleep(0.5)
        after, peak = self.sampler.rss(), max(self.sampler.peak, self.sampler.rss())
        print(
            f"{label:58} {str(outcome)[:28]:28} {(after - self.base) / MIB:+7.0f}M "
            f"{(peak - self.base) / MIB:+7.0f}M",
            flush=True,
        )


# -- extender ---------------------------------------------------------------------------------


def _pod(name: str, namespace: str = "default") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"u-{name[-40:]}"}}


async def extender(args: argparse.Namespace) -> None:
    import aiohttp
    import grpc

    from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc

    http_port, grpc_port = _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "carico_app.cli", "extender", "--no-kube"),
            *("--host", "127.0.0.1", "--port", str(http_port), "--grpc-port", str(grpc_port)),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{http_port}"
    try:
        _wait_http(f"{url}/healthz")
        # The extender's own process: the repack solver is a process of its own, started with
        # the extender, whose memory no request to the extender's HTTP or gRPC port changes.
        sampler = Sampler(proc.pid, tree=False)
        solver = sum(c.memory_info().rss for c in psutil.Process(proc.pid).children(True))
        print(f"\n(the repack solver and multiprocessing helper processes: {solver / MIB:.0f} MB)")
        report = Report("carico extender --no-kube, its own process (default limits)", sampler)
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def post(path: str, body: bytes, **headers: str) -> int:
                try:
                    async with session.post(url + path, data=body, headers=headers) as resp:
                        await resp.read()
                        return resp.status
                except aiohttp.ClientError:
                    return 0

            async def many(bodies: list[tuple[str, bytes]], parallel: int = 8) -> Counter[int]:
                seen: Counter[int] = Counter()
                queue = list(bodies)

                async def worker() -> None:
                    while queue:
                        path, body = queue.pop()
                        seen[await post(path, body)] += 1

                await asyncio.gather(*(worker() for _ in range(parallel)))
                return seen

            names = [f"node-{i}" for i in range(50)]

            async def long_names() -> Counter[int]:
                bodies = [
                    (
                        "/scheduler/filter",
                        json.dumps(
                            {"Pod": _pod(f"{i:08d}" + "p" * 245, "n" * 63), "NodeNames": names}
                        ).encode(),
                    )
                    for i in range(args.pods)
                ]
                return await many(bodies)

            await report.phase(
                f"{args.pods} filters, distinct pods with 253-char names", long_names
            )

            async def huge_names() -> Counter[int]:
                long = "a" * MIB
                bodies = [
                    ("/scheduler/filter", json.dumps({"Pod": _pod(long), "NodeNames": names}))
                    for _ in range(150)
                ] + [
                    (
                        "/scheduler/bind",
                        json.dumps({"PodName": "p", "PodNamespace": "d", "Node": long}),
                    )
                    for _ in range(150)
                ]
                return await many([(p, b.encode()) for p, b in bodies], parallel=4)

            await report.phase("300 filters/binds with 1 MiB pod or node names", huge_names)

            async def lists() -> Counter[int]:
                many_names = [f"n{i:x}" for i in range(60_000)]
                bodies = [
                    (
                        "/scheduler/filter",
                        json.dumps(
                            {"Pod": _pod("p"), "NodeNames": [*many_names, f"x{i}"]}
                        ).encode(),
                    )
                    for i in range(100)
                ]
                return await many(bodies, parallel=2)

            await report.phase("100 distinct NodeNames lists of 60,000 names", lists)

            async def bombs() -> Counter[int]:
                bomb = gzip.compress(b'{"Pod":' + b" " * (256 * MIB) + b"}", compresslevel=9)
                seen: Counter[int] = Counter()
                for _ in range(10):
                    seen[await post("/scheduler/filter", bomb, **{"Content-Encoding": "gzip"})] += 1
                return seen

            await report.phase("10 gzip bodies of 255 KB inflating to 256 MiB", bombs)

            async def slow_uploads() -> Counter[int]:
                release = asyncio.Event()
                part = b" " * MIB

                async def body() -> object:
                    yield b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a"],"x":"'
                    for _ in range(60):
                        yield part
                    await release.wait()
                    yield b'"}'

                tasks = [
                    asyncio.create_task(post("/scheduler/filter", body()))  # type: ignore[arg-type]
                    for _ in range(12)
                ]
                await asyncio.sleep(8.0)
                release.set()
                return Counter(await asyncio.gather(*tasks))

            await report.phase("12 concurrent uploads of 60 MiB held open", slow_uploads)

            async def fake_nodes() -> str:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                    stub = capacity_pb2_grpc.CapacityIngestStub(channel)
                    reports = (
                        capacity_pb2.NodeCapacity(
                            node=f"fake-{i:06d}." + "z" * 240,
                            avail=5.0,
                            capacity=2.0,
                            sequence=1,
                            timestamp=time.time(),
                        )
                        for i in range(args.fake_nodes)
                    )
                    summary = await stub.Report(reports, timeout=600)
                return f"{summary.accepted} in, {summary.rejected} out"

            await report.phase(f"{args.fake_nodes} reports naming new nodes (gRPC)", fake_nodes)

            async def big_decisions() -> Counter[int]:
                reported = [f"fake-{i:06d}." + "z" * 240 for i in range(5000)]
                bodies = [
                    (
                        "/scheduler/filter",
                        json.dumps({"Pod": _pod(f"big-{i}"), "NodeNames": reported}).encode(),
                    )
                    for i in range(200)
                ]
                return await many(bodies, parallel=4)

            await report.phase("200 filters of distinct pods over 5,000 of them", big_decisions)

            async def views() -> Counter[int]:
                await asyncio.sleep(2.5)  # a couple of sweeps fill each node's history
                seen: Counter[int] = Counter()
                for path in ("/api/v1/nodes", "/api/v1/history", "/api/v1/reservations"):
                    async with session.get(url + path) as resp:
                        await resp.read()
                        seen[resp.status] += 1
                return seen

            await report.phase("GET nodes, history, reservations of them all", views)
        sampler.stop()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


# -- aggregator -------------------------------------------------------------------------------


async def aggregator(args: argparse.Namespace) -> None:
    import grpc
    import numpy as np

    from carico.model import SubspaceModel
    from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc

    grpc_port, ops_port = _free_port(), _free_port()
    state = Path(tempfile.mkdtemp(prefix="carico-hostile-"))
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "carico_app.cli", "aggregator", "--workers", "1"),
            *("--listen", f"127.0.0.1:{grpc_port}", "--ops-listen", f"127.0.0.1:{ops_port}"),
            *("--features", "cpu,memory", "--checkpoint", str(state / "ckpt.json")),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rng = np.random.default_rng(0)
    u, sigma = SubspaceModel.from_batch(rng.uniform(size=(2, 8))).to_arrays()
    factor = aggregator_pb2.SubspaceFactor(
        d=2, r=2, u=u.ravel().tolist(), sigma=sigma.tolist(), feature_names=["cpu", "memory"]
    )
    try:
        _wait_http(f"http://127.0.0.1:{ops_port}/healthz")
        sampler = Sampler(proc.pid)
        report = Report("carico aggregator --workers 1 --features cpu,memory", sampler)
        options = [("grpc.max_send_message_length", -1)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}", options=options) as ch:
            stub = aggregator_pb2_grpc.AggregatorStub(ch)

            async def call(message: aggregator_pb2.LocalModel) -> str:
                try:
                    await stub.Exchange(message, timeout=60)
                    return "OK"
                except grpc.aio.AioRpcError as exc:
                    return exc.code().name

            async def fleet() -> Counter[str]:
                return Counter(
                    [
                        await call(
                            aggregator_pb2.LocalModel(
                                node=f"honest-{i}",
                                sequence=1,
                                timestamp=time.time(),
                                model=factor,
                                per_pod_costs=[0.1],
                            )
                        )
                        for i in range(20)
                    ]
                )

            await report.phase("20 honest nodes", fleet)

            async def influence() -> Counter[str]:
                flood = aggregator_pb2.LocalModel(
                    node="intruder",
                    sequence=1,
                    timestamp=time.time(),
                    model=factor,
                    weight=1_000_000,
                    per_pod_costs=[1e6] * 100_000,
                )
                return Counter([await call(flood) for _ in range(50)])

            await report.phase("50 models: weight 1e6, 100,000 costs of 1e6", influence)

            async def oversize() -> Counter[str]:
                big = aggregator_pb2.LocalModel(
                    node="big", model=factor, per_pod_costs=[0.1] * (8 * MIB)
                )
                return Counter(await asyncio.gather(*(call(big) for _ in range(20))))

            await report.phase("20 concurrent messages of 64 MiB", oversize)

            async def senders() -> Counter[str]:
                seen: Counter[str] = Counter()
                sent = 0

                async def stream() -> None:
                    nonlocal sent
                    while sent < args.senders:
                        call = stub.ExchangeStream()
                        try:
                            for _ in range(500):
                                if sent >= args.senders:
                                    break
                                sent += 1
                                await call.write(
                                    aggregator_pb2.LocalModel(
                                        node=f"sender-{sent:07d}." + "s" * 236,
                                        sequence=1,
                                        timestamp=time.time(),
                                        model=factor,
                                        per_pod_costs=[0.1],
                                    )
                                )
                                await call.read()
                                seen["OK"] += 1
                            await call.done_writing()
                        except grpc.aio.AioRpcError as exc:
                            seen[exc.code().name] += 1
                        await call.code()

                await asyncio.gather(*(stream() for _ in range(8)))
                return seen

            await report.phase(f"{args.senders} new senders (253-char names)", senders)
        sampler.stop()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        for f in state.iterdir():
            f.unlink()
        os.rmdir(state)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=12_000, help="distinct pods filtered")
    parser.add_argument("--fake-nodes", type=int, default=12_000, help="node names reported")
    parser.add_argument(
        "--senders", type=int, default=100_000, help="aggregator senders (--max-senders: 100000)"
    )
    parser.add_argument("--only", choices=["extender", "aggregator"], help="one of the two")
    args = parser.parse_args()
    if args.only != "aggregator":
        asyncio.run(extender(args))
    if args.only != "extender":
        asyncio.run(aggregator(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
