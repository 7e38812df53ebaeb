"""Model parameters of the cluster simulator, each with where its number comes from.

Neighbours: ``cluster.py`` (the node/pod model) and ``controlplane.py`` (job controller, API
rate limits) read these; ``scenarios.py`` builds workloads from them; ``cli.py`` overrides them
from flags and prints them with every run so a run can be repeated exactly. docs/simulator.md
explains the calibration against the CARICO dissertation's measurements.

Sources are abbreviated:
  [D]  the CARICO dissertation: §4.2.1 (workload behaviour), §5.1 (cluster), Tables 5.2-5.8.
  [K]  Kubernetes defaults (kube-controller-manager, kube-scheduler, kubelet), as documented for the
       releases current when the dissertation was written (1.30-1.33).
  [L]  Linux: PSI aggregation on SMP (kernel/sched/psi.c), see docs/architecture.md#sampling.
  [F]  fitted here: a number the sources do not give, chosen so the default rows reproduce [D];
       docs/simulator.md says how.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

MI = 1024 * 1024
GI = 1024 * MI


@dataclass(frozen=True)
class Workload:
    """What one pod of a job does. Requests are the scheduler's view; the rest is the real cost."""

    name: str
    cpu_work: float  # core-seconds of CPU the container needs to finish
    threads: float  # runnable threads while it runs (caps its share at `threads` cores)
    memory: float  # resident bytes while running
    request_cpu_m: int = 0  # CPU request, millicores
    request_mem: int = 0  # memory request, bytes

    def with_requests(self, cpu_m: int | None, mem: int | None) -> Workload:
        return dataclasses.replace(
            self,
            request_cpu_m=self.request_cpu_m if cpu_m is None else cpu_m,
            request_mem=self.request_mem if mem is None else mem,
        )


# bpi(2000): `perl -Mbignum=bpi -wle 'print bpi(2000)'`, the Kubernetes Job example [D §5.3].
# Single-threaded perl [D]. cpu_work [F, bounded by D]: the shortest pod completions of Table 5.3
# (5 s, for the 500m run and for Spazio) include the 1-4 s start-up, so a lone pod needs about
# 4-4.5 core-s; 4.5 is used (docs/simulator.md shows the fit).
# memory: perl with bignum stays well under 100 MiB; [D §5.3.3] sees only a small memory rise with
# ~40 pods per node.
BPI_2000 = Workload(name="bpi", cpu_work=4.5, threads=1, memory=60 * MI, request_cpu_m=100)

# The "small ML workload" (training and inference) [D §5.4]. threads: numerical libraries start one
# thread per core (4). cpu_work: Table 5.5, CARICO's min 27 s with 1-3 pods per 4-core node and the
# default's 118-138 s with 5-6 pods per node both give ~100 core-s (5.3 pods x 0.75 core x 127 s).
# memory: Table 5.5 shows no restarts at 10 pods per node (the default's 200-pod max is within 3 %
# of its p75), so the resident size is below 7.7 GiB / 10; [D] calls the 750Mi request an
# under-estimate of the peak, so 700 MiB is used.
ML_SMALL = Workload(
    name="ml", cpu_work=100.0, threads=4, memory=700 * MI, request_cpu_m=200, request_mem=750 * MI
)


# Two more kinds of pod for the heterogeneous scenario, each mis-sized in the way pods commonly
# are, so that no one fixed request suits every kind [F: illustrative sizes, not measured].
# A memory-heavy batch step (an in-memory join or cache build): little CPU, 1.5 GiB resident, but
# it requests a third of that, so request-based packing can overfill a node's memory.
MEM_HEAVY = Workload(
    name="mem", cpu_work=10.0, threads=0.25, memory=1536 * MI, request_cpu_m=100,
    request_mem=512 * MI,
)  # fmt: skip
# A mostly idle worker (waits on a queue): 2 % of a core for about 30 s, small, but it requests
# half a core, so request-based packing wastes the nodes it lands on.
MOSTLY_IDLE = Workload(
    name="idle", cpu_work=0.6, threads=0.02, memory=80 * MI, request_cpu_m=500,
    request_mem=256 * MI,
)  # fmt: skip


@dataclass(frozen=True)
class NodeParams:
    cores: int = 4  # [D §5.1] 4 vCPUs, hyperthreading disabled
    memory: float = 8 * GI  # [D §5.1] 8 GB of RAM
    allocatable_cpu_m: int = 4000  # [D §5.1] `kubectl describe nodes` shows 4000m
    allocatable_mem: int = 8 * GI - 100 * MI  # [K] kubelet evictionHard memory.available<100Mi
    max_pods: int = 110  # [K] kubelet --max-pods
    # Requests of the DaemonSet pods on every node (CNI, kube-proxy, the monitoring exporter: [D
    # §5.1] runs Prometheus). [F] 250m: Table 5.2's 1000m row only fits if three, not four, 1000m
    # pods share a node (docs/simulator.md); a CNI agent plus node-exporter request about that.
    system_request_cpu_m: int = 250
    system_request_mem: int = 200 * MI
    system_pods: int = 3  # those DaemonSet pods count against max_pods
    # Background use by the system: kubelet, containerd, DaemonSets. [D §5.4.3] idle cluster ~10 %.
    base_cpu_threads: float = 0.1
    base_memory: float = 0.1 * 8 * GI


@dataclass(frozen=True)
class ModelParams:
    """Everything that shapes a run besides the scenario and the scheduler."""

    # [docs/architecture.md#simulator] 100 ms step; telemetry is sampled every step (10 Hz)
    dt: float = 0.1
    node: NodeParams = field(default_factory=NodeParams)
    # [F] Loss of useful CPU when many CPU-bound processes time-share a core: per running pod
    # beyond one per core, this fraction of the node's throughput goes to switching and cold
    # caches. [D §4.2.1] observed completion times growing with pods per node beyond what
    # utilisation shows and blames exactly this (cache contention, CPU thrashing under Xen).
    contention_overhead: float = 0.14
    # Bind-to-running latency, uniform [D §2.2.11 cites up to 4 s;
    # docs/architecture.md#simulator: 1-4 s].
    startup_min: float = 1.0
    startup_max: float = 4.0
    # CPU bursts of the runtime at container create and delete [D §4.2.2: spikes last ~200 ms].
    # [F] one core for the spike's duration (runc, containerd-shim and kubelet work in parallel).
    burst_cores: float = 1.0
    burst_seconds: float = 0.2
    # Kubelet notices a container exit at its next PLEG relist (every 1 s) [K], then writes status.
    status_delay_max: float = 1.0
    # Container restart back-off after an OOM kill: 10 s, doubling, at most 300 s [K].
    restart_backoff: float = 10.0
    restart_backoff_max: float = 300.0
    # kube-controller-manager's API client: --kube-api-qps 20, --kube-api-burst 30 [K]. Every pod
    # costs the job controller one create and one finalizer-removal patch, plus status updates.
    controller_qps: float = 20.0
    controller_burst: float = 30.0
    job_sync_period: float = 1.0  # [K] the job controller syncs a Job at most once a second
    job_max_creates_per_sync: int = 500  # [K] MaxPodCreateDeletePerSync
    job_max_finalizers_per_sync: int = 500  # [K] maxUncountedPods
    # kube-scheduler: client qps 50 / burst 100 (bindings) [K]; one scheduling attempt of a pod
    # over 19 nodes costs ~1 ms of scheduler time [F, order of magnitude of kube's own benchmarks].
    scheduler_qps: float = 50.0
    scheduler_burst: float = 100.0
    scheduler_attempt_seconds: float = 0.001
    pod_initial_backoff: float = 1.0  # [K] podInitialBackoffSeconds
    pod_max_backoff: float = 10.0  # [K] podMaxBackoffSeconds
    unschedulable_flush_interval: float = 30.0  # [K] flushUnschedulablePodsLeftover period
    unschedulable_max_duration: float = 300.0  # [K] podMaxInUnschedulablePodsDuration
    # Measurement noise of the telemetry (standard deviation, in [0,1] units).
    noise_util: float = 0.02
    noise_psi: float = 0.02
    noise_mem: float = 0.005
    # Safety stop: a run longer than this simulated time is cut short and reported as such.
    max_seconds: float = 3600.0

    def describe(self) -> dict[str, object]:
        """Flat name -> value mapping, printed with every run."""
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                for g in dataclasses.fields(value):
                    out[f"{f.name}.{g.name}"] = getattr(value, g.name)
            else:
                out[f.name] = value
        return out


def override(params: ModelParams, assignments: list[str]) -> ModelParams:
    """Apply ``name=value`` overrides (``node.cores=8``, ``startup_max=2``) with type checks."""
    node_changes: dict[str, object] = {}
    top_changes: dict[str, object] = {}
    node_fields = {f.name: f for f in dataclasses.fields(NodeParams)}
    top_fields = {f.name: f for f in dataclasses.fields(ModelParams) if f.name != "node"}
    for item in assignments:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not raw.strip():
            raise ValueError(f"parameter override {item!r}: expected NAME=VALUE")
        if name.startswith("node."):
            table, target, key = node_fields, node_changes, name.removeprefix("node.")
            current: object = getattr(params.node, key, None)
        else:
            table, target, key = top_fields, top_changes, name
            current = getattr(params, key, None)
        if key not in table:
            known = sorted(top_fields) + sorted(f"node.{n}" for n in node_fields)
            raise ValueError(f"unknown model parameter {name!r}; known: {', '.join(known)}")
        try:
            value: object = int(raw) if isinstance(current, int) else float(raw)
        except ValueError:
            raise ValueError(f"parameter {name}: {raw!r} is not a number") from None
        if isinstance(value, float) and not (value == value and abs(value) != float("inf")):
            raise ValueError(f"parameter {name}: {raw!r} is not finite")
        if isinstance(value, int | float) and value < 0:
            raise ValueError(f"parameter {name}: must not be negative")
        target[key] = value
    node = dataclasses.replace(params.node, **node_changes)  # type: ignore[arg-type]
    result = dataclasses.replace(params, node=node, **top_changes)  # type: ignore[arg-type]
    validate(result)
    return result


def validate(p: ModelParams) -> None:
    """Reject parameter sets the model cannot run."""
    if p.dt <= 0 or p.dt > 1:
        raise ValueError("dt must be in (0, 1] seconds")
    if p.startup_min > p.startup_max:
        raise ValueError("startup_min must not exceed startup_max")
    if p.node.cores < 1:
        raise ValueError("node.cores must be at least 1")
    if p.controller_qps <= 0 or p.scheduler_qps <= 0:
        raise ValueError("API qps must be positive")
    if p.controller_burst < 1 or p.scheduler_burst < 1:
        raise ValueError("API burst must be at least 1")
    if p.pod_initial_backoff > p.pod_max_backoff:
        raise ValueError("pod_initial_backoff must not exceed pod_max_backoff")
