"""The ``carico`` scheduler of the simulator: the real agent, aggregator and extender code, wired.

Carico in production is kube-scheduler with Carico's extender attached, fed by one agent per node
and an aggregator. Here every part is the production object, driven on the simulation clock:

* per node, :class:`SimTelemetrySource` implements the agent's ``TelemetrySource`` over
  ``Cluster.telemetry(node)``, and an ``agent.pipeline.AgentPipeline`` (Dynamic EMA, batch,
  SubspaceModel, merge with the global model, capacity signal, cost/capacity estimator) turns its
  10 Hz samples into capacity reports;
* every ``exchange_interval`` seconds each agent's local model goes out as the agent's own
  ``LocalModel`` message (``agent.wire``), is validated and kept by the aggregator's own
  ``ModelStore`` (``aggregator.validate``, ``aggregator.store``), and the ``GlobalModel`` reply
  (``aggregator.wire``) comes back through the agent's decoding (fleet prior and global view);
* each report becomes the agent's ``NodeCapacity`` message and is ingested by the extender's
  ``CapacityTable``; filter and prioritize are ``scheduler_ext.decisions.Decider``; bind is
  ``Ledger.reserve`` (one pod-unit) followed by ``InMemoryCluster.bind`` (the ``--no-kube``
  cluster); when the simulated pod's container runs, the in-memory cluster moves the pod to
  Running and its watch event hands the reservation over (``Ledger.observe``); the node's next
  report, which lists the pod among those it counts, ends it (``Ledger.ingest``).

Only the transports (gRPC streams, HTTP) are left out: the messages are the same objects they
would carry. Nothing of Carico's logic is re-implemented here.

**Where it sits.** The simulator is part of the application layer, which may import the
services; this is the one module of it that does. ``schedulers.make_scheduler`` imports it only
when the ``carico`` scheduler is asked for, so the default-scheduler rows never load the services.
The aggregator's store is pure (it imports only ``carico`` and its own ``validate``), so it is
used as it is.

Neighbours: ``scheduler.py`` (``KubeScheduler`` and the ``Extender`` seam), ``cluster.py``
(telemetry and pod phases), ``engine.py`` (drives ``step``; ``lead_seconds`` gives the agents an
idle cluster to learn from before the jobs arrive, as agents that run all the time would have).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.pipeline import AgentPipeline, GlobalView, PipelineConfig
from agent.report_gate import GateConfig, ReportGate
from agent.telemetry import DEFAULT_FEATURES, PodUsage, Sample, cpu_feature
from agent.wire import (
    factor_from_wire,
    fleet_from_wire,
    local_model_message,
    node_capacity_message,
)
from aggregator.store import ModelStore
from aggregator.validate import validate_local_model
from aggregator.wire import global_message
from carico.pods import PodClass, Requests, workload_class
from carico_app.schedconfig import POD_INITIAL_BACKOFF_SECONDS, POD_MAX_BACKOFF_SECONDS
from carico_app.simulate.cluster import PENDING, RUNNING, STARTING, Cluster
from carico_app.simulate.params import ModelParams
from carico_app.simulate.scheduler import KubeScheduler, node_name
from scheduler_ext.capacity import DEFAULT_THRESHOLD, CapacityTable, Thresholds
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.decisions import Decider
from scheduler_ext.ledger import Ledger, PodState
from scheduler_ext.pods import ExemptionPolicy, PodFacts
from scheduler_ext.shape import ScoreShape
from scheduler_ext.waiting import WaitingPods

NAMESPACE = "sim"
USAGE_EVERY = 0.5  # seconds between reads of the pods' own usage (the agent's cgroup reader)


def pod_uid(pod: int) -> str:
    return f"uid-{pod}"


def pod_class(cluster: Cluster, pod: int) -> PodClass:
    """A simulated pod's workload class (its Job) and requests, as the real function makes them."""
    job = int(cluster.job[pod])
    owner = ("Job", f"job-{job}") if job >= 0 else None
    requests = Requests(float(cluster.req_cpu[pod]) / 1000.0, float(cluster.req_mem[pod]))
    name = workload_class(NAMESPACE, owner, None, [])
    return PodClass(name, requests)


@dataclass(frozen=True)
class CaricoSettings:
    """The deployment's settings, at the services' own defaults unless said otherwise."""

    features: tuple[str, ...] = DEFAULT_FEATURES
    exchange_interval: float = 5.0  # agent --exchange-interval default
    aggregator_ttl: float = 30.0  # aggregator --ttl default
    threshold: float = DEFAULT_THRESHOLD  # the extender's --threshold
    stale_after: float = 10.0
    reservation_ttl: float = 300.0
    weight: int = 1  # the extender's weight in the scheduler configuration
    # Agents running on the idle cluster before the jobs arrive (a deployed agent runs all the
    # time); one model half-life of the agent's default pipeline.
    lead_seconds: float = 30.0
    # The extender's --score-shape (None: its default, spreading on room).
    score_shape: ScoreShape | None = None


def _run_now(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never suspends (the in-memory cluster with no bind delay).

    The simulation is synchronous; an event loop per bind would cost more than the bind. A
    coroutine that completes on its first ``send`` raises StopIteration; one that suspends would
    need a loop, which this wiring does not provide, so that is an error.
    """
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("the in-memory cluster suspended; the simulator cannot await it")


class SimTelemetrySource:
    """The agent's ``TelemetrySource`` over one simulated node (clock = simulation time)."""

    def __init__(self, cluster: Cluster, node: int, feature_names: tuple[str, ...]) -> None:
        self.cluster = cluster
        self.node = node
        self._names = feature_names
        self._next_usage = 0.0
        self._running: frozenset[int] | None = None

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self._names

    def read(self, now: float) -> Sample:
        t = self.cluster.telemetry(self.node)
        values = {
            "cpu": cpu_feature(t.util, t.psi_cpu_some, True),
            "memory": t.mem_used,
            "cpu_pressure": t.psi_cpu_some,
            "memory_pressure": t.psi_mem_some,
            "io_pressure": t.psi_io_some,
        }
        features = np.array([values[n] for n in self._names], dtype=np.float64)
        c = self.cluster
        n = c.n_pods
        # The pod watch: the node's running workload pods with their classes, when they change.
        # A container restarting after an OOM kill leaves its pod Running in Kubernetes (it
        # comes back on the same node), so the watch still counts it.
        mine = np.flatnonzero((c.node[:n] == self.node) & (c.phase[:n] == RUNNING))
        back = np.flatnonzero(
            (c.node[:n] == self.node) & (c.phase[:n] == STARTING) & (c.restarts[:n] > 0)
        )
        counted = np.concatenate([mine, back])
        workload = frozenset(counted[~c.resident[counted]].tolist())
        running = None
        if workload != self._running:
            self._running = workload
            running = {pod_uid(p): pod_class(c, p) for p in workload}
        usage = None
        if now + 1e-9 >= self._next_usage:
            # The pods' cgroups, read once a second like the agent's cgroup reader.
            self._next_usage = now + USAGE_EVERY
            usage = {
                pod_uid(int(i)): PodUsage(float(c.cpu_used[i]), float(c.memory[i])) for i in mine
            }
        return Sample(
            features,
            psi_available=True,
            pods=t.pods_running,
            cpu_util=t.util,
            psi_cpu=t.psi_cpu_some,
            cores=float(c.cores[self.node]),
            memory_bytes=float(c.mem_total[self.node]),
            pod_usage=usage,
            running=running,
        )


class SimAgent:
    """One node's agent: its source, its pipeline and what it last told the others."""

    def __init__(
        self,
        name: str,
        source: SimTelemetrySource,
        config: PipelineConfig | None = None,
        gate: GateConfig | None = None,
    ) -> None:
        self.name = name
        self.source = source
        self.pipeline = AgentPipeline(source.feature_names, config)
        # The reports that reach the extender: a change at once, else a keepalive.
        self.gate = ReportGate(gate or GateConfig())
        self.pods: int | None = None
        self.sequence = 0
        self.exchange_sequence = 0
        self.reports = 0


class CaricoExtender:
    """The extender's decision code, ledger and in-memory cluster behind the simulator's seam."""

    def __init__(self, names: list[str], settings: CaricoSettings) -> None:
        self.weight = settings.weight
        self.table = CapacityTable(Thresholds(settings.threshold, settings.stale_after))
        exemptions = ExemptionPolicy()
        self.decider = Decider(self.table, exemptions, shape=settings.score_shape)
        self.ledger = Ledger(self.table, ttl=settings.reservation_ttl, exemptions=exemptions)
        self.cluster = InMemoryCluster(auto_create=True)
        self.names = names
        self.model: Cluster | None = None  # the simulated cluster, known from the first step
        self._now = 0.0
        # The extender service's pod watch: list, then every event into the ledger. The
        # in-memory cluster delivers events synchronously, so this needs no event loop.
        self.cluster.subscribe(self._on_pod_event)
        self.bound: dict[int, str] = {}  # simulated pod -> node, while Pending in the extender
        self.binds = 0
        self.bind_refusals = 0
        # (time, node, pods of the class that fit, data fresh) at every bind's decision: what
        # tests check.
        self.decisions: list[tuple[float, str, float, bool]] = []
        # The pods its filter turned away (docs/architecture.md#waking-turned-away-pods).
        self.waiting = WaitingPods()

    def facts(self, pod: int) -> PodFacts:
        klass = pod_class(self.model, pod) if self.model is not None else None
        return PodFacts(
            NAMESPACE,
            f"pod-{pod}",
            uid=pod_uid(pod),
            owner_kinds=("Job",),
            workload_class=klass.name if klass else "",
            requests=klass.requests if klass else Requests(),
        )

    def _on_pod_event(self, pod: PodState) -> None:
        self.ledger.observe(pod, self._now)

    def filter(self, pod: int, nodes: list[str], now: float) -> tuple[list[str], dict[str, str]]:
        facts = self.facts(pod)
        decision = self.decider.filter(facts, nodes, now)
        # What the service's filter records: the pods to wake once there is room.
        if decision.passed:
            self.waiting.passed(facts.key)
        elif decision.failed or decision.unresolvable:
            self.waiting.refused(facts, nodes, now)
        return decision.passed, {**decision.failed, **decision.unresolvable}

    def prioritize(self, pod: int, nodes: list[str], now: float) -> dict[str, int]:
        decision = self.decider.prioritize(self.facts(pod), nodes, now)
        return {h.Host: h.Score for h in decision.scores}

    def bind(self, pod: int, node: str, now: float) -> str:
        """What the service's bind does: reserve (capacity checked), then bind; undo on error."""
        self._now = now
        facts = self.facts(pod)
        fit = self.table.fit(node, facts.workload_class, facts.requests, now)
        # The pods of the class that fit (avail - reserved for a node without per-class data).
        free = fit.count if fit is not None else self.table.free.get(node, math.nan)
        fresh = self.table.is_fresh(node, now)
        result = self.ledger.reserve(facts, node, now)
        if not result.ok:
            self.bind_refusals += 1
            return result.error
        try:
            _run_now(self.cluster.bind(facts, node))
        except Exception as exc:  # BindError and anything the cluster raises: give the unit back
            self.ledger.undo(result)
            self.bind_refusals += 1
            return str(exc)
        self.binds += 1
        self.waiting.passed(facts.key)
        self.bound[pod] = node
        self.decisions.append((now, node, free, fresh))
        return ""

    def pods_left_pending(self, cluster: Cluster, now: float) -> None:
        """Move to Running the bound pods whose simulated container has started (or finished)."""
        self._now = now
        if not self.bound:
            return
        pods = np.fromiter(self.bound, dtype=np.int64, count=len(self.bound))
        phases = cluster.phase[pods]
        for pod in pods[(phases != PENDING) & (phases != STARTING)].tolist():
            del self.bound[pod]
            self.cluster.set_phase(self.facts(pod).key, "Running")

    def sweep(self, now: float) -> list[int]:
        """The service's periodic sweep: reservations past their TTL end; returns the pods it
        wakes (the annotation, a pod update for kube-scheduler's queue)."""
        self._now = now
        self.ledger.expire(now)

        def has_room(facts: PodFacts, names: list[str]) -> bool:
            return bool(self.decider.filter(facts, names, now).passed)

        return [int(f.name.removeprefix("pod-")) for f in self.waiting.due(now, has_room)]


class CaricoScheduler(KubeScheduler):
    """kube-scheduler's emulation with Carico's extender, fed by simulated agents."""

    def __init__(
        self,
        params: ModelParams,
        n_nodes: int,
        rng: np.random.Generator,
        settings: CaricoSettings | None = None,
        pipeline: PipelineConfig | None = None,
        prior_per_pod_cost: float | None = None,
        full_level: float | None = None,
        score_shape: ScoreShape | None = None,
        label: str = "carico",
        weight: int | None = None,
    ) -> None:
        self.settings = settings or CaricoSettings()
        if score_shape is not None:
            self.settings = dataclasses.replace(self.settings, score_shape=score_shape)
        if weight is not None:
            self.settings = dataclasses.replace(self.settings, weight=weight)
        self.ext = CaricoExtender([node_name(i) for i in range(n_nodes)], self.settings)
        # Carico's kube-scheduler runs the shipped configuration's pod back-off.
        params = dataclasses.replace(
            params,
            pod_initial_backoff=float(POD_INITIAL_BACKOFF_SECONDS),
            pod_max_backoff=float(POD_MAX_BACKOFF_SECONDS),
        )
        super().__init__(label, params, n_nodes, rng, extender=self.ext)
        self.lead_seconds = self.settings.lead_seconds
        if pipeline is None:
            # The agent's defaults at the simulator's sampling rate (10 Hz at dt = 0.1 s).
            pipeline = PipelineConfig(sample_hz=1.0 / params.dt)
            if prior_per_pod_cost is not None:
                pipeline = dataclasses.replace(pipeline, prior_per_pod_cost=prior_per_pod_cost)
            if full_level is not None:
                pipeline = dataclasses.replace(pipeline, full_level=full_level)
        self.pipeline_config = pipeline
        self.store = ModelStore(self.settings.aggregator_ttl, self.settings.features)
        self.global_version = 0
        self.agents: list[SimAgent] | None = None
        self._next_exchange = 0.0
        self._next_sweep = 0.0

    def _start_agents(self, cluster: Cluster) -> list[SimAgent]:
        return [
            SimAgent(
                name, SimTelemetrySource(cluster, i, self.settings.features), self.pipeline_config
            )
            for i, name in enumerate(self.names)
        ]

    def step(self, cluster: Cluster, now: float) -> None:
        if self.agents is None:
            self.agents = self._start_agents(cluster)
            self.ext.model = cluster
        for agent in self.agents:
            self._agent_tick(agent, now)
        if now + 1e-9 >= self._next_exchange:
            self._exchange(now)
            self._next_exchange = now + self.settings.exchange_interval
        self.ext.pods_left_pending(cluster, now)
        if now + 1e-9 >= self._next_sweep:
            for pod in self.ext.sweep(now):
                self.queue.pod_updated(pod, now)
            self._next_sweep = now + 1.0
        super().step(cluster, now)

    def _agent_tick(self, agent: SimAgent, now: float) -> None:
        sample = agent.source.read(now)
        pods = sample.pods
        # A pod event, as the agent's pod watch sees one: the running pods changed, even when
        # one started as another ended (the report made at it lists the pod that started).
        event = agent.pods is not None and (pods != agent.pods or sample.running is not None)
        agent.pods = pods
        report = agent.pipeline.step(now, sample, pods, event)
        if report is None or not agent.gate.why(report):
            return
        msg = node_capacity_message(agent.name, report, agent.source.feature_names, now)
        agent.sequence += 1
        msg.sequence = agent.sequence
        self.ext.ledger.ingest(msg, agent.name, now)
        agent.reports += 1

    def _exchange(self, now: float) -> None:
        """Every agent sends its model to the aggregator, then gets the global model back."""
        assert self.agents is not None
        self.store.expire(now)
        for agent in self.agents:
            local = agent.pipeline.local
            if local is None:
                continue
            est = agent.pipeline.estimator
            agent.exchange_sequence += 1
            message = local_model_message(
                agent.name,
                agent.exchange_sequence,
                now,
                local,
                agent.source.feature_names,
                est.per_pod_cost if est.cost_learned else None,
                agent.pipeline.classes.learner.all_learned(),
            )
            entry, names = validate_local_model(message, self.store.feature_names, now)
            self.store.offer(entry, names)
        view = self.store.compute(now) if len(self.store) else None
        self.global_version += 1
        reply = global_message(view, self.global_version, "sim-aggregator", now)
        fleet = fleet_from_wire(reply.priors)
        for agent in self.agents:
            agent.pipeline.set_fleet_classes(fleet)
            if reply.priors.has_per_pod_cost:
                agent.pipeline.set_fleet_prior(reply.priors.median_per_pod_cost)
            if reply.has_model:
                model = factor_from_wire(reply.model, agent.source.feature_names)
                agent.pipeline.set_global(
                    GlobalView(model, max(int(reply.contributing_nodes), 1), now)
                )
