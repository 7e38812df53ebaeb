"""The chaos soak on the e2e tier's real control plane (docs/testing.md#chaos-soak).

:class:`SoakBed` puts a pool of simulated nodes (a fake kubelet of its own: no containers run)
beside a control plane, with a fake procfs per node, a real ``carico agent`` per node, a real
``carico aggregator`` and the real ``carico extender`` in repack apply mode, which the real
kube-scheduler calls. Each agent reaches the extender and the aggregator through a
:class:`tcp_proxy.TcpProxy` of its own, so that its connections can be cut.

:meth:`SoakBed.run` drives a mixed workload (Jobs, Deployments scaled up and down, three
priorities) for the configured time while the seeded fault schedule (soak_schedule.py) SIGKILLs
and restarts the extender, the aggregator and agents, SIGSTOPs agents, cuts an agent's
connections, restarts kube-scheduler, etcd and the API server, and asks for repack plans. An
observer records what the invariants need (soak_invariants.py, soak_memory.py): the pods'
bindings and requested totals (a pod watch), waiting pods and the extender's room, reservations
and plan slots (its API), every component's RSS (/proc). The extender's own bind decision lines
(JSON log) say what each bind was decided on. After the workload, the bed waits for every Job to
complete and every Deployment to be ready, then checks everything and returns a report.

Faults are carried out on the calling thread: the control plane's processes die with the thread
that started them (PR_SET_PDEATHSIG), so restarts must come from the thread that outlives them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from e2e_agents import AgentProcess, AggregatorProcess
from e2e_controlplane import ControlPlane, free_ports, wait_for
from e2e_extender import ExtenderProcess
from fake_kubelet import RUN_SECONDS_ANNOTATION, FakeKubelet, NodeSpec
from fake_procfs import FakeProcfs
from kubernetes.client.rest import ApiException
from soak_invariants import (
    Binding,
    LoadSample,
    PendingSample,
    PodSpan,
    Recovery,
    ReservationSample,
    check_binds,
    check_budget,
    check_capacity,
    check_pending,
    check_recoveries,
    check_reservation_ttl,
    check_reserved,
    check_slot_ttl,
    check_workloads,
    parse_decision,
    recovery_summary,
)
from soak_memory import judge, parse_vm_rss
from soak_schedule import (
    CUT_AGENT,
    FAULT_KINDS,
    KILL_AGENT,
    KILL_AGGREGATOR,
    KILL_EXTENDER,
    PAUSE_AGENT,
    REPACK,
    RESTART_APISERVER,
    RESTART_ETCD,
    RESTART_SCHEDULER,
    Fault,
    fault_schedule,
    format_schedule,
)
from tcp_proxy import TcpProxy

from carico_app.schedconfig import CARICO_PROFILE, ExtenderConfig
from repack.problem.snapshot import parse_resource_quantity
from scheduler_ext.slots import DEFAULT_SLOT_TTL

POOL_LABEL = "carico.io/soak-pool"
PRIORITIES = {"soak-low": 100, "soak-mid": 1000, "soak-high": 10000}
# Small enough that requests fill nodes before Carico's measured room does at times: pods then
# wait on requests, and the repacker has pods to place by moving others.
NODE_CPU, NODE_MEMORY = "3", "16Gi"
GUARDED = "web"  # the Deployment a PodDisruptionBudget protects
GUARD_MIN_AVAILABLE = 1
# Deployments: name -> (priority class, first replicas, cpu, memory)
DEPLOYMENTS = {
    GUARDED: ("soak-high", 2, "500m", "512Mi"),
    # Big enough that requests, not only Carico's room, leave pods pending at times: the repack
    # plans then have pods to place (the Unschedulable trigger and POST /repack alike).
    "api": ("soak-mid", 2, "1500m", "2Gi"),
    "batchd": ("soak-low", 1, "250m", "256Mi"),
}


@dataclass
class SoakOptions:
    minutes: float = 10.0
    seed: int = 1
    nodes: int = 3
    mean_gap_s: float = 20.0
    warmup_s: float = 15.0
    quiet_s: float = 20.0
    kinds: tuple[str, ...] = FAULT_KINDS
    stale_after_s: float = 5.0
    reservation_ttl_s: float = 60.0
    job_every_s: float = 8.0
    scale_every_s: float = 12.0
    sample_every_s: float = 1.0
    # Liveness bounds, far above what a healthy run needs on a loaded 2-core machine.
    pending_bound_s: float = 150.0
    recovery_bound_s: float = 90.0
    drain_s: float = 300.0
    # The memory verdict needs a process sampled this long after its warm-up.
    memory_warmup_s: float = 120.0
    memory_min_span_s: float = 300.0

    @property
    def duration_s(self) -> float:
        return self.minutes * 60.0


@dataclass
class Observations:
    """What the observer and the fault runner recorded (times: time.monotonic, wall for logs)."""

    bindings: dict[tuple[str, str], Binding] = field(default_factory=dict)
    # uid -> [pod, node, bound at, left Pending at] (wall seconds, as the watch first saw them)
    spans: dict[str, list[Any]] = field(default_factory=dict)
    load: list[LoadSample] = field(default_factory=list)
    pending: list[PendingSample] = field(default_factory=list)
    reservations: list[ReservationSample] = field(default_factory=list)
    slots: list[tuple[float, float]] = field(default_factory=list)
    guard: list[tuple[float, int]] = field(default_factory=list)
    rss: dict[str, list[tuple[int, float, int]]] = field(default_factory=dict)
    recoveries: list[Recovery] = field(default_factory=list)
    faults: list[tuple[Fault, str]] = field(default_factory=list)  # (fault, outcome)
    repacks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    jobs_created: int = 0
    scalings: int = 0
    skipped: int = 0  # scheduled faults left out because earlier recoveries took the time


def _http(url: str, data: bytes | None = None, timeout: float = 5.0) -> Any:
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    return json.loads(body) if body[:1] in (b"{", b"[") else body.decode()


def _complete(job: Any) -> bool:
    conditions = (job.status.conditions if job.status else None) or []
    return any(c.type == "Complete" and c.status == "True" for c in conditions)


def _requests_of(pod: Any) -> dict[str, int]:
    need: dict[str, int] = {}
    for c in pod.spec.containers:
        for r, v in ((c.resources and c.resources.requests) or {}).items():
            need[r] = need.get(r, 0) + parse_resource_quantity(r, v)
    return need


class SoakBed:
    def __init__(
        self,
        control_plane: ControlPlane,
        api: kubernetes.client.ApiClient,
        workdir: Path,
        options: SoakOptions,
        say: Callable[[str], None] = print,
    ) -> None:
        self.cp = control_plane
        self.api = api
        self.options = options
        self.say = say
        self.core = kubernetes.client.CoreV1Api(api)
        self.apps = kubernetes.client.AppsV1Api(api)
        self.batch = kubernetes.client.BatchV1Api(api)
        self.workdir = workdir
        self.log_dir = workdir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.ns = f"soak-{uuid.uuid4().hex[:6]}"
        self.nodes = [f"{self.ns}-n{i}" for i in range(options.nodes)]
        self.allocatable = {
            n: {
                "cpu": parse_resource_quantity("cpu", NODE_CPU),
                "memory": parse_resource_quantity("memory", NODE_MEMORY),
            }
            for n in self.nodes
        }
        self.rng = random.Random(options.seed)
        self.obs = Observations()
        self.stop_workload = threading.Event()
        self.stop_observer = threading.Event()
        self._pods: dict[str, Any] = {}  # uid -> pod, the namespace as the watch sees it
        self._pods_lock = threading.Lock()
        self.jobs: list[str] = []
        self.completed_jobs: set[str] = set()  # seen Complete, then deleted
        self.replicas = {name: spec[1] for name, spec in DEPLOYMENTS.items()}
        self.kubelet: FakeKubelet | None = None
        self.procfs: FakeProcfs | None = None
        self.aggregator: AggregatorProcess | None = None
        self.extender: ExtenderProcess | None = None
        self.agents: dict[str, AgentProcess] = {}
        self.proxies: dict[str, tuple[TcpProxy, TcpProxy]] = {}
        self._threads: list[threading.Thread] = []
        self.started_at = 0.0

    # -- set-up and tear-down -------------------------------------------------------------------

    def extender_flags(self) -> list[str]:
        o = self.options
        return [
            "--repack-mode",
            "apply",
            "--repack-debounce",
            "5",
            "--repack-cooldown",
            "30",
            "--repack-time-limit",
            "5",
            "--repack-workers",
            "1",
            "--repack-plan-timeout",
            "180",
            "--repack-step-timeout",
            "60",
            "--repack-blocked-timeout",
            "30",
            "--stale-after",
            f"{o.stale_after_s:g}",
            "--reservation-ttl",
            f"{o.reservation_ttl_s:g}",
            "--log-level",
            "info",
            "--log-format",
            "json",
        ]

    def setup(self) -> None:
        core = self.core
        core.create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}
        )
        wait_for(
            lambda: bool(
                core.list_namespaced_service_account(
                    self.ns, field_selector="metadata.name=default"
                ).items
            ),
            60,
            f"ServiceAccount {self.ns}/default",
        )
        sched = kubernetes.client.SchedulingV1Api(self.api)
        for name, value in PRIORITIES.items():
            with contextlib.suppress(ApiException):  # 409: left by an earlier run
                sched.create_priority_class(
                    {
                        "apiVersion": "scheduling.k8s.io/v1",
                        "kind": "PriorityClass",
                        "metadata": {"name": name},
                        "value": value,
                    }
                )
        self.kubelet = FakeKubelet(
            self.api,
            [
                NodeSpec(n, cpu=NODE_CPU, memory=NODE_MEMORY, labels={POOL_LABEL: self.ns})
                for n in self.nodes
            ],
            heartbeat_s=2.0,
        )
        self.kubelet.start()
        self.procfs = FakeProcfs(self.workdir / "procfs", self.nodes, self.kubelet.running_pods)
        self.procfs.start()
        self.aggregator = AggregatorProcess(self.log_dir)
        self.aggregator.start()
        self.extender = ExtenderProcess(self.cp.kubeconfig, self.log_dir, *self.extender_flags())
        for node, port in zip(self.nodes, free_ports(len(self.nodes)), strict=True):
            to_ext = TcpProxy(("127.0.0.1", self.extender.grpc_port)).start()
            to_agg = TcpProxy(("127.0.0.1", self.aggregator.port)).start()
            self.proxies[node] = (to_ext, to_agg)
            self.agents[node] = AgentProcess(
                node,
                self.procfs.proc_root(node),
                self.cp.kubeconfig,
                to_ext.address,
                port,
                self.log_dir,
                to_agg.address,
                cgroup_root=self.procfs.cgroup_root(node),
            )
            self.agents[node].start()
        for agent in self.agents.values():
            wait_for(agent.ready, 120, f"agent {agent.node} /readyz")
        self.extender.start()
        self.cp.restart_scheduler(
            [ExtenderConfig(self.extender.url_prefix, node_cache_capable=True)]
        )
        since = time.monotonic()
        for node in self.nodes:
            wait_for(lambda node=node: self._fresh_since(node, since), 120, f"{node} reported")

    def teardown(self) -> None:
        """Undo everything; safe after a partial set-up."""
        self.stop_workload.set()
        self.stop_observer.set()
        for t in self._threads:
            t.join(30)
        for to_ext, to_agg in self.proxies.values():
            to_ext.restore()
            to_agg.restore()
        with contextlib.suppress(Exception):
            self.cp.restart_scheduler([])
        if self.extender is not None:
            self.extender.stop()
        for agent in self.agents.values():
            agent.stop()
        if self.aggregator is not None:
            self.aggregator.stop()
        for to_ext, to_agg in self.proxies.values():
            to_ext.stop()
            to_agg.stop()
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.ns)
            self.core.delete_collection_namespaced_pod(self.ns, grace_period_seconds=0)
        if self.kubelet is not None:
            self.kubelet.stop(delete_nodes=True)
        if self.procfs is not None:
            self.procfs.stop()
        sched = kubernetes.client.SchedulingV1Api(self.api)
        for name in PRIORITIES:
            with contextlib.suppress(ApiException):
                sched.delete_priority_class(name)

    # -- the extender's view --------------------------------------------------------------------

    def _ext(self) -> ExtenderProcess:
        assert self.extender is not None
        return self.extender

    def _fresh_since(self, node: str, since: float) -> bool:
        """The extender holds a fresh report of ``node`` received after ``since`` (monotonic)."""
        try:
            row = self._ext().nodes().get(node)
        except (urllib.error.URLError, OSError, ValueError):
            return False
        if not row or not row.get("reported") or row["stale"]:
            return False
        return time.monotonic() - row["data_age_seconds"] > since

    # -- the workload ---------------------------------------------------------------------------

    def _pod_spec(self, priority: str, cpu: str, memory: str, never: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "schedulerName": CARICO_PROFILE,
            "priorityClassName": priority,
            "nodeSelector": {POOL_LABEL: self.ns},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/soak:1",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        }
        if never:
            spec["restartPolicy"] = "Never"
        return spec

    def _create_deployments(self) -> None:
        for name, (priority, replicas, cpu, memory) in DEPLOYMENTS.items():
            labels = {"app": name}
            self.apps.create_namespaced_deployment(
                self.ns,
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": name},
                    "spec": {
                        "replicas": replicas,
                        "selector": {"matchLabels": labels},
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": self._pod_spec(priority, cpu, memory, never=False),
                        },
                    },
                },
            )
        kubernetes.client.PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(
            self.ns,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": f"keep-{GUARDED}"},
                "spec": {
                    "minAvailable": GUARD_MIN_AVAILABLE,
                    "selector": {"matchLabels": {"app": GUARDED}},
                },
            },
        )

    def _create_job(self) -> None:
        rng = self.rng
        name = f"job-{len(self.jobs)}"
        run_s = rng.uniform(2.0, 10.0)
        priority = rng.choice(list(PRIORITIES))
        cpu = rng.choice(("250m", "500m", "750m"))
        template = {
            "metadata": {"annotations": {RUN_SECONDS_ANNOTATION: f"{run_s:.1f}"}},
            "spec": self._pod_spec(priority, cpu, "256Mi", never=True),
        }
        self.batch.create_namespaced_job(
            self.ns,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {
                    "completions": rng.randint(3, 6),
                    "parallelism": rng.randint(1, 3),
                    # Preempted or evicted pods count as failures; the Job must still finish.
                    "backoffLimit": 1000,
                    "template": template,
                },
            },
        )
        self.jobs.append(name)
        self.obs.jobs_created += 1

    def _scale(self) -> None:
        name = self.rng.choice(list(DEPLOYMENTS))
        replicas = self.rng.randint(GUARD_MIN_AVAILABLE + 1 if name == GUARDED else 1, 4)
        self.apps.patch_namespaced_deployment_scale(name, self.ns, {"spec": {"replicas": replicas}})
        self.replicas[name] = replicas
        self.obs.scalings += 1

    def _reap_jobs(self) -> None:
        """Delete completed Jobs (their pods with them), remembering them as completed: the
        cluster's object count stays level, so the control plane's memory measures leaks, not
        the history of the run."""
        for job in self.batch.list_namespaced_job(self.ns).items:
            if _complete(job):
                self.completed_jobs.add(job.metadata.name)
                with contextlib.suppress(ApiException):
                    self.batch.delete_namespaced_job(
                        job.metadata.name, self.ns, propagation_policy="Background"
                    )

    def _workload_loop(self) -> None:
        next_job = next_scale = next_reap = time.monotonic()
        while not self.stop_workload.is_set():
            now = time.monotonic()
            try:
                if now >= next_reap:
                    self._reap_jobs()
                    next_reap = now + 5.0
                if now >= next_job:
                    self._create_job()
                    next_job = now + self.rng.uniform(0.5, 1.5) * self.options.job_every_s
                if now >= next_scale:
                    self._scale()
                    next_scale = now + self.rng.uniform(0.5, 1.5) * self.options.scale_every_s
            except Exception as exc:
                # The API server may be restarting (the client raises urllib3's errors then, which
                # are no OSError): try again at the next turn; never let the thread end.
                self.obs.errors.append(f"workload: {type(exc).__name__}")
                next_job = max(next_job, now + 2.0)
                next_scale = max(next_scale, now + 2.0)
            self.stop_workload.wait(0.5)

    # -- the observer ---------------------------------------------------------------------------

    def _record_pod(self, kind: str, pod: Any) -> None:
        uid = pod.metadata.uid
        self._record_span(kind, pod)
        if kind == "DELETED":
            self._pods.pop(uid, None)
        else:
            self._pods[uid] = pod
            node = pod.spec.node_name
            if node and (uid, node) not in self.obs.bindings:
                key = f"{pod.metadata.namespace}/{pod.metadata.name}"
                self.obs.bindings[uid, node] = Binding(time.monotonic(), key, uid, node)

    def _record_span(self, kind: str, pod: Any) -> None:
        uid, node = pod.metadata.uid, pod.spec.node_name
        span = self.obs.spans.get(uid)
        pending = kind != "DELETED" and pod.status is not None and pod.status.phase == "Pending"
        if span is None and node and pending:
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
            self.obs.spans[uid] = [key, node, time.time(), None]
        elif span is not None and span[3] is None and not pending:
            span[3] = time.time()

    def _lost_span_ends(self, listed: set[str]) -> None:
        """After a relist: pods gone while the watch was down left Pending then."""
        now = time.time()
        for uid, span in self.obs.spans.items():
            if span[3] is None and uid not in listed:
                span[3] = now

    def _load_sample(self) -> None:
        load: dict[str, dict[str, int]] = {}
        for pod in self._pods.values():
            phase = pod.status.phase if pod.status else ""
            if not pod.spec.node_name or phase in ("Succeeded", "Failed"):
                continue
            per = load.setdefault(pod.spec.node_name, {})
            for r, v in _requests_of(pod).items():
                per[r] = per.get(r, 0) + v
        if not self.obs.load or self.obs.load[-1].requested != load:
            self.obs.load.append(LoadSample(time.monotonic(), load))

    def _unrequested(self, pods: list[Any]) -> dict[str, dict[str, int]]:
        """Per pool node: allocatable minus the requests of the pods bound there."""
        left = {n: dict(alloc) for n, alloc in self.allocatable.items()}
        for pod in pods:
            phase = pod.status.phase if pod.status else ""
            node = pod.spec.node_name
            if node in left and phase not in ("Succeeded", "Failed"):
                for r, v in _requests_of(pod).items():
                    if r in left[node]:
                        left[node][r] -= v
        return left

    def _watch_loop(self) -> None:
        while not self.stop_observer.is_set():
            try:
                listed = self.core.list_namespaced_pod(self.ns)
                with self._pods_lock:
                    self._lost_span_ends({p.metadata.uid for p in listed.items})
                    self._pods.clear()
                    for pod in listed.items:
                        self._record_pod("ADDED", pod)
                    self._load_sample()
                w = kubernetes.watch.Watch()
                for event in w.stream(
                    self.core.list_namespaced_pod,
                    self.ns,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=30,
                ):
                    with self._pods_lock:
                        self._record_pod(event["type"], event["object"])
                        self._load_sample()
                    if self.stop_observer.is_set():
                        w.stop()
                        break
            except Exception as exc:  # the API server restarts; relist
                self.obs.errors.append(f"pod watch: {type(exc).__name__}")
                self.stop_observer.wait(1.0)

    def _pids(self) -> dict[str, int | None]:
        pids: dict[str, int | None] = {
            "extender": self._ext().proc.pid if self._ext().proc is not None else None,
            "aggregator": self.aggregator.pid if self.aggregator else None,
        }
        for node, agent in self.agents.items():
            pids[f"agent {node}"] = agent.pid
        for name, component in self.cp.components.items():
            pids[name] = component.pid
        return pids

    def _sample(self) -> None:
        now = time.monotonic()
        for name, pid in self._pids().items():
            if pid is None:
                continue
            try:
                rss = parse_vm_rss(Path(f"/proc/{pid}/status").read_text())
            except OSError:
                continue
            if rss is not None:
                self.obs.rss.setdefault(name, []).append((pid, now, rss))
        with self._pods_lock:
            pods = list(self._pods.values())
        guard = sum(
            1
            for p in pods
            if (p.metadata.labels or {}).get("app") == GUARDED
            and p.metadata.deletion_timestamp is None
            and p.status is not None
            and p.status.phase == "Running"
        )
        self.obs.guard.append((now, guard))
        wall = time.time()
        unbound = [
            p
            for p in pods
            if not p.spec.node_name
            and p.metadata.deletion_timestamp is None
            and (p.status is None or p.status.phase == "Pending")
        ]
        waiting = {
            f"{p.metadata.namespace}/{p.metadata.name}": wall
            - p.metadata.creation_timestamp.timestamp()
            for p in unbound
        }
        free = self._unrequested(pods)
        fits = {
            f"{p.metadata.namespace}/{p.metadata.name}": frozenset(
                n
                for n, left in free.items()
                if all(v <= left.get(r, v) for r, v in _requests_of(p).items())
            )
            for p in unbound
        }
        base = self._ext().base
        try:
            rows = _http(f"{base}/api/v1/nodes")
            room = {
                r["name"]: float(r["free"])
                for r in rows
                if r["name"] in self.agents and r.get("reported") and not r["stale"]
            }
            self.obs.pending.append(PendingSample(now, waiting, room, fits))
            ages = {r["pod"]: float(r["age_seconds"]) for r in _http(f"{base}/api/v1/reservations")}
            self.obs.reservations.append(ReservationSample(now, ages))
            metrics = _http(f"{base}/metrics")
            for line in metrics.splitlines():
                if line.startswith("carico_repack_plan_slots_open "):
                    self.obs.slots.append((now, float(line.split()[1])))
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            pass  # the extender is restarting: no sample of its view this time

    def _observe_loop(self) -> None:
        while not self.stop_observer.is_set():
            try:
                self._sample()
            except Exception as exc:
                self.obs.errors.append(f"observer: {exc!r}")
            self.stop_observer.wait(self.options.sample_every_s)

    # -- faults ---------------------------------------------------------------------------------

    def _timed(self, ready: Callable[[], bool], since: float) -> float | None:
        try:
            wait_for(ready, self.options.recovery_bound_s * 2, "recovery", interval_s=0.2)
        except AssertionError:
            return None
        return time.monotonic() - since

    def _restart_agent(self, node: str) -> float | None:
        agent = self.agents[node]
        t0 = time.monotonic()
        if agent.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent.pid, signal.SIGKILL)
        agent.component.stop(grace_s=0.0)
        agent.start()
        return self._timed(lambda: agent.ready() and self._fresh_since(node, t0), t0)

    def inject(self, fault: Fault) -> str:
        """Carry one fault out and wait for the recovery; returns an outcome for the report."""
        ext = self._ext()
        kind, node = fault.kind, fault.target
        seconds: float | None = None
        outcome = ""
        if kind == KILL_EXTENDER:
            t0 = time.monotonic()
            ext.kill()
            try:
                ext.start(timeout_s=self.options.recovery_bound_s * 2)
                seconds = time.monotonic() - t0
            except AssertionError as exc:
                outcome = f"not ready: {exc}"
        elif kind == KILL_AGGREGATOR:
            agg = self.aggregator
            assert agg is not None
            t0 = time.monotonic()
            if agg.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agg.pid, signal.SIGKILL)
            agg.component.stop(grace_s=0.0)
            try:
                agg.start(timeout_s=self.options.recovery_bound_s * 2)
                seconds = time.monotonic() - t0
            except AssertionError as exc:
                outcome = f"not ready: {exc}"
        elif kind == KILL_AGENT:
            seconds = self._restart_agent(node)
        elif kind == PAUSE_AGENT:
            agent = self.agents[node]
            agent.pause()
            time.sleep(fault.hold_s)
            agent.resume()
            t0 = time.monotonic()
            seconds = self._timed(lambda: self._fresh_since(node, t0), t0)
        elif kind == CUT_AGENT:
            for proxy in self.proxies[node]:
                proxy.cut()
            time.sleep(fault.hold_s)
            for proxy in self.proxies[node]:
                proxy.restore()
            t0 = time.monotonic()
            seconds = self._timed(lambda: self._fresh_since(node, t0), t0)
        elif kind == RESTART_SCHEDULER:
            t0 = time.monotonic()
            self.cp.restart_scheduler([ExtenderConfig(ext.url_prefix, node_cache_capable=True)])
            seconds = time.monotonic() - t0
        elif kind in (RESTART_ETCD, RESTART_APISERVER):
            t0 = time.monotonic()
            self.cp.kill_and_restart("etcd" if kind == RESTART_ETCD else "kube-apiserver")
            seconds = time.monotonic() - t0
        elif kind == REPACK:
            try:
                run = _http(f"{ext.base}/repack", json.dumps({"time_limit": 5}).encode(), 60)
                plan = run.get("plan") or {}
                outcome = (
                    f"run {run.get('id', '?')} {run.get('status', '?')}: "
                    f"{len(plan.get('moves', []))} move(s), "
                    f"{len(plan.get('placements', []))} placement(s)"
                )
            except urllib.error.HTTPError as exc:
                outcome = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                outcome = f"failed: {exc}"
            self.obs.repacks.append(outcome)
            return outcome
        self.obs.recoveries.append(Recovery(kind, node, seconds))
        if seconds is not None:
            outcome = outcome or f"ready again in {seconds:.1f}s"
        return outcome or "not ready again"

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        o = self.options
        faults = fault_schedule(
            o.seed,
            o.duration_s,
            self.nodes,
            mean_gap_s=o.mean_gap_s,
            warmup_s=o.warmup_s,
            quiet_s=o.quiet_s,
            kinds=o.kinds,
        )
        self.say(format_schedule(o.seed, faults))
        self._create_deployments()
        self._threads = [
            threading.Thread(target=self._watch_loop, daemon=True, name="soak-watch"),
            threading.Thread(target=self._observe_loop, daemon=True, name="soak-observer"),
            threading.Thread(target=self._workload_loop, daemon=True, name="soak-workload"),
        ]
        self.started_at = time.monotonic()
        for t in self._threads:
            t.start()
        last_start = self.started_at + o.duration_s - o.quiet_s
        for i, fault in enumerate(faults):
            if time.monotonic() > last_start:
                # Recoveries took longer than the gaps: the rest would run into the quiet tail.
                self.obs.skipped = len(faults) - i
                self.say(f"  {self.obs.skipped} fault(s) not injected: no time left")
                break
            delay = self.started_at + fault.at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            outcome = self.inject(fault)
            self.obs.faults.append((fault, outcome))
            self.say(f"  {fault.describe()}: {outcome}")
        rest = self.started_at + o.duration_s - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        self.stop_workload.set()
        ran_s = time.monotonic() - self.started_at
        self.say(f"workload stopped after {ran_s:.0f}s; draining")
        jobs, deployments = self._drain()
        self.stop_observer.set()
        for t in self._threads:
            t.join(60)
        return self.report(ran_s, jobs, deployments)

    def _workload_state(self) -> tuple[dict[str, bool], dict[str, tuple[int, int]]]:
        jobs = dict.fromkeys(self.completed_jobs, True)
        for job in self.batch.list_namespaced_job(self.ns).items:
            jobs[job.metadata.name] = _complete(job)
        for name in self.jobs:
            jobs.setdefault(name, False)  # a Job that vanished uncompleted is a lost Job
        deployments = {}
        for d in self.apps.list_namespaced_deployment(self.ns).items:
            deployments[d.metadata.name] = (
                d.status.ready_replicas or 0,
                self.replicas[d.metadata.name],
            )
        return jobs, deployments

    def _drain(self) -> tuple[dict[str, bool], dict[str, tuple[int, int]]]:
        deadline = time.monotonic() + self.options.drain_s
        while True:
            try:
                jobs, deployments = self._workload_state()
                if not check_workloads(jobs, deployments) or time.monotonic() > deadline:
                    return jobs, deployments
            except Exception:  # the API server restarted just before: try again
                if time.monotonic() > deadline:
                    raise
            time.sleep(2.0)

    def repack_executions(self) -> dict[str, int]:
        """From the extender's log: plans executed (completed, aborted) and their steps by
        action (evict, move, place), each step once."""
        counts: dict[str, int] = {}
        steps: set[str] = set()
        for path in sorted(self.log_dir.glob("extender-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if '"scheduler_ext.repack' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    msg = str(json.loads(line).get("msg", ""))
                    match = re.match(r"plan (\S+): step (\d+) \((\w+) ", msg)
                    if match:
                        steps.add(f"{match[1]}/{match[2]}/{match[3]}")
                    for state in ("completed", "aborted"):
                        if re.match(rf"repack #\d+ execution {state}", msg):
                            counts[state] = counts.get(state, 0) + 1
        for step in steps:
            action = step.rsplit("/", 1)[1]
            counts[action] = counts.get(action, 0) + 1
        return counts

    def decisions(self) -> list[Any]:
        out = []
        for path in sorted(self.log_dir.glob("extender-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                d = parse_decision(line)
                if d is not None and d.pod.startswith(f"{self.ns}/"):
                    out.append(d)
        return out

    def report(
        self, ran_s: float, jobs: dict[str, bool], deployments: dict[str, tuple[int, int]]
    ) -> dict[str, Any]:
        o = self.options
        binds = check_binds(self.decisions(), self.obs.bindings.values())
        memory = {}
        for name, samples in sorted(self.obs.rss.items()):
            v = judge(name, samples, warmup_s=o.memory_warmup_s, min_span_s=o.memory_min_span_s)
            if v is not None:
                memory[name] = {
                    "rss_mib": round(v.rss_mib, 1),
                    "slope_mib_per_min": round(v.slope, 3),
                    "late_slope_mib_per_min": round(v.late_slope, 3),
                    "judged_span_s": round(v.span_s),
                    "judged": v.judged,
                    "growing": v.growing,
                }
        spans = [PodSpan(p, uid, n, b, e) for uid, (p, n, b, e) in self.obs.spans.items()]
        violations = {
            "overcommit": binds.violations,
            # 2 s: the extender's pod watch may see a pod start that long before the soak's does.
            "reservations-short": check_reserved(
                self.decisions(), spans, o.reservation_ttl_s, lag_s=2.0
            ),
            "lost-workload": check_workloads(jobs, deployments),
            "reservation-ttl": check_reservation_ttl(
                self.obs.reservations, o.reservation_ttl_s, slack_s=o.sample_every_s + 2.0
            ),
            "slot-ttl": check_slot_ttl(self.obs.slots, DEFAULT_SLOT_TTL),
            "starved-pending": check_pending(self.obs.pending, o.pending_bound_s),
            "over-capacity": check_capacity(self.obs.load, self.allocatable),
            "pdb": check_budget(self.obs.guard, GUARD_MIN_AVAILABLE, f"keep-{GUARDED}"),
            "recovery": check_recoveries(self.obs.recoveries, o.recovery_bound_s),
            "memory-growth": [
                f"{n}: {m['late_slope_mib_per_min']} MiB/min"
                for n, m in memory.items()
                if m["growing"]
            ],
        }
        by_kind: dict[str, int] = {}
        for fault, _ in self.obs.faults:
            by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
        return {
            "seed": o.seed,
            "minutes_configured": o.minutes,
            "ran_seconds": round(ran_s),
            "nodes": len(self.nodes),
            "faults": by_kind,
            "faults_skipped": self.obs.skipped,
            "fault_log": [f"{f.describe()}: {outcome}" for f, outcome in self.obs.faults],
            "recoveries": recovery_summary(self.obs.recoveries),
            "binds": {
                "decisions": binds.decisions,
                "by_basis": binds.by_basis,
                "bindings_seen": len(self.obs.bindings),
                "stale_policy": [f"{d.pod} -> {d.node} ({d.stale})" for d in binds.stale_policy],
            },
            "workload": {
                "jobs": len(jobs),
                "jobs_completed": sum(jobs.values()),
                "deployments": {k: list(v) for k, v in deployments.items()},
                "scalings": self.obs.scalings,
            },
            "repacks": self.obs.repacks,
            "repack_executions": self.repack_executions(),
            "memory": memory,
            "violations": violations,
            "violation_count": sum(len(v) for v in violations.values()),
            "observer_errors": len(self.obs.errors),
            "samples": len(self.obs.pending),
        }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"chaos soak: seed {report['seed']}, {report['ran_seconds']}s of workload on "
        f"{report['nodes']} nodes",
        "faults: " + ", ".join(f"{k} {v}" for k, v in sorted(report["faults"].items())),
        "recovery (count / median / max s):",
    ]
    for kind, r in report["recoveries"].items():
        lines.append(f"  {kind:18} {r['count']:.0f} / {r['median']:.1f} / {r['max']:.1f}")
    b = report["binds"]
    lines.append(
        f"binds: {b['decisions']} decisions {b['by_basis']}, {b['bindings_seen']} bindings seen,"
        f" {len(b['stale_policy'])} by the stale-data policy"
    )
    lines += [f"  stale-policy bind: {s}" for s in b["stale_policy"]]
    w = report["workload"]
    lines.append(
        f"workload: {w['jobs_completed']}/{w['jobs']} jobs completed, "
        f"deployments {w['deployments']}, {w['scalings']} scalings"
    )
    lines.append(f"repack runs asked for: {report['repacks']}")
    lines.append(f"repack plans executed (apply): {report['repack_executions']}")
    lines.append("memory (RSS MiB, slope / late slope MiB/min, judged span s):")
    for name, m in report["memory"].items():
        lines.append(
            f"  {name:28} {m['rss_mib']:8.1f} {m['slope_mib_per_min']:+8.3f} "
            f"{m['late_slope_mib_per_min']:+8.3f} {m['judged_span_s']:6d}"
            + ("" if m["judged"] else " (too short to judge)")
        )
    lines.append(f"violations: {report['violation_count']}")
    for kind, items in report["violations"].items():
        lines += [f"  {kind}: {item}" for item in items]
    return "\n".join(lines)
