"""The time-stepped node and pod model: pure, vectorised with numpy, no I/O.

Design: docs/architecture.md#simulator.

The clock is the step counter: ``step()`` advances the whole cluster by ``params.dt`` seconds.
Per step and per node it computes the runnable CPU demand (threads of running pods, runtime bursts
at container create/delete, system background), shares the cores fairly among runnable threads (a
pod progresses at ``threads x share``), derives utilisation and CPU pressure the way Linux PSI
aggregates ``some`` on SMP, checks memory and OOM-kills pods that do not fit (they restart after
the kubelet's back-off and lose their work), and produces noisy 10 Hz telemetry.

Neighbours: ``params.py`` (numbers), ``engine.py`` (drives the step loop, binds pods chosen by a
scheduler, feeds the job controller), ``telemetry()`` is what an agent telemetry source wraps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from carico_app.simulate.kube_default import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST
from carico_app.simulate.params import ModelParams, Workload

# Pod phases. PENDING: created, not bound. STARTING: bound, container not running yet (start-up or
# restart back-off). RUNNING: consuming CPU and memory. EXITED: finished, kubelet not yet reported.
# SUCCEEDED: reported; its requests no longer count on the node.
PENDING, STARTING, RUNNING, EXITED, SUCCEEDED = range(5)

_EPS = 1e-9


@dataclass(frozen=True)
class Telemetry:
    """One 10 Hz sample of a node, as an agent's telemetry source would read it."""

    timestamp: float  # simulated seconds
    util: float  # CPU utilisation in [0,1]
    psi_cpu_some: float  # fraction of the interval some runnable thread waited, [0,1]
    mem_used: float  # 1 - MemAvailable/MemTotal, [0,1]
    psi_mem_some: float
    psi_io_some: float
    pods_running: int  # workload pods running (the agent's pod count n)


@dataclass(frozen=True)
class StepEvents:
    """What changed during one step (pod indices)."""

    started: np.ndarray  # containers that began running
    exited: np.ndarray  # containers that finished their work
    succeeded: np.ndarray  # exits the kubelet reported (requests freed)
    oom_killed: np.ndarray


class Cluster:
    """Nodes and pods as parallel numpy arrays; pods are indexed in creation order."""

    def __init__(self, params: ModelParams, n_nodes: int, rng: np.random.Generator) -> None:
        if n_nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.params = params
        self.n_nodes = n_nodes
        self.rng = rng
        self.step_index = 0
        node = params.node
        self.cores = np.full(n_nodes, float(node.cores))
        self.mem_total = np.full(n_nodes, float(node.memory))
        # Burst demand ring: slot s holds extra runnable demand for step s (mod len).
        self._ring_len = max(1, round(params.burst_seconds / params.dt))
        self._burst_ring = np.zeros((self._ring_len + 1, n_nodes))
        self.n_pods = 0
        cap = 64
        self.node = np.full(cap, -1, dtype=np.int64)
        self.phase = np.full(cap, PENDING, dtype=np.int8)
        self.job = np.zeros(cap, dtype=np.int64)
        self.cpu_work = np.zeros(cap)
        self.work_left = np.zeros(cap)
        self.threads = np.zeros(cap)
        self.memory = np.zeros(cap)
        self.req_cpu = np.zeros(cap, dtype=np.int64)
        self.req_mem = np.zeros(cap, dtype=np.int64)
        self.resident = np.zeros(cap, dtype=bool)  # not part of a job (isolation probe's server)
        self.created_at = np.full(cap, np.nan)
        self.bound_at = np.full(cap, np.nan)
        self.start_at = np.full(cap, np.inf)
        self.running_at = np.full(cap, np.nan)
        self.exited_at = np.full(cap, np.nan)
        self.report_at = np.full(cap, np.inf)
        self.succeeded_at = np.full(cap, np.nan)
        self.restarts = np.zeros(cap, dtype=np.int64)
        # CPU time each pod's cgroup has used (core-seconds): what a per-pod cpuacct reads.
        self.cpu_used = np.zeros(cap)
        # Per-node state of the last step.
        self.demand = np.zeros(n_nodes)
        self.share = np.ones(n_nodes)
        self.efficiency = np.ones(n_nodes)
        self.util = np.zeros(n_nodes)
        self.psi_cpu = np.zeros(n_nodes)
        self.mem_used = np.zeros(n_nodes)
        self.psi_mem = np.zeros(n_nodes)
        self.running_count = np.zeros(n_nodes, dtype=np.int64)
        self._noisy = np.zeros((5, n_nodes))
        self.oom_kills = 0

    # -- time -------------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.step_index * self.params.dt

    # -- pods -------------------------------------------------------------------------------------
    def _grow(self) -> None:
        cap = len(self.node) * 2
        for name in _POD_ARRAYS:
            value = getattr(self, name)
            extra = np.full(cap - len(value), _FILL.get(name, 0), dtype=value.dtype)
            setattr(self, name, np.concatenate([value, extra]))

    def add_pod(self, workload: Workload, job: int = -1, resident: bool = False) -> int:
        """Create a pod (PENDING, unbound) and return its index."""
        if self.n_pods == len(self.node):
            self._grow()
        i = self.n_pods
        self.n_pods += 1
        self.job[i] = job
        self.cpu_work[i] = workload.cpu_work
        self.work_left[i] = workload.cpu_work
        self.threads[i] = workload.threads
        self.memory[i] = workload.memory
        self.req_cpu[i] = workload.request_cpu_m
        self.req_mem[i] = workload.request_mem
        self.resident[i] = resident
        self.created_at[i] = self.now
        return i

    def bind(self, pod: int, node: int, startup: float | None = None) -> None:
        """Bind a pending pod; its container runs after the bind-to-running latency."""
        if self.phase[pod] != PENDING or self.node[pod] >= 0:
            raise ValueError(f"pod {pod} is not pending")
        if not 0 <= node < self.n_nodes:
            raise ValueError(f"no node {node}")
        p = self.params
        if startup is None:
            startup = float(self.rng.uniform(p.startup_min, p.startup_max))
        self.node[pod] = node
        self.phase[pod] = STARTING
        self.bound_at[pod] = self.now
        self.start_at[pod] = self.now + startup

    def _add_bursts(self, pods: np.ndarray) -> None:
        if len(pods) == 0 or self.params.burst_cores <= 0:
            return
        add = np.bincount(self.node[pods], minlength=self.n_nodes) * self.params.burst_cores
        n = self._ring_len + 1
        for k in range(1, self._ring_len + 1):
            self._burst_ring[(self.step_index + k) % n] += add

    # -- the step ---------------------------------------------------------------------------------
    def step(self) -> StepEvents:
        """Advance the cluster by one step of ``params.dt`` seconds."""
        p = self.params
        dt = p.dt
        t0 = self.now
        n = self.n_pods
        phase = self.phase[:n]
        node_of = self.node[:n]

        started = np.flatnonzero((phase == STARTING) & (self.start_at[:n] <= t0 + _EPS))
        if len(started):
            phase[started] = RUNNING
            first = started[np.isnan(self.running_at[started])]
            self.running_at[first] = t0
            self._add_bursts(started)

        running = np.flatnonzero(phase == RUNNING)
        rnodes = node_of[running]
        slot = self.step_index % (self._ring_len + 1)
        burst = self._burst_ring[slot].copy()
        self._burst_ring[slot] = 0.0
        threads = np.bincount(rnodes, weights=self.threads[running], minlength=self.n_nodes)
        demand = threads + burst + p.node.base_cpu_threads
        cores = self.cores
        self.demand = demand
        self.share = np.minimum(1.0, cores / np.maximum(demand, _EPS))
        # Time-sharing a core among many CPU-bound processes wastes some of it (context switches
        # between distinct working sets, cold caches): useful work falls as
        # 1 / (1 + overhead * (processes per core - 1)). Threads of one pod share a working set,
        # so a pod counts once (at most one core's worth if it has fewer threads).
        procs = np.bincount(
            rnodes, weights=np.minimum(self.threads[running], 1.0), minlength=self.n_nodes
        )
        over = np.maximum(procs / cores - 1.0, 0.0)
        self.efficiency = 1.0 / (1.0 + p.contention_overhead * over)
        self.util = np.minimum(demand, cores) / cores
        # Linux PSI on SMP: some = min(nr_delayed / min(nr_nonidle, nr_cpus), 1).
        busy = np.minimum(demand, cores)
        self.psi_cpu = np.where(
            busy > _EPS, np.minimum(np.maximum(demand - cores, 0.0) / np.maximum(busy, _EPS), 1), 0
        )
        self.running_count = np.bincount(
            rnodes[~self.resident[running]], minlength=self.n_nodes
        ).astype(np.int64)

        # A pod's cgroup counts the CPU time it got (its share), wasted switching or not.
        self.cpu_used[running] += self.threads[running] * self.share[rnodes] * dt
        # Progress, with the exit time interpolated inside the step.
        rate = self.threads[running] * (self.share * self.efficiency)[rnodes]
        before = self.work_left[running]
        after = before - rate * dt
        self.work_left[running] = after
        done_mask = after <= _EPS
        exited = running[done_mask]
        if len(exited):
            frac = before[done_mask] / np.maximum(rate[done_mask], _EPS)
            self.exited_at[exited] = t0 + np.minimum(frac, dt)
            self.work_left[exited] = 0.0
            phase[exited] = EXITED
            self.report_at[exited] = self.exited_at[exited] + self.rng.uniform(
                0.0, p.status_delay_max, len(exited)
            )
            self._add_bursts(exited)

        # Memory of the containers still running; over capacity the kernel OOM-kills.
        still = running[~done_mask]
        mem = p.node.base_memory + np.bincount(
            node_of[still], weights=self.memory[still], minlength=self.n_nodes
        )
        killed: list[int] = []
        for nd in np.flatnonzero(mem > self.mem_total):
            while mem[nd] > self.mem_total[nd]:
                victim = self._oom_victim(int(nd))
                if victim < 0:
                    break
                mem[nd] -= self.memory[victim]
                self._restart(victim, t0 + dt)
                killed.append(victim)
        self.mem_used = np.minimum(mem / self.mem_total, 1.0)
        # Memory pressure proxy: reclaim stalls appear as the node approaches full.
        self.psi_mem = np.clip((self.mem_used - 0.9) / 0.1, 0.0, 1.0)

        self.step_index += 1
        t1 = self.now
        reported = np.flatnonzero((phase == EXITED) & (self.report_at[:n] <= t1 + _EPS))
        if len(reported):
            phase[reported] = SUCCEEDED
            self.succeeded_at[reported] = self.report_at[reported]

        rng = self.rng
        noise = rng.standard_normal((5, self.n_nodes))
        self._noisy[0] = np.clip(self.util + p.noise_util * noise[0], 0, 1)
        self._noisy[1] = np.clip(self.psi_cpu + p.noise_psi * noise[1], 0, 1)
        self._noisy[2] = np.clip(self.mem_used + p.noise_mem * noise[2], 0, 1)
        self._noisy[3] = np.clip(self.psi_mem + p.noise_psi * noise[3], 0, 1)
        self._noisy[4] = np.clip(p.noise_psi * noise[4], 0, 1)
        return StepEvents(
            started=started,
            exited=exited,
            succeeded=reported,
            oom_killed=np.asarray(killed, dtype=np.int64),
        )

    def _oom_victim(self, nd: int) -> int:
        """The kernel kills the highest oom_score: usage share plus the kubelet's oom_score_adj."""
        n = self.n_pods
        cands = np.flatnonzero((self.phase[:n] == RUNNING) & (self.node[:n] == nd))
        cands = cands[self.work_left[cands] > _EPS]
        if len(cands) == 0:
            return -1
        total = self.mem_total[nd]
        req = self.req_mem[cands].astype(float)
        besteffort = (req == 0) & (self.req_cpu[cands] == 0)
        adj = np.where(besteffort, 1000.0, np.clip(1000.0 - 1000.0 * req / total, 2, 999))
        score = 1000.0 * self.memory[cands] / total + adj
        return int(cands[int(np.argmax(score))])

    def _restart(self, pod: int, t: float) -> None:
        """restartPolicy OnFailure: the container restarts in place after back-off, from scratch."""
        p = self.params
        backoff = min(p.restart_backoff * 2.0 ** float(self.restarts[pod]), p.restart_backoff_max)
        self.restarts[pod] += 1
        self.oom_kills += 1
        self.phase[pod] = STARTING
        self.start_at[pod] = t + backoff
        self.work_left[pod] = self.cpu_work[pod]

    # -- views ------------------------------------------------------------------------------------
    def telemetry(self, node: int) -> Telemetry:
        """The node's latest 10 Hz sample, with measurement noise (what /proc would show)."""
        z = self._noisy[:, node]
        return Telemetry(
            timestamp=self.now,
            util=float(z[0]),
            psi_cpu_some=float(z[1]),
            mem_used=float(z[2]),
            psi_mem_some=float(z[3]),
            psi_io_some=float(z[4]),
            pods_running=int(self.running_count[node]),
        )

    def requested(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per node, over bound pods not yet reported finished: CPU (m) and memory requests, the
        same with kube's non-zero defaults for unset requests, and the pod count."""
        n = self.n_pods
        live = np.flatnonzero((self.node[:n] >= 0) & (self.phase[:n] != SUCCEEDED))
        nodes = self.node[live]
        rc, rm = self.req_cpu[live], self.req_mem[live]
        size = self.n_nodes

        def total(w: np.ndarray) -> np.ndarray:
            return np.bincount(nodes, weights=w, minlength=size).astype(np.int64)

        nz_cpu = np.where(rc == 0, DEFAULT_MILLI_CPU_REQUEST, rc)
        nz_mem = np.where(rm == 0, DEFAULT_MEMORY_REQUEST, rm)
        count = np.bincount(nodes, minlength=size).astype(np.int64)
        return total(rc), total(rm), total(nz_cpu), total(nz_mem), count


_POD_ARRAYS = (
    "node", "phase", "job", "cpu_work", "work_left", "threads", "memory", "req_cpu", "req_mem",
    "resident", "created_at", "bound_at", "start_at", "running_at", "exited_at", "report_at",
    "succeeded_at", "restarts", "cpu_used",
)  # fmt: skip
_FILL: dict[str, float | int] = {
    "node": -1,
    "phase": PENDING,
    "created_at": np.nan,
    "bound_at": np.nan,
    "start_at": np.inf,
    "running_at": np.nan,
    "exited_at": np.nan,
    "report_at": np.inf,
    "succeeded_at": np.nan,
}
