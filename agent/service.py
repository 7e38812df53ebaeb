"""The agent as a running service: the sampling loop and its network neighbours on one event loop.

The sampler ticks at ``sample_hz`` on an absolute schedule (a slow tick is skipped, never queued)
and runs :class:`agent.pipeline.AgentPipeline`; it never awaits the network. Everything else runs
beside it: the model exchange and the capacity stream (:mod:`agent.grpc_client`), the pod watch
(:mod:`agent.kube_watch`, in a thread) and the ops endpoint. The standalone mode has none of those
and prints one JSON object per report instead. Modules for the optional parts are imported only when
used (asyncio included: the standalone agent runs without an event loop), which keeps the
standalone agent small and cheap.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from agent.class_capacity import CapacityView
    from agent.metrics import AgentStatus
    from agent.wire import GlobalWorkload

from agent.pipeline import AgentPipeline, CapacityReport, GlobalView, PipelineConfig
from agent.report_gate import GateConfig, ReportGate
from agent.telemetry import TelemetrySource
from carico.pods import PodClass

log = logging.getLogger(__name__)


@dataclass
class ServiceConfig:
    node: str
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    standalone: bool = False
    aggregator: str = ""
    extender: str = ""
    exchange_interval: float = 5.0
    rpc_timeout: float = 2.0
    backoff_max: float = 30.0
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 0
    duration: float = 0.0  # 0 = run until cancelled
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    kube: bool = False  # count pods with an API watch (else: from the source, or 0)
    kubeconfig: str = ""
    churn_hint: str = "none"  # "cgroup": inotify on the kubepods cgroup tree
    cgroup_root: str = "/sys/fs/cgroup"
    report_gate: GateConfig = field(default_factory=GateConfig)


class PodState:
    """The pod count, whether a pod event happened since the sampler last looked, and the running
    pods' classes when they changed. Updated on the event loop (the pod watch's thread hands its
    updates over with ``call_soon_threadsafe``), read by the sampler on the same loop."""

    def __init__(self, known: bool = False) -> None:
        self.count = 0
        self.event = False
        self.known = known  # False until the pod watch has listed the node's pods
        self.classes: Mapping[str, PodClass] | None = None  # new classes not yet taken

    def update(
        self, count: int, changed: bool, classes: Mapping[str, PodClass] | None = None
    ) -> None:
        self.count, self.known = count, True
        self.event = self.event or changed
        if classes is not None:
            self.classes = classes

    def hint(self, name: str = "") -> None:
        """A churn hint (a pod cgroup came or went): the count is unchanged, the hold starts."""
        self.event = True

    def take_event(self) -> bool:
        event, self.event = self.event, False
        return event

    def take_classes(self) -> Mapping[str, PodClass] | None:
        """The running pods' classes if they changed since the last call, else None."""
        classes, self.classes = self.classes, None
        return classes


def _num(v: float) -> float | None:
    return round(v, 6) if math.isfinite(v) else None


def classes_json(view: CapacityView, names: tuple[str, ...]) -> dict[str, Any]:
    """The per-class view: headroom per feature, and each running class's footprint (CPU demand
    in cores, memory in bytes), where it comes from and its pods here."""
    return {
        "full_level": view.full_level,
        "headroom": {n: _num(h) for n, h in zip(names, view.headroom, strict=True)},
        "classes": [
            {
                "class": c.footprint.name,
                "cpu_cores": _num(c.footprint.footprint.cpu),
                "memory_bytes": _num(c.footprint.footprint.memory),
                "source": c.footprint.source,
                "pods": c.pods,
            }
            for c in view.classes
        ],
    }


def report_json(node: str, report: CapacityReport, names: tuple[str, ...], ts: float) -> str:
    """The standalone output line (NaN becomes null: JSON has no NaN)."""
    line: dict[str, Any] = {
        "ts": round(ts, 3),
        "node": node,
        "avail": _num(report.avail),
        "k": _num(report.k),
        "capacity": _num(report.capacity),
        "per_pod_cost": _num(report.per_pod_cost),
        "pods": report.pods,
        "mode": report.mode,
        "y": {n: _num(v) for n, v in zip(names, report.features, strict=True)},
        "psi_available": report.psi_available,
        "churn": report.churn,
        "global_model": report.global_model,
        "samples_missing": report.samples_missing,
    }
    if report.classes is not None:
        line["per_class"] = classes_json(report.classes, names)
    return json.dumps(line, allow_nan=False)


class AgentService:
    """Owns the pipeline and the tasks around it."""

    def __init__(
        self,
        config: ServiceConfig,
        source: TelemetrySource,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        out: IO[str] | None = None,
        pods: PodState | None = None,
    ) -> None:
        self.config = config
        self.source = source
        self.monotonic = monotonic
        self.wall = wall
        self.out = out
        # Without a pod watch the count is 0 (or the source's) from the start.
        self.pods = pods or PodState(known=not config.kube)
        self.pipeline = AgentPipeline(source.feature_names, config.pipeline)
        self.exchange: Any = None  # agent.grpc_client.ExchangeClient when configured
        self.reporter: Any = None  # agent.grpc_client.CapacityReporter when configured
        # Which reports go to the extender: a material change, else a keepalive.
        self.gate = ReportGate(config.report_gate)
        self.watcher: Any = None  # agent.kube_watch.PodWatcher when configured
        self.churn_hint: Any = None  # agent.cgroup_watch.CgroupChurnHint when configured
        self.reports = 0
        self.ticks_skipped = 0
        self.exchange_sequence = 0
        self.global_refused = 0
        self.last_report: CapacityReport | None = None
        # The last accepted global model, passed on to the extender for its dashboard.
        self.global_workload: GlobalWorkload | None = None

    # -- the sampling loop --------------------------------------------------------------------

    def tick(self) -> CapacityReport | None:
        """Take one sample and run the pipeline (what the sampler does at every tick)."""
        now = self.monotonic()
        sample = self.source.read(now)
        classes = self.pods.take_classes()
        if classes is not None:
            self.pipeline.set_pods(now, classes)
        pods = sample.pods
        if pods is None and self.pods.known:
            pods = self.pods.count
        report = self.pipeline.step(now, sample, pods, self.pods.take_event())
        if report is not None:
            self._emit(report)
        return report

    def _emit(self, report: CapacityReport) -> None:
        self.reports += 1
        self.last_report = report
        ts = self.wall()
        if self.out is not None:
            self.out.write(report_json(self.config.node, report, self.source.feature_names, ts))
            self.out.write("\n")
            self.out.flush()
        if self.reporter is not None and self.gate.why(report):
            from agent.wire import node_capacity_message

            self.reporter.publish(
                node_capacity_message(
                    self.config.node,
                    report,
                    self.source.feature_names,
                    ts,
                    self.global_workload,
                )
            )

    def _next_tick(self, next_at: float, period: float) -> tuple[float, float]:
        """(next tick time, seconds to sleep) on an absolute schedule."""
        next_at += period
        now = self.monotonic()
        if now > next_at:  # fell behind (a stalled host): skip ticks, keep the phase
            skipped = math.ceil((now - next_at) / period)
            self.ticks_skipped += skipped
            next_at += skipped * period
        return next_at, max(0.0, next_at - now)

    async def sample_forever(self) -> None:
        import asyncio

        period = 1.0 / self.config.pipeline.sample_hz
        next_at = self.monotonic()
        while True:
            self.tick()
            next_at, delay = self._next_tick(next_at, period)
            await asyncio.sleep(delay)

    def run_blocking(self) -> int:
        """The standalone agent without an event loop: just the sampler on this thread.

        An asyncio wake-up costs several times a ``time.sleep`` one; at 10 Hz that difference is
        a measurable share of the agent's CPU budget, and standalone has nothing else to run.
        """
        period = 1.0 / self.config.pipeline.sample_hz
        start = next_at = self.monotonic()
        end = start + self.config.duration if self.config.duration else math.inf
        while True:
            self.tick()
            next_at, delay = self._next_tick(next_at, period)
            if next_at >= end:
                return 0
            time.sleep(delay)

    # -- the model exchange -------------------------------------------------------------------

    def build_local_model(self) -> Any:
        from agent.wire import local_model_message

        local = self.pipeline.local
        if local is None:
            return None
        self.exchange_sequence += 1
        est = self.pipeline.estimator
        return local_model_message(
            self.config.node,
            self.exchange_sequence,
            self.wall(),
            local,
            self.source.feature_names,
            est.per_pod_cost if est.cost_learned else None,
            learned_classes=self.pipeline.classes.learner.all_learned(),
        )

    def apply_global(self, reply: Any) -> None:
        """Use a GlobalModel reply: the model for the merge, the fleet prior for the cost, the
        fleet's per-class medians for the classes this node has not measured."""
        from agent.wire import factor_from_wire, fleet_from_wire, global_workload_of

        if reply.priors.has_per_pod_cost:
            self.pipeline.set_fleet_prior(reply.priors.median_per_pod_cost)
        self.pipeline.set_fleet_classes(fleet_from_wire(reply.priors))
        if not reply.has_model:
            return
        try:
            model = factor_from_wire(reply.model, self.source.feature_names)
        except ValueError:
            self.global_refused += 1
            raise
        view = GlobalView(model, max(int(reply.contributing_nodes), 1), self.monotonic())
        if self.pipeline.set_global(view):
            self.global_workload = global_workload_of(reply, model, view.received_at)

    # -- readiness and the whole service ------------------------------------------------------

    def status(self) -> AgentStatus:
        """The counters and the latest report, as the metrics show them."""
        from agent.metrics import AgentStatus, ClientStatus

        exchange = reporter = None
        if self.exchange is not None:
            ex = self.exchange
            exchange = ClientStatus(ex.exchanges, ex.errors, ex.connected)
        if self.reporter is not None:
            rp = self.reporter
            reporter = ClientStatus(rp.sent, rp.errors, rp.connected)
        usage = getattr(self.source, "usage", None)  # ProcSource's cgroup reader, when reading
        return AgentStatus(
            node=self.config.node,
            feature_names=tuple(self.source.feature_names),
            last_report=self.last_report,
            samples=self.pipeline.samples,
            samples_missing=self.pipeline.samples_missing,
            reports=self.reports,
            ticks_skipped=self.ticks_skipped,
            global_refused=self.global_refused,
            exchange=exchange,
            reporter=reporter,
            churn_hints=None if self.churn_hint is None else self.churn_hint.events,
            pod_watch_errors=None if self.watcher is None else self.watcher.errors,
            learned_classes=tuple(self.pipeline.classes.learner.all_learned()),
            pod_usage=None if usage is None else (usage.pods, usage.skipped),
        )

    def ready(self) -> str | None:
        if self.config.kube and not self.pods.known:
            return "pod watch has not listed this node's pods yet"
        if self.last_report is None:
            return "no capacity report yet"
        return None

    async def run(self) -> int:
        import asyncio
        import contextlib

        cfg = self.config
        tasks: list[asyncio.Task[None]] = []
        ops = watcher = None
        try:
            if cfg.churn_hint == "cgroup":
                from agent.cgroup_watch import CgroupChurnHint

                self.churn_hint = CgroupChurnHint(cfg.cgroup_root, self.pods.hint)
                tasks.append(asyncio.create_task(self.churn_hint.run(), name="churn-hint"))
            if cfg.metrics_port:
                from prometheus_client import CollectorRegistry

                from agent.metrics import AgentCollector
                from carico.http_ops import start_ops_server

                registry = CollectorRegistry()
                registry.register(AgentCollector(self.status))
                ops = await start_ops_server(
                    cfg.metrics_host, cfg.metrics_port, registry, self.ready
                )
                log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, ops.port)
            if cfg.kube:
                watcher = self._start_pod_watch()
            if cfg.aggregator or cfg.extender:
                tasks += self._start_clients()
            tasks.append(asyncio.create_task(self.sample_forever(), name="sampler"))
            done, _ = await asyncio.wait(
                tasks,
                timeout=cfg.duration or None,
                return_when=asyncio.FIRST_EXCEPTION,
            )
            for task in done:
                task.result()  # a crashed task ends the agent with its error
            return 0
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if watcher is not None:
                watcher.stop()
            if ops is not None:
                await ops.close()

    def _start_pod_watch(self) -> Any:
        import asyncio

        from agent.kube_watch import PodWatcher, load_api

        loop = asyncio.get_running_loop()

        def on_pods(  # called on the watch thread
            count: int, changed: bool, classes: Mapping[str, PodClass] | None
        ) -> None:
            # The watcher hands over a dict of its own (PodTable.classes), never touched again
            # on its thread: the loop thread may keep it.
            loop.call_soon_threadsafe(self.pods.update, count, changed, classes)

        watcher = PodWatcher(load_api(self.config.kubeconfig or None), self.config.node, on_pods)
        watcher.start()
        self.watcher = watcher
        return watcher

    def _start_clients(self) -> list[asyncio.Task[None]]:
        import asyncio

        from agent.backoff import Backoff
        from agent.grpc_client import CapacityReporter, ExchangeClient

        cfg = self.config
        creds = None
        if cfg.tls_ca:
            from carico.tls import grpc_channel_credentials

            creds = grpc_channel_credentials(cfg.tls_ca, cfg.tls_cert or None, cfg.tls_key or None)
        tasks = []
        if cfg.aggregator:
            self.exchange = ExchangeClient(
                cfg.aggregator,
                self.build_local_model,
                self.apply_global,
                credentials=creds,
                interval=cfg.exchange_interval,
                timeout=cfg.rpc_timeout,
                backoff=Backoff(initial=min(1.0, cfg.exchange_interval), maximum=cfg.backoff_max),
            )
            tasks.append(asyncio.create_task(self.exchange.run(), name="exchange"))
        if cfg.extender:
            self.reporter = CapacityReporter(
                cfg.extender,
                credentials=creds,
                connect_timeout=cfg.rpc_timeout,
                backoff=Backoff(initial=0.5, maximum=cfg.backoff_max),
            )
            tasks.append(asyncio.create_task(self.reporter.run(), name="reporter"))
        return tasks
