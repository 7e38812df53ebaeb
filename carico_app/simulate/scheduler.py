"""Schedulers inside the simulator: the pluggable interface and kube-scheduler's emulation.

A scheduler sees pods appear (``pod_created``), sees bound pods finish (``pod_terminated``) and,
once per step, binds what it decides (``step``), paying for its API calls with a token bucket like
a real client.

``KubeScheduler`` emulates kube-scheduler's request-based behaviour: the scheduling queue with
back-off (``queue.py``), the NodeResourcesFit filter and the LeastAllocated + BalancedAllocation
scores (``kube_default.py``), one pod per scheduling cycle, an assume cache so that pods whose
binding is still in flight count on their node, and bindings limited by the client's qps/burst.

**The seam for Carico.** In production Carico is a kube-scheduler *extender*: the same queue and
in-tree filters run first, then the extender's filter narrows the nodes, its prioritize scores
(0..10, times weight, times 10) are added to the plugin scores, and it binds. ``KubeScheduler``
takes an optional ``Extender`` with exactly those three calls, synchronous and on node names
like the extender's own decision code (filter and prioritize of a pod over candidate names at a
given time). The ``carico`` scheduler is ``KubeScheduler(extender=<the extender's decision code and
reservation ledger, binding through its --no-kube in-memory cluster>)`` fed by agents whose
telemetry source reads ``Cluster.telemetry``; that wiring is ``carico_wiring.py``, and
``schedulers.py`` turns a name from the command line into one or the other.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np

from carico_app.simulate import kube_default as kd
from carico_app.simulate.cluster import Cluster
from carico_app.simulate.params import ModelParams
from carico_app.simulate.queue import SchedulingQueue

MAX_EXTENDER_PRIORITY = 10


class Scheduler(Protocol):
    name: str

    def pod_created(self, pod: int, now: float) -> None: ...

    def pods_started(self, pods: np.ndarray, now: float) -> None: ...

    def pod_terminated(self, pod: int, now: float) -> None: ...

    def step(self, cluster: Cluster, now: float) -> None: ...


class Extender(Protocol):
    """kube-scheduler's extender calls (docs/architecture.md#extender-protocol) on node names."""

    weight: int

    def filter(self, pod: int, nodes: list[str], now: float) -> tuple[list[str], dict[str, str]]:
        """Nodes that pass, and a reason per failed node."""
        ...

    def prioritize(self, pod: int, nodes: list[str], now: float) -> dict[str, int]:
        """Score 0..10 per node."""
        ...

    def bind(self, pod: int, node: str, now: float) -> str:
        """Bind (reserve); returns an error message, empty on success."""
        ...


class TokenBucket:
    """client-go's token bucket rate limiter on the simulation clock."""

    def __init__(self, qps: float, burst: float) -> None:
        self.qps = qps
        self.burst = burst
        self.tokens = burst

    def refill(self, dt: float) -> None:
        self.tokens = min(self.burst, self.tokens + self.qps * dt)

    def take(self) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def node_name(i: int) -> str:
    return f"node-{i:02d}"


class KubeScheduler:
    def __init__(
        self,
        name: str,
        params: ModelParams,
        n_nodes: int,
        rng: np.random.Generator,
        extender: Extender | None = None,
    ) -> None:
        self.name = name
        self.params = params
        self.rng = rng
        self.extender = extender
        self.queue = SchedulingQueue(
            params.pod_initial_backoff,
            params.pod_max_backoff,
            params.unschedulable_flush_interval,
            params.unschedulable_max_duration,
        )
        self.bucket = TokenBucket(params.scheduler_qps, params.scheduler_burst)
        self._binds: deque[tuple[int, int]] = deque()
        self.names = [node_name(i) for i in range(n_nodes)]
        node = params.node
        self.alloc_cpu = np.full(n_nodes, node.allocatable_cpu_m, dtype=np.int64)
        self.alloc_mem = np.full(n_nodes, node.allocatable_mem, dtype=np.int64)
        self.max_pods = np.full(n_nodes, node.max_pods, dtype=np.int64)
        self.attempts = 0
        self.failed_attempts = 0
        self._budget = 0.0

    def pod_created(self, pod: int, now: float) -> None:
        self.queue.add(pod, now)
        self.queue.move_extender_rejected(now)

    def pods_started(self, pods: np.ndarray, now: float) -> None:
        if len(pods):
            self.queue.move_extender_rejected(now)  # pod status updates

    def pod_terminated(self, pod: int, now: float) -> None:
        # The informer filters out terminal pods: a finished pod is an AssignedPodDelete event.
        self.queue.move_all(now)

    def _node_state(self, cluster: Cluster) -> tuple[np.ndarray, ...]:
        node = self.params.node
        cpu, mem, nz_cpu, nz_mem, count = cluster.requested()
        cpu = cpu + node.system_request_cpu_m
        mem = mem + node.system_request_mem
        nz_cpu = nz_cpu + node.system_request_cpu_m
        nz_mem = nz_mem + node.system_request_mem
        count = count + node.system_pods
        for pod, nd in self._binds:  # assumed: decided, binding not yet written
            rc, rm = int(cluster.req_cpu[pod]), int(cluster.req_mem[pod])
            cpu[nd] += rc
            mem[nd] += rm
            nz_cpu[nd] += rc or kd.DEFAULT_MILLI_CPU_REQUEST
            nz_mem[nd] += rm or kd.DEFAULT_MEMORY_REQUEST
            count[nd] += 1
        return cpu, mem, nz_cpu, nz_mem, count

    def step(self, cluster: Cluster, now: float) -> None:
        p = self.params
        self.queue.tick(now)
        self.bucket.refill(p.dt)
        while self._binds and self.bucket.take():
            bound, target = self._binds.popleft()
            cluster.bind(bound, target)
        # Scheduler time is not banked: an idle step's unused attempts are lost.
        self._budget = min(self._budget, 1.0) + p.dt / p.scheduler_attempt_seconds
        if len(self.queue) == 0:
            return
        cpu, mem, nz_cpu, nz_mem, count = self._node_state(cluster)
        while self._budget >= 1.0:
            pod = self.queue.pop(now)
            if pod is None:
                break
            self._budget -= 1.0
            self.attempts += 1
            rc, rm = int(cluster.req_cpu[pod]), int(cluster.req_mem[pod])
            feasible = kd.fits(
                rc, rm, cpu, mem, count, self.alloc_cpu, self.alloc_mem, self.max_pods
            )
            extra = np.zeros(len(feasible), dtype=np.int64)
            in_tree = bool(feasible.any())
            extended = self.extender is not None and in_tree
            if extended:
                feasible, extra = self._ask_extender(pod, feasible, now)
            if not feasible.any():
                self.failed_attempts += 1
                self.queue.add_unschedulable(pod, now, by_extender=extended and in_tree)
                continue
            scores = kd.total_score(
                rc, rm, cpu, mem, nz_cpu, nz_mem, self.alloc_cpu, self.alloc_mem
            )
            nd = kd.select_host(scores + extra, feasible, self.rng)
            if self.extender is not None:
                err = self.extender.bind(pod, self.names[nd], now)
                if err:
                    self.failed_attempts += 1
                    self.queue.add_unschedulable(pod, now, by_extender=True)
                    continue
            self.queue.done(pod)
            self.queue.move_extender_rejected(now)  # the binding is a pod update
            cpu[nd] += rc
            mem[nd] += rm
            nz_cpu[nd] += rc or kd.DEFAULT_MILLI_CPU_REQUEST
            nz_mem[nd] += rm or kd.DEFAULT_MEMORY_REQUEST
            count[nd] += 1
            if self.bucket.take():
                cluster.bind(pod, nd)
            else:
                self._binds.append((pod, nd))

    def _ask_extender(
        self, pod: int, feasible: np.ndarray, now: float
    ) -> tuple[np.ndarray, np.ndarray]:
        assert self.extender is not None
        candidates = [self.names[i] for i in np.flatnonzero(feasible)]
        passed, _reasons = self.extender.filter(pod, candidates, now)
        index = {n: i for i, n in enumerate(self.names)}
        mask = np.zeros(len(feasible), dtype=bool)
        for n in passed:
            if n in index and feasible[index[n]]:
                mask[index[n]] = True  # an extender may only narrow the candidates
        extra = np.zeros(len(feasible), dtype=np.int64)
        if mask.any():
            scores = self.extender.prioritize(
                pod, [self.names[i] for i in np.flatnonzero(mask)], now
            )
            factor = self.extender.weight * (kd.MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
            for n, s in scores.items():
                if n in index:
                    extra[index[n]] = max(0, min(MAX_EXTENDER_PRIORITY, int(s))) * factor
        return mask, extra
