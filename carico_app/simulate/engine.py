"""Runs one scenario case under one scheduler: the step loop and the measurements (pure).

Each tick (``params.dt``): the job controller spends its API tokens (creating pods, recording
finished ones), the scheduler binds, the cluster advances one step, finished pods are reported to
the controller and the scheduler. Measured: each Job's completion time (submission to the status
update that counts its last success, as ``status.completionTime - status.startTime``), each pod's
completion time (bind, i.e. ``status.startTime``, to its container's exit, restarts included),
running pods per node and cluster utilisation every second, and for a resident server the
response latency of periodic probes.

Neighbours: ``cluster.py``, ``controlplane.py``, ``scheduler.py``, ``scenarios.py``; ``report.py``
formats what this returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from carico_app.simulate.cluster import RUNNING, Cluster
from carico_app.simulate.controlplane import JobController
from carico_app.simulate.params import ModelParams
from carico_app.simulate.scenarios import (
    SERVER_LATENCY_MEDIAN_MS,
    SERVER_LATENCY_SIGMA,
    Case,
    Scenario,
)
from carico_app.simulate.scheduler import Scheduler
from carico_app.simulate.schedulers import SchedulerSpec, make_scheduler

PERCENTILES = (25, 50, 75, 95, 99)


def distribution(values: np.ndarray) -> dict[str, float]:
    """mean, std, min, p25, p50, p75, p95, p99, max (NaN when empty)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    keys = ["mean", "std", "min", *(f"p{q}" for q in PERCENTILES), "max"]
    if len(v) == 0:
        return dict.fromkeys(keys, float("nan"))
    out = {"mean": float(v.mean()), "std": float(v.std()), "min": float(v.min())}
    for q, x in zip(PERCENTILES, np.percentile(v, PERCENTILES), strict=True):
        out[f"p{q}"] = float(x)
    out["max"] = float(v.max())
    return out


@dataclass
class JobResult:
    name: str
    pods: int
    completion_s: float  # NaN if it did not finish within max_seconds
    pod_completion: dict[str, float]


@dataclass
class CaseResult:
    scenario: str
    case: str
    scheduler: str
    seed: int
    job_completion_s: float  # all jobs of the case done
    jobs: list[JobResult]
    timeline_t: list[float]
    running_per_node: list[list[int]]  # [second][node]
    cpu_util: list[float]  # cluster mean utilisation, per second
    mem_util: list[float]
    oom_kills: int
    scheduler_attempts: int
    api_calls: int
    sim_seconds: float
    wall_seconds: float
    finished: bool
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    submitted_at: float = 0.0  # simulated time the jobs were submitted (after any lead)


def run_case(
    scenario: Scenario,
    case: Case,
    spec: SchedulerSpec,
    params: ModelParams,
    seed: int,
    scheduler: Scheduler | None = None,
) -> CaseResult:
    """Simulate one case under one scheduler. The same seed gives the same run.

    ``scheduler`` replaces the one ``spec`` names (tests use it to look inside); ``spec`` still
    decides the pods' requests and the label.
    """
    wall0 = time.perf_counter()
    seeds = np.random.SeedSequence([seed, scenario.cases.index(case)]).spawn(3)
    cluster = Cluster(params, scenario.nodes, np.random.default_rng(seeds[0]))
    sched = scheduler or make_scheduler(
        spec, params, scenario.nodes, np.random.default_rng(seeds[1])
    )
    probe_rng = np.random.default_rng(seeds[2])
    controller = JobController(params, cluster)

    server = -1
    if case.resident is not None:
        server = cluster.add_pod(case.resident, resident=True)
        cluster.bind(server, 0, startup=0.0)
    pending_jobs = list(case.jobs)
    steps_per_second = max(1, round(1.0 / params.dt))
    tl_t: list[float] = []
    running: list[list[int]] = []
    cpu: list[float] = []
    mem: list[float] = []
    util_acc = np.zeros(scenario.nodes)
    mem_acc = np.zeros(scenario.nodes)
    acc_n = 0
    lat_base: list[float] = []
    lat_job: list[float] = []
    max_steps = int(params.max_seconds / params.dt)
    submitted = False
    # A scheduler fed by agents (carico) gets an idle lead so that its agents have learned a
    # model before the jobs arrive, as deployed agents would have; measurements start at
    # submission, so the lead changes no result of the default schedulers.
    lead = float(getattr(sched, "lead_seconds", 0.0))
    submit_at = case.warmup + lead
    max_steps += int(lead / params.dt)

    for _ in range(max_steps):
        now = cluster.now
        if not submitted and now + 1e-9 >= submit_at:
            for js in pending_jobs:
                workload = js.workload.with_requests(spec.cpu_m, spec.mem)
                controller.submit(js.name, workload, js.pods, js.effective_parallelism)
            submitted = True
        for pod in controller.step(now):
            sched.pod_created(pod, now)
        sched.step(cluster, now)
        events = cluster.step()
        sched.pods_started(events.started, cluster.now)
        for pod in events.succeeded:
            controller.pod_succeeded(int(pod))
            sched.pod_terminated(int(pod), cluster.now)
        if server >= 0 and cluster.phase[server] == RUNNING:
            base = SERVER_LATENCY_MEDIAN_MS * float(
                np.exp(SERVER_LATENCY_SIGMA * probe_rng.normal())
            )
            # The server's thread runs at the node's fair share; waiting stretches its response.
            lat = base / max(float(cluster.share[0]), 1e-3)
            (lat_job if submitted else lat_base).append(lat)
        util_acc += cluster.util
        mem_acc += cluster.mem_used
        acc_n += 1
        if acc_n == steps_per_second:
            tl_t.append(round(cluster.now, 6))
            running.append([int(x) for x in cluster.running_count])
            cpu.append(float(util_acc.mean() / acc_n))
            mem.append(float(mem_acc.mean() / acc_n))
            util_acc[:] = 0
            mem_acc[:] = 0
            acc_n = 0
        if submitted and controller.done:
            break

    jobs = []
    for job in controller.jobs:
        pods = np.asarray(job.pods, dtype=np.int64)
        times = cluster.exited_at[pods] - cluster.bound_at[pods] if len(pods) else np.array([])
        jobs.append(
            JobResult(
                job.name,
                job.completions,
                (job.complete_at - job.submitted_at) if job.complete_at is not None else np.nan,
                distribution(times),
            )
        )
    finished = controller.done
    total = max((j.completion_s for j in jobs), default=float("nan")) if finished else np.nan
    latency = {}
    if server >= 0:
        latency = {
            "baseline": _latency(np.asarray(lat_base)),
            "during_job": _latency(np.asarray(lat_job)),
        }
    return CaseResult(
        scenario=scenario.name,
        case=case.label,
        scheduler=spec.label,
        seed=seed,
        job_completion_s=float(total),
        jobs=jobs,
        timeline_t=tl_t,
        running_per_node=running,
        cpu_util=cpu,
        mem_util=mem,
        oom_kills=cluster.oom_kills,
        scheduler_attempts=getattr(sched, "attempts", 0),
        api_calls=controller.api_calls,
        sim_seconds=cluster.now,
        wall_seconds=time.perf_counter() - wall0,
        finished=finished,
        latency_ms=latency,
        submitted_at=submit_at,
    )


def _latency(v: np.ndarray) -> dict[str, float]:
    if len(v) == 0:
        return {}
    qs = np.percentile(v, [50, 90, 95, 99])
    return {
        "min": float(v.min()),
        "p50": float(qs[0]),
        "p90": float(qs[1]),
        "p95": float(qs[2]),
        "p99": float(qs[3]),
        "max": float(v.max()),
    }
