"""Scheduling throughput on the real control plane: kube-scheduler with Carico against
kube-scheduler alone, modelled on scheduler_perf's SchedulingBasic.

The bed (``throughput_bed``): the e2e tier's etcd, kube-apiserver and kube-scheduler, N bare
Node objects (no kubelets: a pod counts as scheduled once bound) and, for the extender
configurations, a capacity report for every node streamed over the extender's gRPC ingest for the
whole run (``throughput_feed``: one stream per node, a report every ``--report-every`` seconds,
data stale after three times that; a random avail per node, with room for every pod in all;
``--per-class``: per-class reports as today's agents send them, every node having learned the
pods' class, so that the extender decides by each node's fit for it).
Configurations, measured one after another in the same run: kube-scheduler alone; a trivial
extender (``throughput_trivial``: every node passes, every score is 0, a bind binds) on Carico's
HTTP stack; the floor, the trivial extender also taking Carico's inputs and doing nothing with them
(the capacity feed's reports over the same gRPC ingest, each parsed, and the reservation ledger's
pod watch, each event decoded): what being an extender that decides on reported capacity costs
before any of Carico's logic (``--floor-work-us N``: and N microseconds of CPU a pod spent on
purpose, what per-pod work an extender can afford); Carico with ``nodeCacheCapable`` true and
false, each with and without Carico binding. Every extender configuration sets the same verbs
(filter, prioritize and, with binding, bind).

For each configuration kube-scheduler is stopped, the M pods (scheduler_perf's pod-default with
``schedulerName: carico-scheduler``) are created, and kube-scheduler is started with the
configuration's extender entry: the pods wait for it, so creation is always ahead of scheduling and
its cost on the API server stays out of the measured phase (``--rate R`` creates them at R/s while
it runs instead). A watch times each pod's binding; the measured phase ends when every pod is bound
or after ``--budget`` seconds, and a configuration that ran out of budget is measured on the pods it
scheduled (the report says so).

Printed per configuration: pods/s as scheduler_perf reports it (average and percentiles of 1 s
samples from the first scheduled pod) and over the whole phase, kube-scheduler's own
``scheduler_scheduling_attempt_duration_seconds`` and
``scheduler_pod_scheduling_sli_duration_seconds`` percentiles and its failed attempts, the
extender's own request latencies, each component's CPU seconds over the measured phase (where the
time goes) and, apart, the CPU it uses idle (5 s with no pod to schedule, before the phase for all
but kube-scheduler, after it for kube-scheduler) with what each pod costs beyond that rate, the
API server's requests and pod watch events per pod, and the ratios to
kube-scheduler alone and to the trivial extender. After each Carico
configuration every node's bound pods are checked against what the filter admits for its avail
(``admissible``); with Carico binding an excess fails the benchmark (without it kube-scheduler
binds, and Carico learns of a binding only from its watch, so a node can be over-admitted by
design).

Targets: Carico (nodeCacheCapable, Carico binding) >= 0.5 x kube-scheduler alone at 1,000 nodes
and >= 0.35 x at 5,000; >= 0.9 x the trivial extender.

Run: ``make bench BENCH_ARGS=throughput`` (1,000 nodes x 5,000 pods);
``make bench BENCH_ARGS="throughput -- --full"`` adds 5,000 nodes x 10,000 pods;
``python tests/bench/bench_throughput.py --help`` for sizes, rates, budget and configurations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the e2e tier's harness and the benchmark's figures are top-level modules in these folders
sys.path[:0] = [str(HERE.parent / "e2e"), str(HERE.parent / "support")]

from e2e_controlplane import _die_with_parent, free_ports, wait_for  # noqa: E402
from e2e_extender import ExtenderProcess  # noqa: E402
from throughput_bed import Api, BenchControlPlane, ScheduledWatch, cpu_seconds, loadavg  # noqa: E402
from throughput_stats import (  # noqa: E402
    Histogram,
    count_by,
    counter,
    histogram,
    median_ratios,
    over_admitted,
    quantile,
    round_ratios,
    samples,
    summary,
)

from carico.pods import class_of_pod  # noqa: E402
from carico_app.schedconfig import CARICO_PROFILE, DEFAULT_PROFILE, ExtenderConfig  # noqa: E402

NAMESPACE = "throughput"
TARGET_ALONE = {1000: 0.5, 5000: 0.35}
TARGET_TRIVIAL = 0.9
ATTEMPT = "scheduler_scheduling_attempt_duration_seconds"
SLI = "scheduler_pod_scheduling_sli_duration_seconds"
EXT_LATENCY = "carico_extender_request_duration_seconds"
EXT_REQUESTS = "carico_extender_requests_total"
EXT_HOLDS = "carico_extender_in_flight_holds_total"
EXT_WAITS = "carico_extender_in_flight_waits_total"
EXT_DECISIONS = "carico_extender_decisions_total"


@dataclass(frozen=True)
class Config:
    name: str
    extender: str  # "", "trivial", "floor" (trivial + Carico's inputs) or "carico"
    node_cache_capable: bool = True
    bind: bool = True


CONFIGS = (
    Config("alone", ""),
    Config("trivial", "trivial"),
    Config("floor", "floor"),
    Config("carico", "carico"),
    Config("carico-nobind", "carico", bind=False),
    Config("carico-nodes", "carico", node_cache_capable=False),
    Config("carico-nodes-nobind", "carico", node_cache_capable=False, bind=False),
)
HEADLINE = "carico"  # nodeCacheCapable, Carico binding


@dataclass
class Result:
    config: Config
    rates: list[float]
    overall: float
    attempt: Histogram
    sli: Histogram
    ext: dict[str, Histogram] = field(default_factory=dict)
    # Carico's own counts over the measured phase: requests by verb, filters that held nodes
    # and filters that waited for pods in flight
    ext_counts: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    over: dict[str, tuple[int, int]] | None = None
    create_rate: float = 0.0
    retried: float = 0.0  # attempts that did not schedule (unschedulable or error)
    scheduled: int = 0  # pods bound in the measured phase (all of them unless the budget ended it)
    api: dict[str, float] = field(default_factory=dict)  # api_load over the measured phase
    idle: dict[str, float] = field(default_factory=dict)  # CPU cores each used with no pod to do
    phase_s: float = 0.0  # the measured phase's length

    def per_pod_net(self, name: str) -> float:
        """CPU ms per pod beyond what the process costs idle over the same time."""
        spent = self.cpu.get(name, 0.0) - self.idle.get(name, 0.0) * self.phase_s
        return 1000 * spent / self.scheduled

    @property
    def average(self) -> float:
        return summary(self.rates).average


def avails_for(nodes: list[str], pods: int, seed: int) -> dict[str, float]:
    """A random avail per node (integers and a third, so the floor of the rule is exercised)
    whose admissible pods total about 1.5x the pods: some nodes fill, every pod has room."""
    rng = random.Random(seed)
    hi = max(2, math.ceil(3 * pods / len(nodes)))
    return {n: rng.randint(1, hi) + 0.3 for n in nodes}


class Extenders:
    """Starts and stops the extender of one configuration, and its capacity feed."""

    def __init__(
        self,
        cp: BenchControlPlane,
        workdir: Path,
        report_every: float,
        carico_flags: list[str] | None = None,
        per_class: bool = False,
        floor_work_us: float = 0.0,
    ) -> None:
        self.cp = cp
        self.floor_work_us = floor_work_us
        self.carico_flags = list(carico_flags or [])
        self.workdir = workdir
        self.report_every = report_every
        # Per-class reports, every node having learned the benchmark pods' class (its name as
        # the extender derives it from such a pod); "" for reports of one cost per pod.
        pod = {**Api.pod_body("x", CARICO_PROFILE), "metadata": {"namespace": NAMESPACE}}
        self.pod_class = class_of_pod(pod).name if per_class else ""
        self.procs: list[subprocess.Popen[bytes]] = []
        self.carico: ExtenderProcess | None = None
        self.pid: int | None = None
        self.feed_pid: int | None = None
        self.metrics_url = ""

    def _spawn(self, script: str, *args: str) -> int:
        """Run one of this directory's scripts in its own session, logging to WORKDIR/NAME.log
        (NAME the script's without ``throughput_``), dying with this process; returns its pid."""
        name = script.removeprefix("throughput_").removesuffix(".py")
        with open(self.workdir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, str(HERE / script), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.procs.append(proc)
        return proc.pid

    def start(self, config: Config, avails: dict[str, float]) -> str:
        """Start the extender (and, but for the trivial one, the capacity feed into it); returns
        its URL prefix."""
        if config.extender in ("trivial", "floor"):
            port, grpc_port = free_ports(2)
            inputs = (
                [str(grpc_port), f"{self.floor_work_us:g}"] if config.extender == "floor" else []
            )
            self.pid = self._spawn(
                "throughput_trivial.py", str(self.cp.kubeconfig), str(port), *inputs
            )
            base = f"http://127.0.0.1:{port}"
            wait_for(lambda: _http_ok(f"{base}/healthz"), 60, "trivial extender")
            if inputs:
                self._feed(f"127.0.0.1:{grpc_port}", avails, lambda: _count(f"{base}/reports"))
            return f"{base}/scheduler"
        stale_after = 3 * self.report_every
        ext = ExtenderProcess(
            self.cp.kubeconfig,
            self.workdir,
            "--stale-after",
            f"{stale_after:g}",
            # no pod runs, so reservations last the whole run; the default 300 s could end
            # before the 10,000-pod size does
            "--reservation-ttl",
            "86400",
            # as the chart runs it: a JSON line per bind is part of what Carico costs
            "--log-level",
            "info",
            "--log-format",
            "json",
            *self.carico_flags,
        )
        ext.start()
        self.carico, self.pid = ext, ext.proc.pid if ext.proc else None
        self.metrics_url = metrics = f"{ext.base}/metrics"
        accepted = 'carico_extender_reports_total{outcome="accepted"}'
        self._feed(f"127.0.0.1:{ext.grpc_port}", avails, lambda: _metric(metrics, accepted))
        return ext.url_prefix

    def _feed(self, target: str, avails: dict[str, float], taken: Callable[[], float]) -> None:
        """Start the capacity feed into ``target``; wait until ``taken()`` counts a report of
        every node."""
        path = self.workdir / "avails.json"
        path.write_text(json.dumps(avails))
        self.feed_pid = self._spawn(
            "throughput_feed.py",
            target,
            str(path),
            f"{self.report_every:g}",
            *([self.pod_class] if self.pod_class else []),
        )
        wait_for(lambda: taken() >= len(avails), 120, f"capacity reports of {len(avails)} nodes")

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs.clear()
        if self.carico is not None:
            self.carico.stop()
        self.carico, self.pid, self.feed_pid, self.metrics_url = None, None, None, ""


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _count(url: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return float(resp.read().decode())


def _metric(url: str, series: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def api_load(metrics: str) -> dict[str, float]:
    """From the API server's /metrics: its requests (all verbs but WATCH), and the pod watch
    events it sent with their bytes (every watcher's, kube-scheduler's and Carico's alike)."""
    out = {"requests": 0.0, "pod events": 0.0, "pod event bytes": 0.0}
    pods = 'group="",resource="pods",version="v1"}'
    for line in metrics.splitlines():
        key, _, value = line.rpartition(" ")
        if key.startswith("apiserver_request_total{") and 'verb="WATCH"' not in key:
            out["requests"] += float(value)
        elif key.startswith("apiserver_watch_events_total{") and key.endswith(pods):
            out["pod events"] += float(value)
        elif key.startswith("apiserver_watch_events_sizes_sum{") and key.endswith(pods):
            out["pod event bytes"] += float(value)
    return out


async def measure(
    api: Api,
    cp: BenchControlPlane,
    ext: Extenders,
    config: Config,
    nodes: list[str],
    pods: int,
    avails: dict[str, float],
    rate: float,
    budget: float,
    profile: Path | None = None,
) -> Result:
    entries = []
    if config.extender:
        url = ext.start(config, avails)
        entries.append(
            ExtenderConfig(
                url,
                bind_verb="bind" if config.bind else "",
                preempt_verb="",
                node_cache_capable=config.node_cache_capable,
            )
        )
    try:
        names = [f"pod-{i:06d}" for i in range(pods)]
        procs = {
            "kube-apiserver": cp.components["kube-apiserver"].pid,
            "etcd": cp.components["etcd"].pid,
            "extender": ext.pid,
            "feed": ext.feed_pid,
            "bench": os.getpid(),
        }
        watch = ScheduledWatch(api, NAMESPACE)
        created: asyncio.Task[tuple[float, float]] | None = None
        if rate <= 0:
            # every pod waits before kube-scheduler starts: the creation's own cost (the API
            # server's above all) is then no part of the measured phase
            cp.stop_scheduler()
            first, last = await api.create_pods(NAMESPACE, names, math.inf, CARICO_PROFILE)
            create_rate = pods / max(1e-9, last - first)
        await watch.start()
        # What time alone costs every process while nothing is scheduled (the reports, the
        # watches, the API server's own upkeep); kube-scheduler's is measured after the run.
        idle = await _idle_rates(procs)
        ext_before = await _scrape(api, ext.metrics_url) if ext.metrics_url else ""
        api_before = api_load(await api.get_url(api.server + "/metrics"))
        cpu_before = {k: cpu_seconds(p) for k, p in procs.items()}
        phase_start = time.monotonic()
        spy = _profile(ext.pid, profile, config.name)
        cp.restart_scheduler(entries, profiles=(DEFAULT_PROFILE, CARICO_PROFILE))
        procs["kube-scheduler"] = cp.components["kube-scheduler"].pid
        cpu_before["kube-scheduler"] = 0.0  # a new process: all its CPU is this run's
        if rate > 0:
            created = asyncio.create_task(api.create_pods(NAMESPACE, names, rate, CARICO_PROFILE))
        await watch.wait_for(pods, budget)
        if created is not None:
            first, last = await created
            create_rate = pods / max(1e-9, last - first)
        cpu = {k: cpu_seconds(p) - cpu_before[k] for k, p in procs.items()}
        phase_s = time.monotonic() - phase_start
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
            spy.wait(60)
        idle.update(await _idle_rates({"kube-scheduler": procs["kube-scheduler"]}))
        await watch.stop()
        sched = await api.get_url(f"https://127.0.0.1:{cp.scheduler_port}/metrics")
        api_after = api_load(await api.get_url(api.server + "/metrics"))
        times = list(watch.bound_at.values())
        if not times:
            raise RuntimeError(f"{config.name}: no pod scheduled in {budget:.0f} s")
        result = Result(
            config,
            samples(times),
            len(times) / max(1e-9, max(times) - min(times)),
            histogram(sched, ATTEMPT, {"profile": CARICO_PROFILE, "result": "scheduled"}),
            histogram(sched, SLI),
            cpu=cpu,
            create_rate=create_rate,
            scheduled=len(times),
            api={k: v - api_before[k] for k, v in api_after.items()},
            idle=idle,
            phase_s=phase_s,
        )
        attempts = "scheduler_schedule_attempts_total"
        result.retried = counter(sched, attempts, {"profile": CARICO_PROFILE}) - counter(
            sched, attempts, {"profile": CARICO_PROFILE, "result": "scheduled"}
        )
        if ext.metrics_url:
            after = await _scrape(api, ext.metrics_url)

            def grew(series: str, label: dict[str, str] | None = None) -> float:
                """How much the extender's counter grew over the phase."""
                return counter(after, series, label) - counter(ext_before, series, label)

            for verb in ("filter", "prioritize", "bind"):
                label = {"verb": verb}
                result.ext[verb] = histogram(after, EXT_LATENCY, label).minus(
                    histogram(ext_before, EXT_LATENCY, label)
                )
                result.ext_counts[verb] = grew(EXT_REQUESTS, label)
            for name, series in (("holds", EXT_HOLDS), ("waits", EXT_WAITS)):
                result.ext_counts[name] = grew(series)
            # the nodes its filters turned away (the failed map of the replies that had to carry it)
            result.ext_counts["failed nodes"] = sum(
                grew(EXT_DECISIONS, {"verb": "filter", "outcome": outcome})
                for outcome in ("fail", "unresolvable")
            )
        if config.extender == "carico":
            listed = await api.list_pods(NAMESPACE)
            bound = count_by(p.spec.nodeName for p in listed.items if p.spec.nodeName)
            result.over = over_admitted(bound, avails, per_class=bool(ext.pod_class))
        return result
    finally:
        ext.stop()
        await api.delete_pods(NAMESPACE)


IDLE_SECONDS = 5.0


async def _idle_rates(procs: dict[str, int | None]) -> dict[str, float]:
    """Each process's CPU cores over IDLE_SECONDS of no scheduling."""
    before = {k: cpu_seconds(p) for k, p in procs.items()}
    await asyncio.sleep(IDLE_SECONDS)
    return {k: (cpu_seconds(p) - before[k]) / IDLE_SECONDS for k, p in procs.items()}


def _profile(pid: int | None, into: Path | None, name: str) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the extender into ``into/NAME.txt`` (collapsed stacks), if asked."""
    if pid is None or into is None:
        return None
    into.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"
    argv = [str(spy), "record", "-p", str(pid), "-r", "200", "--format", "raw", "--gil"]
    argv += ["-o", str(into / f"{name}.txt")]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _scrape(api: Api, url: str) -> str:
    async with api.session.get(url) as resp:
        return await resp.text()


def _ms(h: Histogram, q: float) -> str:
    v = quantile(h, q)
    return "-" if math.isnan(v) else f"{v * 1000:.1f}"


def report(results: list[Result], nodes: int, pods: int, ratios: Mapping[str, float]) -> list[str]:
    """Prints the table and the round's ``ratios`` (``round_ratios``); returns the
    over-admissions (``judge_rounds`` judges the ratios' targets)."""
    by = {r.config.name: r for r in results}
    alone = by.get("alone")
    print(f"\n{nodes} nodes x {pods} pods (load average {loadavg()})")
    print(
        "config                 pods/s avg   p50   p90   p99  overall  vs alone | "
        "attempt p50/p99 ms | SLI p50/p99 ms | ext filter/prio/bind p50 ms | failed attempts"
        " | over-admitted"
    )
    for r in results:
        s = summary(r.rates)
        vs_alone = f"{r.average / alone.average:8.2f}" if alone and alone.average else "       -"
        ext = "/".join(
            _ms(r.ext[v], 0.5) if v in r.ext else "-" for v in ("filter", "prioritize", "bind")
        )
        over = "-" if r.over is None else f"{len(r.over)} nodes"
        print(
            f"{r.config.name:22s} {s.average:10.1f} {s.percentiles[50]:5.0f} "
            f"{s.percentiles[90]:5.0f} {s.percentiles[99]:5.0f} {r.overall:8.1f} {vs_alone} | "
            f"{_ms(r.attempt, 0.5):>7s}/{_ms(r.attempt, 0.99):<8s} | "
            f"{_ms(r.sli, 0.5):>6s}/{_ms(r.sli, 0.99):<7s} | {ext:>27s} | "
            f"{r.retried:15.0f} | {over}"
        )
    print("\nCPU seconds over the measured phase (ms per pod):")
    names = ("kube-scheduler", "kube-apiserver", "etcd", "extender", "feed", "bench")
    print("config                 " + " ".join(f"{n:>16s}" for n in names))
    for r in results:
        cells = " ".join(
            f"{r.cpu.get(n, 0):7.1f} ({1000 * r.cpu.get(n, 0) / r.scheduled:5.2f})" for n in names
        )
        print(f"{r.config.name:22s} {cells}")
    print(
        "\nCPU cores each process used idle (no pod to schedule: the reports, the watches, the API"
        "\nserver's upkeep), and CPU ms per pod beyond that rate over the measured phase:"
    )
    print("config                 " + " ".join(f"{n:>16s}" for n in names))
    for r in results:
        cells = " ".join(f"{r.idle.get(n, 0):7.3f} ({r.per_pod_net(n):5.2f})" for n in names)
        print(f"{r.config.name:22s} {cells}")
    print("\nAPI server over the measured phase, per pod: requests (not watches), pod watch events")
    print("sent to all watchers and their KB")
    for r in results:
        per = {k: v / r.scheduled for k, v in r.api.items()}
        print(
            f"{r.config.name:22s} {per['requests']:6.2f} requests  {per['pod events']:5.2f} events"
            f"  {per['pod event bytes'] / 1000:6.2f} KB"
        )
    counted = [r for r in results if r.ext_counts]
    if counted:
        print(
            "\nCarico per pod: requests by verb, filters that held nodes, filters that waited,"
            " nodes its filters turned away"
        )
    for r in counted:
        print(
            f"{r.config.name:22s} "
            + "  ".join(f"{v / r.scheduled:5.2f} {k}" for k, v in r.ext_counts.items())
        )
    for r in results:
        if r.scheduled < pods:
            print(
                f"{r.config.name}: {r.scheduled} of {pods} pods scheduled within the budget; "
                "its figures are over those"
            )
    print("pods created at " + ", ".join(f"{r.config.name} {r.create_rate:.0f}/s" for r in results))
    # floor / trivial: what taking the reports and the pod watch costs, before Carico's logic
    targets = _targets(nodes)
    for name, ratio in ratios.items():
        goal = f" (target >= {targets[name]})" if name in targets else ""
        print(f"{name.replace('/', ' / ')}: {ratio:.2f}{goal}")
    missed = []
    for r in results:
        if r.over:
            worst = sorted(r.over.items(), key=lambda kv: kv[1][1] - kv[1][0])[:3]
            print(
                f"{r.config.name}: {len(r.over)} nodes over what their avail admits, e.g. "
                + ", ".join(f"{n} {b} bound > {a}" for n, (b, a) in worst)
            )
            if r.config.bind:
                missed.append(f"{r.config.name}: over-admitted {len(r.over)} nodes")
        elif r.over is not None:
            print(f"{r.config.name}: no node holds more pods than its avail admits")
    return missed


def _targets(nodes: int) -> dict[str, float]:
    """The ratios the issue sets a target for at this size, by ``round_ratios`` name."""
    targets = {f"{HEADLINE}/trivial": TARGET_TRIVIAL}
    if nodes in TARGET_ALONE:
        targets[f"{HEADLINE}/alone"] = TARGET_ALONE[nodes]
    return targets


def judge_rounds(rounds: list[dict[str, float]], nodes: int) -> list[str]:
    """Returns the targets missed: by the one round's ratios, or by their median over several
    rounds (printed, with each round's value)."""
    medians = median_ratios(rounds)
    several = len(rounds) > 1
    if several:
        print(f"\n{nodes} nodes, {len(rounds)} rounds (configurations in alternating order):")
        for name, (median, values) in medians.items():
            each = ", ".join(f"{v:.2f}" for v in values)
            print(f"  {name:16s} median {median:.2f} (rounds: {each})")
    return [
        f"{nodes} nodes: {name} {'median ' if several else ''}{medians[name][0]:.2f} < {target}"
        for name, target in _targets(nodes).items()
        if name in medians and medians[name][0] < target
    ]


async def run(args: argparse.Namespace) -> int:
    sizes = sorted(args.size)
    chosen = [c for c in CONFIGS if c.name in args.configs]
    work = args.floor_work_us
    print(
        f"load average at start {loadavg()}; {os.cpu_count()} CPUs; "
        f"configs {', '.join(c.name for c in chosen)}"
        + (f"; the floor spends {work:g} us of CPU a pod on purpose" if work else "")
    )
    with tempfile.TemporaryDirectory(prefix="carico-throughput-") as tmp:
        workdir = Path(tmp)
        cp = BenchControlPlane(workdir)
        cp.start()
        api = Api(cp)
        missed: list[str] = []
        try:
            await api.ensure_namespace(NAMESPACE)
            have = 0
            for nodes, pods in sizes:
                names = [f"node-{i:05d}" for i in range(nodes)]
                t0 = time.monotonic()
                await api.create_nodes(names[have:])
                have = max(have, nodes)
                print(f"\n{nodes} nodes ready in {time.monotonic() - t0:.0f} s", flush=True)
                avails = avails_for(names, pods, args.seed)
                ext = Extenders(
                    cp,
                    workdir,
                    args.report_every,
                    args.carico_flags.split(),
                    args.per_class,
                    args.floor_work_us,
                )
                rounds: list[dict[str, float]] = []
                for round_ in range(args.rounds):
                    results = []
                    # every other round in reverse order, so that a drift of the machine's load
                    # over the run does not favour the configurations measured first
                    for config in chosen if round_ % 2 == 0 else chosen[::-1]:
                        r = await measure(
                            api,
                            cp,
                            ext,
                            config,
                            names,
                            pods,
                            avails,
                            args.rate,
                            args.budget,
                            args.profile,
                        )
                        print(
                            f"  round {round_ + 1} {config.name}: {r.average:.1f} pods/s "
                            f"(overall {r.overall:.1f})",
                            flush=True,
                        )
                        results.append(r)
                    results.sort(key=lambda r: chosen.index(r.config))
                    rounds.append(round_ratios({r.config.name: r.average for r in results}))
                    missed += report(results, nodes, pods, rounds[-1])
                missed += judge_rounds(rounds, nodes)
        finally:
            await api.close()
            cp.stop()
    if missed:
        print("\nMISSED: " + "; ".join(missed))
        return 1
    return 0


def _size(text: str) -> tuple[int, int]:
    nodes, _, pods = text.partition("x")
    return int(nodes), int(pods)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--size", type=_size, action="append", help="NODESxPODS, repeatable (default 1000x5000)"
    )
    p.add_argument("--full", action="store_true", help="add 5000x10000")
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="pods created per second while kube-scheduler runs (0: all of them before it starts)",
    )
    p.add_argument(
        "--report-every",
        type=float,
        default=5.0,
        help="seconds between a node's capacity reports (stale after 3x)",
    )
    p.add_argument(
        "--per-class",
        action="store_true",
        help="per-class reports (today's agents: the extender decides by each node's fit for "
        "the pods' class) instead of one cost per pod",
    )
    p.add_argument(
        "--configs",
        default=",".join(c.name for c in CONFIGS),
        help="comma-separated subset of: " + ", ".join(c.name for c in CONFIGS),
    )
    p.add_argument(
        "--budget",
        type=float,
        default=240.0,
        help="seconds a configuration may take; a slower one is measured on the pods it "
        "scheduled by then",
    )
    p.add_argument("--rounds", type=int, default=1, help="measure every configuration N times")
    p.add_argument(
        "--floor-work-us",
        type=float,
        default=0.0,
        help="the floor also spends this much CPU per pod doing nothing useful (microseconds): "
        "what per-pod work an extender can afford",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--carico-flags", default="", help="more flags for carico extender (one string)")
    p.add_argument(
        "--profile",
        type=Path,
        help="sample each extender with py-spy (pip install py-spy) into DIR/CONFIG.txt",
    )
    args = p.parse_args()
    args.size = args.size or [(1000, 5000)]
    if args.full:
        args.size.append((5000, 10000))
    args.configs = set(args.configs.split(","))
    unknown = args.configs - {c.name for c in CONFIGS}
    if unknown:
        p.error(f"unknown configurations: {', '.join(sorted(unknown))}")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
