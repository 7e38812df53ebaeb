"""``carico demo``: the whole stack on this machine, with a looping workload and the dashboard.

What runs, all on 127.0.0.1 with free ports:

* the aggregator and one agent reading this machine's real ``/proc`` — child processes (``carico
  aggregator``, ``carico agent --no-kube``), each in its own session so that a terminal's Ctrl-C
  reaches only this process, which then stops them in order; Linux also sends them SIGTERM if this
  process dies without cleaning up (``PR_SET_PDEATHSIG``);
* the extender (``--no-kube``: bindings go to an in-memory cluster) in this process, with its real
  HTTP and gRPC servers, because the demo owns that in-memory cluster: it moves each pod to Running
  when its simulated container starts and deletes it when it finishes, as a pod watch would report;
* ``--nodes`` simulated nodes: the simulator's node model (``carico_app.simulate.cluster``)
  stepped in real time, each read by a real agent service (``agent.service``) through the
  agent's telemetry source interface, reporting over gRPC like any agent;
* a workload that asks the extender what kube-scheduler would ask (filter, prioritize, bind over
  HTTP) for a stream of CPU-bound pods whose rate rises and falls in a loop. The real node is
  observed only: the demo starts no process on this machine, so pods go to the simulated nodes.

The dashboard is the extender's ``/``. ``--headless --duration S`` runs for S seconds and prints a
summary. Neighbours: ``carico_app.simulate`` (node model), ``agent``/``scheduler_ext`` (the
services).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from carico.cliargs import positive_float
from carico.pods import DEFAULT_MANAGED_SCHEDULERS

CARICO_PROFILE = next(iter(DEFAULT_MANAGED_SCHEDULERS))

NAMESPACE = "demo"
SIM_FEATURES = ("cpu", "memory")


def _nodes(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 50:
        raise argparse.ArgumentTypeError(f"between 1 and 50 simulated nodes, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=_nodes, default=4, help="simulated nodes (default: 4)")
    parser.add_argument(
        "--no-real-node", action="store_true", help="do not run an agent on this machine's /proc"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default: local)")
    parser.add_argument(
        "--port", type=int, default=0, help="dashboard/extender HTTP port (0: any free; default)"
    )
    parser.add_argument(
        "--headless", action="store_true", help="run without waiting for a person; print a summary"
    )
    parser.add_argument(
        "--duration",
        type=positive_float,
        default=None,
        help="stop after this many seconds (required with --headless; default: until Ctrl-C)",
    )
    parser.add_argument("--seed", type=int, default=1, help="workload and model seed (default: 1)")
    parser.add_argument(
        "--rate",
        type=positive_float,
        default=0.8,
        help="peak pod arrivals per second (default: 0.8)",
    )
    parser.add_argument(
        "--period",
        type=positive_float,
        default=120.0,
        help="seconds per workload wave (default: 120)",
    )
    parser.add_argument(
        "--pod-work",
        type=positive_float,
        default=20.0,
        help="mean CPU work of a demo pod, core-seconds (default: 20)",
    )
    parser.add_argument(
        "--stale-after",
        type=positive_float,
        default=5.0,
        help="seconds without a report before the extender calls a node stale (default: 5)",
    )
    parser.add_argument(
        "--exchange-interval",
        type=positive_float,
        default=2.0,
        help="seconds between the agents' model exchanges (default: 2)",
    )


# -- child processes ---------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child before exec: a new session, and SIGTERM when the demo process dies."""
    os.setsid()
    with contextlib.suppress(Exception):  # Linux only; elsewhere the demo's own cleanup remains
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    expected_exit: bool = False


class Children:
    """Child processes, each the leader of its own process group, stopped group by group."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def start(self, name: str, argv: list[str], log_path: str) -> Child:
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                # Safe here: the children are started before this process has any thread.
                preexec_fn=_die_with_parent,
            )
        child = Child(name, proc)
        self.children.append(child)
        return child

    def exited(self) -> list[Child]:
        return [c for c in self.children if c.proc.poll() is not None and not c.expected_exit]

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM each group (newest first), wait, then SIGKILL what is left."""
        for child in reversed(self.children):
            child.expected_exit = True
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in self.children:
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
            # Anything the child left in its group goes too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGKILL)


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def wait_for_port(host: str, port: int, child: Child, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if child.proc.poll() is not None:
            raise RuntimeError(f"{child.name} exited with code {child.proc.returncode} at start")
        try:
            _, writer = await asyncio.open_connection(host, port)
            writer.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{child.name} did not listen on {host}:{port}") from None
            await asyncio.sleep(0.1)


def this_node_name() -> str:
    """The host name as a DNS-1123 label (what a node of this machine would be called)."""
    name = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")[:50]
    return f"{name or 'local'}-real"


# -- simulated nodes ---------------------------------------------------------------------------


@dataclass
class Stats:
    submitted: int = 0
    placed: Counter[str] = field(default_factory=Counter)
    completed: int = 0
    filter_calls: int = 0
    no_fit: int = 0  # filter left no node
    fail_open: int = 0  # filter passes of a node whose data was stale or missing
    bind_refused: int = 0
    errors: list[str] = field(default_factory=list)
    peak_running: Counter[str] = field(default_factory=Counter)
    peak_oversubscription: dict[str, float] = field(default_factory=dict)  # threads per core
    # simulated seconds a node ran more pods than its capacity while another had room
    over_while_room: float = 0.0


class Demo:
    def __init__(self, args: argparse.Namespace, workdir: str) -> None:
        self.args = args
        self.workdir = workdir
        self.children = Children()
        self.stats = Stats()
        self.rng = np.random.default_rng(args.seed)
        self.stop = asyncio.Event()
        self.pending: list[int] = []
        self.keys: dict[int, str] = {}
        self.sim_names = [f"sim-{i + 1}" for i in range(args.nodes)]
        self.url = ""

    # -- start ---------------------------------------------------------------------------------

    async def start(self) -> None:
        from carico_app.simulate.cluster import Cluster
        from carico_app.simulate.params import ModelParams
        from scheduler_ext.cli import add_arguments as extender_arguments
        from scheduler_ext.cli import settings_from
        from scheduler_ext.cluster import InMemoryCluster
        from scheduler_ext.grpc_server import start_grpc
        from scheduler_ext.http_server import build_app, start_http
        from scheduler_ext.service import ExtenderService

        a = self.args
        host = a.host
        py = [sys.executable, "-m", "carico_app.cli"]
        agg_port, agg_ops = free_port(host), free_port(host)
        aggregator = self.children.start(
            "aggregator",
            [*py, "aggregator", f"--listen={host}:{agg_port}", f"--ops-listen={host}:{agg_ops}"],
            os.path.join(self.workdir, "aggregator.log"),
        )
        self.aggregator = f"{host}:{agg_port}"
        # Children are forked before this process starts gRPC threads (fork and gRPC threads do
        # not mix), so the extender's gRPC port is chosen now.
        grpc_addr = f"{host}:{free_port(host)}"
        if not a.no_real_node:
            self.real_node = this_node_name()
            self.real_agent = self.children.start(
                f"agent {self.real_node}",
                [*py, "agent", "--no-kube", f"--node-name={self.real_node}"]
                + [f"--aggregator={self.aggregator}", f"--extender={grpc_addr}"]
                + ["--metrics-port=0", f"--exchange-interval={a.exchange_interval}"],
                os.path.join(self.workdir, "agent-real.log"),
            )

        parser = argparse.ArgumentParser()
        extender_arguments(parser)
        ext_args = parser.parse_args(
            ["--no-kube", f"--host={host}", f"--port={a.port}", f"--grpc-host={host}"]
            + ["--grpc-port=0", f"--stale-after={a.stale_after}", "--reservation-ttl=60"]
        )
        self.cluster = InMemoryCluster()
        self.extender = ExtenderService(self.cluster, settings_from(ext_args))
        self.grpc = await start_grpc(self.extender, grpc_addr, None)
        self.extender.readiness.capacity_listening = True
        self.http = await start_http(build_app(self.extender), host, a.port)
        self.background = asyncio.create_task(self.extender.run_background())
        self.base = f"http://{host}:{self.http.port}"
        self.url = f"{self.base}/"
        await wait_for_port(host, agg_port, aggregator)

        self.sim = Cluster(ModelParams(), a.nodes, np.random.default_rng(a.seed))
        self.sim_task = asyncio.create_task(self.step_forever())
        self.agents = await self.start_sim_agents(grpc_addr)

    async def start_sim_agents(self, grpc_addr: str) -> list[asyncio.Task[int]]:
        from agent.service import AgentService, ServiceConfig
        from carico_app.simulate.carico_wiring import SimTelemetrySource

        tasks = []
        for i, name in enumerate(self.sim_names):
            config = ServiceConfig(
                node=name,
                aggregator=self.aggregator,
                extender=grpc_addr,
                exchange_interval=self.args.exchange_interval,
                metrics_port=0,
            )
            service = AgentService(config, SimTelemetrySource(self.sim, i, SIM_FEATURES))
            tasks.append(asyncio.create_task(service.run(), name=f"agent-{name}"))
        return tasks

    # -- the simulated cluster, in real time ---------------------------------------------------

    async def step_forever(self) -> None:
        from carico_app.simulate.cluster import SUCCEEDED

        dt = self.sim.params.dt
        next_at = time.monotonic()
        capacity = self.true_capacity()
        while True:
            # Catch up at most 1 s of simulated time after a stall rather than spinning forever.
            behind = min(10, max(1, int((time.monotonic() - next_at) / dt) + 1))
            for _ in range(behind):
                events = self.sim.step()
                self.observe(capacity, dt)
                for i in events.started.tolist():
                    if i in self.keys and self.keys[i] in self.cluster.pods:
                        self.cluster.set_phase(self.keys[i], "Running")
                for i in events.succeeded.tolist():
                    key = self.keys.pop(i, None)
                    if key is not None and self.sim.phase[i] == SUCCEEDED:
                        self.cluster.delete_pod(key)
                        self.stats.completed += 1
            next_at += behind * dt
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    def true_capacity(self) -> np.ndarray:
        """The demo's 1-thread pods each node can run under the agents' full level: the cpu
        feature (utilisation + pressure)/2 is runnable threads / (2·cores), and a pod counts
        when more than half of it fits (docs/architecture.md#decisions)."""
        from agent.pipeline import PipelineConfig

        node = self.sim.params.node
        threads = PipelineConfig().full_level * 2 * node.cores - node.base_cpu_threads
        return np.full(self.args.nodes, math.floor(threads + 0.5), dtype=np.int64)

    def observe(self, capacity: np.ndarray, dt: float) -> None:
        running = self.sim.running_count
        s = self.stats
        for i, name in enumerate(self.sim_names):
            s.peak_running[name] = max(s.peak_running[name], int(running[i]))
            over = float(self.sim.demand[i] / self.sim.cores[i])
            s.peak_oversubscription[name] = max(s.peak_oversubscription.get(name, 0.0), over)
        if bool(np.any(running > capacity)) and bool(np.any(running < capacity)):
            s.over_while_room += dt

    # -- the workload --------------------------------------------------------------------------

    def arrival_rate(self, t: float) -> float:
        """Pods per second: a wave from 100 % down to 10 % of --rate and back, one per --period."""
        a = self.args
        return a.rate * (0.55 + 0.45 * math.cos(2 * math.pi * t / a.period))

    def new_pod(self) -> int:
        from carico_app.simulate.params import MI, Workload

        work = float(self.rng.gamma(4.0, self.args.pod_work / 4.0))
        workload = Workload("demo", cpu_work=work, threads=1, memory=150 * MI)
        i = int(self.sim.add_pod(workload))
        self.keys[i] = f"{NAMESPACE}/pod-{self.stats.submitted:05d}"
        self.stats.submitted += 1
        return i

    async def workload(self, session: Any) -> None:
        # Pods arrive once every simulated node has reported (a few seconds), as in a cluster
        # whose agents run before its workloads; past 15 s they arrive anyway (fail-open).
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            reported = {n["name"] for n in self.extender_nodes() if n.get("reported")}
            if reported >= set(self.sim_names):
                break
            await asyncio.sleep(0.2)
        start = time.monotonic()
        next_arrival = start
        while True:
            now = time.monotonic()
            while next_arrival <= now:
                self.pending.append(self.new_pod())
                next_arrival += float(self.rng.exponential(1.0 / self.arrival_rate(now - start)))
            # Like kube-scheduler: one pod at a time from the queue; unschedulable ones wait.
            still: list[int] = []
            for i in self.pending:
                if not await self.schedule(session, i):
                    still.append(i)
            self.pending = still
            await asyncio.sleep(0.25)

    async def call(self, session: Any, verb: str, body: dict[str, Any]) -> Any:
        async with session.post(f"{self.base}/scheduler/{verb}", json=body) as reply:
            data = await reply.json(content_type=None)
            if reply.status != 200:
                raise RuntimeError(f"{verb}: HTTP {reply.status}: {data}")
            return data

    async def schedule(self, session: Any, i: int) -> bool:
        """Filter, prioritize and bind one pod as kube-scheduler would; True once bound."""
        key = self.keys[i]
        name = key.split("/", 1)[1]
        uid = f"uid-{name}"
        # Pods opt in to Carico as real ones do; a pod of another scheduler passes every node
        # untouched (the extender manages only its own profile's pods).
        pod = {
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid},
            "spec": {"schedulerName": CARICO_PROFILE},
        }
        args = {"Pod": pod, "NodeNames": self.sim_names, "Nodes": None}
        s = self.stats
        try:
            s.filter_calls += 1
            view = self.extender_nodes()
            fresh = {n["name"] for n in view if n.get("reported") and not n.get("stale")}
            stale = set(self.sim_names) - fresh  # stale or never reported
            result = await self.call(session, "filter", args)
            passing = result.get("NodeNames") or []
            s.fail_open += len(stale & set(passing))
            if not passing:
                s.no_fit += 1
                return False
            args["NodeNames"] = passing
            scores = await self.call(session, "prioritize", args)
            best = max(scores, key=lambda h: (h["Score"], -passing.index(h["Host"])))["Host"]
            binding = {"PodName": name, "PodNamespace": NAMESPACE, "PodUID": uid, "Node": best}
            bound = await self.call(session, "bind", binding)
        except Exception as exc:  # an HTTP or protocol error is a demo failure: count and go on
            s.errors.append(f"{key}: {exc}")
            return False
        if bound.get("Error"):
            s.bind_refused += 1
            return False
        self.sim.bind(i, self.sim_names.index(best))
        s.placed[best] += 1
        return True

    def extender_nodes(self) -> list[dict[str, Any]]:
        from scheduler_ext.http_server import nodes_view

        return nodes_view(self.extender)

    # -- run and stop --------------------------------------------------------------------------

    async def watch_children(self) -> None:
        reported: set[str] = set()
        while True:
            for child in self.children.exited():
                if child.name not in reported:
                    reported.add(child.name)
                    msg = f"{child.name} exited with code {child.proc.returncode}"
                    self.stats.errors.append(msg)
                    print(f"carico demo: {msg}", file=sys.stderr, flush=True)
            await asyncio.sleep(0.5)

    async def close(self) -> None:
        tasks = [getattr(self, "sim_task", None), getattr(self, "background", None)]
        running = [t for t in tasks + getattr(self, "agents", []) if t is not None]
        for task in running:
            task.cancel()
        # Children first: they must go even if something here is slow to stop, and the real
        # agent's stream then ends before the gRPC server closes under it.
        self.children.stop()  # a no-op when they were stopped already
        if running:
            _, late = await asyncio.wait(running, timeout=5.0)
            if late:
                names = ", ".join(sorted(t.get_name() for t in late))
                print(f"carico demo: {names} did not stop within 5 s", file=sys.stderr)
        for name in ("http", "grpc"):
            server = getattr(self, name, None)
            if server is not None:
                try:
                    await asyncio.wait_for(server.close(), 5.0)
                except TimeoutError:
                    print(
                        f"carico demo: the {name} server did not close within 5 s", file=sys.stderr
                    )

    def summary(self, seconds: float) -> str:
        s = self.stats
        nodes = {n["name"]: n for n in self.extender_nodes()}
        lines = [
            f"carico demo summary ({seconds:.0f} s, seed {self.args.seed})",
            f"  pods: submitted {s.submitted}, placed {sum(s.placed.values())}, "
            f"completed {s.completed}, waiting {len(self.pending)}",
            f"  decisions: filter calls {s.filter_calls}, no node fitted {s.no_fit}, "
            f"bind refused {s.bind_refused}, fail-open passes of stale or unreported nodes "
            f"{s.fail_open}",
            f"  a node over its capacity ({int(self.true_capacity()[0])} pods under the full level)"
            f" while another had room: {s.over_while_room:.1f} s",
            "  per node: placed, peak running pods, peak runnable threads per core /"
            " reporting avail, reserved, pods",
        ]
        names = sorted(set(nodes) | set(self.sim_names))
        for name in names:
            n = nodes.get(name, {})
            avail = n.get("avail")
            state = "no report" if not n.get("reported") else ("STALE" if n["stale"] else "fresh")
            peak = s.peak_oversubscription.get(name)
            lines.append(
                f"    {name:<24} placed {s.placed.get(name, 0):>4}  "
                f"peak {s.peak_running.get(name, 0):>3} pods"
                f" {'' if peak is None else f'{peak:4.2f}'} threads/core  "
                f"avail {'-' if avail is None else f'{avail:7.2f}'}  "
                f"reserved {n.get('reserved', 0):>3}  pods {n.get('pods', '-')!s:>3}  {state}"
            )
        lines.append(f"  errors: {len(s.errors)}")
        lines += [f"    {e}" for e in s.errors[:20]]
        return "\n".join(lines)


SHUTDOWN_LIMIT = 30.0  # seconds the whole shutdown may take before the process just exits


def _exit_if_stuck(seconds: float) -> None:
    """A last resort: if the orderly shutdown hangs, leave anyway (children are gone by then)."""
    import threading

    def leave() -> None:
        print(f"carico demo: shutdown took over {seconds:.0f} s; exiting", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(seconds, leave)
    timer.daemon = True
    timer.start()


async def _main(args: argparse.Namespace, workdir: str) -> int:
    import aiohttp

    demo = Demo(args, workdir)
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if demo.stop.is_set():  # a second Ctrl-C: stop the children and leave at once
            demo.children.stop(timeout=2.0)
            os._exit(130)
        demo.stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    started = 0.0
    watcher: asyncio.Task[None] | None = None
    workload: asyncio.Task[None] | None = None
    try:
        await demo.start()
        started = time.monotonic()
        print(f"carico demo: dashboard at {demo.url}", flush=True)
        if not args.no_real_node:
            print(
                f"carico demo: nodes {', '.join(demo.sim_names)} (simulated), "
                f"{demo.real_node} (this machine, pid {demo.real_agent.proc.pid}); "
                f"logs in {workdir}",
                flush=True,
            )
        if not args.headless:
            print(
                f"carico demo: pods are named {NAMESPACE}/pod-00000, {NAMESPACE}/pod-00001, ... "
                "(explain one on the dashboard); press Ctrl-C to stop",
                flush=True,
            )
        watcher = asyncio.create_task(demo.watch_children())
        async with aiohttp.ClientSession() as session:
            workload = asyncio.create_task(demo.workload(session))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(demo.stop.wait(), args.duration)
            # Stopping: bounded from here on, whatever a component does while it winds down.
            _exit_if_stuck(SHUTDOWN_LIMIT)
            demo.children.stop()
            workload.cancel()
            await asyncio.wait([workload], timeout=5.0)
    except RuntimeError as exc:
        print(f"carico demo: {exc}", file=sys.stderr)
        return 1
    finally:
        for task in (watcher, workload):
            if task is not None:
                task.cancel()
        if started:
            print(demo.summary(time.monotonic() - started), flush=True)
        await demo.close()
    return 0 if not demo.stats.errors else 1


def run(args: argparse.Namespace) -> int:
    if args.headless and args.duration is None:
        print("carico demo: --headless needs --duration SECONDS", file=sys.stderr)
        return 2
    import tempfile

    from carico.logs import configure_logging

    configure_logging("warning", "text")
    with tempfile.TemporaryDirectory(prefix="carico-demo-") as workdir:
        try:
            return asyncio.run(_main(args, workdir))
        except KeyboardInterrupt:
            return 130
