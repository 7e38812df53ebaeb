"""Kubernetes' Job controller, emulated on the simulation clock (pure, no I/O).

What shapes job throughput besides the nodes is the controller's API client: kube-controller-
manager talks to the API server at 20 requests/s with a burst of 30 by default, and every pod of
a Job costs the controller at least two calls: the create, and the patch that removes the
``batch.kubernetes.io/job-tracking`` finalizer once the pod has finished (plus status updates).
The controller syncs each Job at most once a second; a sync creates up to 500 missing pods
(``parallelism`` minus active), then records finished pods (status update, finalizer patches,
status update). The Job is complete at the status update that counts its last success.

Neighbours: ``engine.py`` calls ``step`` each tick and passes pod completions in; created pods are
handed to the scheduler by the engine.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from carico_app.simulate.cluster import Cluster
from carico_app.simulate.params import ModelParams, Workload
from carico_app.simulate.scheduler import TokenBucket


@dataclass
class Job:
    index: int
    name: str
    workload: Workload
    completions: int
    parallelism: int
    submitted_at: float = 0.0
    created: int = 0
    finished: int = 0  # pods the controller has seen succeed
    counted: int = 0  # successes recorded in status (finalizer removed)
    untracked: deque[int] = field(default_factory=deque)
    pods: list[int] = field(default_factory=list)
    last_sync: float = float("-inf")
    calls_in_flight: int = 0
    complete_at: float | None = None

    @property
    def active(self) -> int:
        return self.created - self.finished


class JobController:
    def __init__(self, params: ModelParams, cluster: Cluster) -> None:
        self.params = params
        self.cluster = cluster
        self.bucket = TokenBucket(params.controller_qps, params.controller_burst)
        self.jobs: list[Job] = []
        self._calls: deque[tuple[Job, str, int]] = deque()
        self.api_calls = 0

    def submit(self, name: str, workload: Workload, completions: int, parallelism: int) -> Job:
        if completions < 1 or parallelism < 1:
            raise ValueError(f"job {name}: completions and parallelism must be at least 1")
        job = Job(len(self.jobs), name, workload, completions, parallelism, self.cluster.now)
        self.jobs.append(job)
        return job

    def pod_succeeded(self, pod: int) -> None:
        j = int(self.cluster.job[pod])
        if 0 <= j < len(self.jobs):
            job = self.jobs[j]
            job.finished += 1
            job.untracked.append(pod)

    @property
    def done(self) -> bool:
        return all(j.complete_at is not None for j in self.jobs)

    def _sync(self, job: Job, now: float) -> None:
        p = self.params
        job.last_sync = now
        want = min(job.parallelism - job.active, job.completions - job.created)
        for _ in range(max(0, min(want, p.job_max_creates_per_sync))):
            self._calls.append((job, "create", -1))
            job.calls_in_flight += 1
        if job.untracked:
            self._calls.append((job, "status", 0))
            batch = min(len(job.untracked), p.job_max_finalizers_per_sync)
            for _ in range(batch):
                self._calls.append((job, "finalizer", job.untracked.popleft()))
            self._calls.append((job, "status", batch))
            job.calls_in_flight += batch + 2

    def step(self, now: float) -> list[int]:
        """Start due syncs, spend this tick's API tokens; returns the pods created."""
        p = self.params
        for job in self.jobs:
            if job.complete_at is not None or job.calls_in_flight:
                continue
            if now + 1e-9 < job.last_sync + p.job_sync_period:
                continue
            needs_pods = job.created < job.completions and job.active < job.parallelism
            if needs_pods or job.untracked:
                self._sync(job, now)
        self.bucket.refill(p.dt)
        created: list[int] = []
        while self._calls and self.bucket.take():
            job, kind, arg = self._calls.popleft()
            job.calls_in_flight -= 1
            self.api_calls += 1
            if kind == "create":
                pod = self.cluster.add_pod(job.workload, job=job.index)
                job.pods.append(pod)
                job.created += 1
                created.append(pod)
            elif kind == "status" and arg > 0:
                job.counted += arg
                if job.counted >= job.completions:
                    job.complete_at = now
        return created
