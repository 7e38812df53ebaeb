"""kube-scheduler's NodeResourcesFit and BalancedAllocation, checked against hand computation."""

from __future__ import annotations

import numpy as np
import pytest

from carico_app.simulate import kube_default as kd

GI = 1024**3
MI = 1024**2


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_fit_filter_boundaries() -> None:
    alloc_cpu, alloc_mem, max_pods = (
        arr(4000, 4000, 4000),
        arr(8 * GI, 8 * GI, 8 * GI),
        arr(110, 110, 3),
    )
    req_cpu = arr(3500, 3600, 0)
    req_mem = arr(1 * GI, 1 * GI, 0)
    count = arr(5, 5, 3)
    ok = kd.fits(500, 0, req_cpu, req_mem, count, alloc_cpu, alloc_mem, max_pods)
    # 3500 + 500 = 4000 fits exactly; 3600 + 500 does not; the third node is full on pod count.
    assert ok.tolist() == [True, False, False]
    # A pod without requests only needs a pod slot.
    assert kd.fits(0, 0, req_cpu, req_mem, count, alloc_cpu, alloc_mem, max_pods).tolist() == [
        True,
        True,
        False,
    ]
    assert kd.fit_failure_reasons(500, 8 * GI, 3600, 1 * GI, 3, 4000, 8 * GI, 3) == [
        "Too many pods",
        "Insufficient cpu",
        "Insufficient memory",
    ]
    assert kd.fit_failure_reasons(500, 0, 3500, 0, 0, 4000, 8 * GI, 110) == []


def test_least_allocated_by_hand() -> None:
    # Node: 4000m / 8 GiB, 1000m and 2 GiB requested; pod 500m / 1 GiB.
    # cpu: (4000 - 1500) * 100 // 4000 = 62; memory: (8 - 3) GiB * 100 // 8 GiB = 62;
    # (62 + 62) // 2 = 62.
    s = kd.least_allocated(500, 1 * GI, arr(1000), arr(2 * GI), arr(4000), arr(8 * GI))
    assert s.tolist() == [62]
    # Second node: 3900m requested -> cpu (4000-4400) < 0 -> 0; memory 62 -> 31.
    s = kd.least_allocated(500, 1 * GI, arr(3900), arr(2 * GI), arr(4000), arr(8 * GI))
    assert s.tolist() == [31]


def test_least_allocated_uses_non_zero_defaults_for_unset_requests() -> None:
    # A request-less pod counts as 100m and 200 MB: cpu (4000-100)*100//4000 = 97,
    # memory (8 GiB - 200 MiB) * 100 // 8 GiB = 97.
    s = kd.least_allocated(0, 0, arr(0), arr(0), arr(4000), arr(8 * GI))
    assert s.tolist() == [97]


def test_balanced_allocation_by_hand() -> None:
    # fractions with the pod: cpu (1000+500)/4000 = 0.375, memory (1+1)/8 = 0.25;
    # std = |0.375 - 0.25| / 2 = 0.0625; score int((1 - 0.0625) * 100) = 93.
    s = kd.balanced_allocation(500, 1 * GI, arr(1000), arr(1 * GI), arr(4000), arr(8 * GI))
    assert s.tolist() == [93]
    # Fractions above 1 are capped: cpu 5000/4000 -> 1, memory 0 -> std 0.5 -> 50.
    s = kd.balanced_allocation(1000, 0, arr(4000), arr(0), arr(4000), arr(8 * GI))
    assert s.tolist() == [50]


def test_total_is_the_weighted_sum_and_prefers_the_emptier_node() -> None:
    req_cpu, req_mem = arr(1000, 0), arr(1 * GI, 0)
    total = kd.total_score(
        500, 1 * GI, req_cpu, req_mem, req_cpu, req_mem, arr(4000, 4000), arr(8 * GI, 8 * GI)
    )
    fit = kd.least_allocated(500, 1 * GI, req_cpu, req_mem, arr(4000, 4000), arr(8 * GI, 8 * GI))
    bal = kd.balanced_allocation(
        500, 1 * GI, req_cpu, req_mem, arr(4000, 4000), arr(8 * GI, 8 * GI)
    )
    assert total.tolist() == (fit + bal).tolist()
    assert total[1] > total[0]


def test_select_host_breaks_ties_at_random_and_respects_feasibility() -> None:
    rng = np.random.default_rng(0)
    scores = arr(5, 9, 9, 9)
    feasible = np.array([True, True, True, False])
    picks = {kd.select_host(scores, feasible, rng) for _ in range(200)}
    assert picks == {1, 2}  # the tied best feasible nodes, both chosen over 200 draws
    assert kd.select_host(scores, np.zeros(4, dtype=bool), rng) == -1


@pytest.mark.parametrize("cpu", [100, 200, 500, 1000])
def test_pods_per_node_at_each_request_size(cpu: int) -> None:
    # With 250m of DaemonSet requests on 4000m, kube fits floor(3750 / cpu) pods.
    placed, req = 0, 250
    while kd.fits(cpu, 0, arr(req), arr(0), arr(placed), arr(4000), arr(8 * GI), arr(110))[0]:
        placed += 1
        req += cpu
    assert placed == 3750 // cpu
