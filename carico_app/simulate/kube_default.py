"""kube-scheduler's request-based plugins, as pure functions (no I/O, no clock).

Reproduces, on integers like the Go code, the default profile's resource plugins:
* NodeResourcesFit **filter**: the pod fits iff for cpu, memory and the pod count
  ``requested_on_node + pod_request <= allocatable`` (pods with no request ask for 0 here).
* NodeResourcesFit **score**, strategy LeastAllocated with cpu and memory weight 1:
  per resource ``(allocatable - requested) * 100 // allocatable`` (0 when requested exceeds
  allocatable), then the weighted mean ``sum(w_r * s_r) // sum(w_r)``. Requests here are the
  "non-zero" ones: a container without a request counts as 100m CPU and 200 MB memory.
* NodeResourcesBalancedAllocation **score**: fractions ``f_r = min(requested_r/allocatable_r, 1)``
  with the pod's actual requests included; for two resources ``std = |f_cpu - f_mem| / 2``; score
  ``int((1 - std) * 100)``.
* Plugin weights 1 and 1 in the default profile; the node with the highest weighted sum wins, ties
  are broken uniformly at random (kube uses reservoir sampling).
The other default plugins (TaintToleration, NodeAffinity, PodTopologySpread with system defaults,
InterPodAffinity, ImageLocality) score every node alike for the workloads simulated here: no
taints, no affinities, and Job pods are not selected by the system default spreading constraints
(those select pods of Services, ReplicaSets, StatefulSets and ReplicationControllers).

Neighbours: ``scheduler.py`` runs these inside its emulation of the scheduling cycle.
"""

from __future__ import annotations

import numpy as np

MAX_NODE_SCORE = 100
DEFAULT_MILLI_CPU_REQUEST = 100  # k8s.io/kubernetes/pkg/scheduler/util: DefaultMilliCPURequest
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024  # DefaultMemoryRequest (200 MB)
FIT_WEIGHT = 1
BALANCED_WEIGHT = 1


def non_zero(cpu_m: int, mem: int) -> tuple[int, int]:
    """The requests LeastAllocated scores with: unset requests get kube's defaults."""
    return (cpu_m or DEFAULT_MILLI_CPU_REQUEST, mem or DEFAULT_MEMORY_REQUEST)


def fits(
    pod_cpu_m: int,
    pod_mem: int,
    requested_cpu_m: np.ndarray,
    requested_mem: np.ndarray,
    pod_count: np.ndarray,
    alloc_cpu_m: np.ndarray,
    alloc_mem: np.ndarray,
    max_pods: np.ndarray,
) -> np.ndarray:
    """NodeResourcesFit filter over all nodes at once: a boolean mask of nodes the pod fits."""
    ok: np.ndarray = (
        (pod_count + 1 <= max_pods)
        & ((pod_cpu_m == 0) | (requested_cpu_m + pod_cpu_m <= alloc_cpu_m))
        & ((pod_mem == 0) | (requested_mem + pod_mem <= alloc_mem))
    )
    return ok


def fit_failure_reasons(
    pod_cpu_m: int,
    pod_mem: int,
    requested_cpu_m: int,
    requested_mem: int,
    pod_count: int,
    alloc_cpu_m: int,
    alloc_mem: int,
    max_pods: int,
) -> list[str]:
    """kube's reasons for one node ("Insufficient cpu", ...); empty when the pod fits."""
    reasons = []
    if pod_count + 1 > max_pods:
        reasons.append("Too many pods")
    if pod_cpu_m and requested_cpu_m + pod_cpu_m > alloc_cpu_m:
        reasons.append("Insufficient cpu")
    if pod_mem and requested_mem + pod_mem > alloc_mem:
        reasons.append("Insufficient memory")
    return reasons


def _least_allocated_one(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    safe = np.maximum(capacity, 1)
    score = (capacity - requested) * MAX_NODE_SCORE // safe
    out: np.ndarray = np.where((capacity == 0) | (requested > capacity), 0, score)
    return out


def least_allocated(
    pod_cpu_m: int,
    pod_mem: int,
    nonzero_cpu_m: np.ndarray,
    nonzero_mem: np.ndarray,
    alloc_cpu_m: np.ndarray,
    alloc_mem: np.ndarray,
) -> np.ndarray:
    """LeastAllocated score (0..100) per node, on non-zero requests including the pod's."""
    cpu, mem = non_zero(pod_cpu_m, pod_mem)
    s_cpu = _least_allocated_one(nonzero_cpu_m + cpu, alloc_cpu_m)
    s_mem = _least_allocated_one(nonzero_mem + mem, alloc_mem)
    out: np.ndarray = (s_cpu * 1 + s_mem * 1) // 2
    return out


def balanced_allocation(
    pod_cpu_m: int,
    pod_mem: int,
    requested_cpu_m: np.ndarray,
    requested_mem: np.ndarray,
    alloc_cpu_m: np.ndarray,
    alloc_mem: np.ndarray,
) -> np.ndarray:
    """BalancedAllocation score (0..100) per node, on actual requests including the pod's."""
    f_cpu = np.minimum((requested_cpu_m + pod_cpu_m) / np.maximum(alloc_cpu_m, 1), 1.0)
    f_mem = np.minimum((requested_mem + pod_mem) / np.maximum(alloc_mem, 1), 1.0)
    std = np.abs(f_cpu - f_mem) / 2.0
    out: np.ndarray = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
    return out


def total_score(
    pod_cpu_m: int,
    pod_mem: int,
    requested_cpu_m: np.ndarray,
    requested_mem: np.ndarray,
    nonzero_cpu_m: np.ndarray,
    nonzero_mem: np.ndarray,
    alloc_cpu_m: np.ndarray,
    alloc_mem: np.ndarray,
) -> np.ndarray:
    """The default profile's weighted sum of the two resource scores, per node."""
    fit = least_allocated(pod_cpu_m, pod_mem, nonzero_cpu_m, nonzero_mem, alloc_cpu_m, alloc_mem)
    bal = balanced_allocation(
        pod_cpu_m, pod_mem, requested_cpu_m, requested_mem, alloc_cpu_m, alloc_mem
    )
    out: np.ndarray = FIT_WEIGHT * fit + BALANCED_WEIGHT * bal
    return out


def select_host(scores: np.ndarray, feasible: np.ndarray, rng: np.random.Generator) -> int:
    """Index of the best-scoring feasible node, ties broken at random; -1 if none is feasible."""
    idx = np.flatnonzero(feasible)
    if len(idx) == 0:
        return -1
    s = scores[idx]
    best = idx[s == s.max()]
    return int(best[0] if len(best) == 1 else best[rng.integers(len(best))])
