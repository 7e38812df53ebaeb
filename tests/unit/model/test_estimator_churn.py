"""CostCapacityEstimator under continuous churn: the churn filter, censoring and the unit rescale.

During a Job a node's pod count changes several times a second, so the churn hold never ends and
the differenced update (tests in test_estimator.py) never sees a settled window. These traces
change n every 300 ms for minutes; the smoothed signal follows the count 0.4 s late (the Dynamic
EMA's snap after 3 samples, one sample later), and the caller passes that lag-matched count.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from carico.model import CostCapacityEstimator

C_TRUE = 4.0
P_TRUE = 0.2  # capacity c/p = 20 pods
SIGMA = 0.02
DT = 0.1  # 10 Hz samples, one observation per 1 s batch


def churn_run(
    seed: int, seconds: int, prior: float = 0.1, every: float = 0.3
) -> tuple[CostCapacityEstimator, int]:
    """30 s idle (n = 0, c is learned; the cost is not), then n moves by ±1 every ``every`` s
    between 2 and 16 for ``seconds``. Returns the estimator and the last pod count."""
    rng = np.random.default_rng(seed)
    est = CostCapacityEstimator(prior_per_pod_cost=prior)
    for t in range(1, 31):
        est.observe(float(t), C_TRUE + rng.normal(0.0, SIGMA), 0, False)
    n, history, next_change = 2, [], 30.0
    for step in range(1, int(seconds / DT) + 1):
        now = round(30.0 + step * DT, 6)
        if now >= next_change:
            n = min(max(n + 2 * int(rng.integers(2)) - 1, 2), 16)
            next_change = now + every
        history.append(n)
        if step % 10 == 0:
            seen = history[-5]  # what the smoothed signal reflects: the count 0.4 s ago
            k = max(C_TRUE - P_TRUE * seen + rng.normal(0.0, SIGMA), 0.0)
            lagged = sum(history[-7:-4]) / 3.0  # the pipeline's lag-matched count
            est.observe(now, k, n, True, pods_lagged=lagged)
    return est, n


@pytest.mark.parametrize("seed", range(20))
def test_learns_the_cost_under_continuous_churn(seed: int) -> None:
    est, n = churn_run(seed, seconds=30)
    assert est.churn_hold  # the hold never ended: the differenced update had nothing to use
    assert est.cost_updates == 0 and est.cost_source == "learned" and est.churn_updates > 0
    # Within 30 s the cost is within 10 % of the truth (the prior was half of it); over 20 seeds
    # the largest error measured was 7.5 %. 10 % of the cost is 2 pods of a 20-pod capacity.
    assert est.per_pod_cost == pytest.approx(P_TRUE, rel=0.10)
    # and within twice the filter's own standard deviation (it claims no more than it knows)
    assert abs(est.per_pod_cost - P_TRUE) <= 2.0 * math.sqrt(est.per_pod_cost_var)
    assert est.capacity == pytest.approx(C_TRUE, rel=0.10)
    # avail = ĉ/p̂ − n: 2 pods is 10 % of the capacity, the error the cost tolerance allows
    assert est.avail(0.0, n, "estimate") == pytest.approx(C_TRUE / P_TRUE - n, abs=2.0)


def test_churn_at_one_pod_count_keeps_the_prior() -> None:
    """Churn hints at a constant n cannot separate c from p: the churn filter hands nothing over
    and the cost stays at its prior (the capacity is not touched either; test_estimator.py)."""
    est = CostCapacityEstimator(prior_per_pod_cost=0.1)
    rng = np.random.default_rng(3)
    for t in range(1, 31):
        est.observe(float(t), C_TRUE + rng.normal(0.0, SIGMA), 0, False)
    for t in range(31, 120):  # churn hints at 8 pods, k with start-up dips
        k = C_TRUE - P_TRUE * 8 + rng.normal(0.0, SIGMA) - 0.3 * rng.random()
        est.observe(float(t), max(k, 0.0), 8, True)
    assert est.churn_hold
    assert est.per_pod_cost == 0.1 and est.cost_source == "config"


def test_censored_churn_observations_teach_nothing() -> None:
    est = CostCapacityEstimator(prior_per_pod_cost=0.1)
    for t in range(1, 31):
        est.observe(float(t), C_TRUE, 0, False)
    for i, t in enumerate(range(31, 90)):
        n = 18 + i % 4  # the node is full: k sits at its floor, a little above 0
        est.observe(float(t), 0.01, n, True, censored=True, pods_lagged=float(n))
        assert est.censored and est.halted
    assert est.churn_updates == 0 and est.per_pod_cost == 0.1


def test_churn_at_n_zero_is_never_learned_from() -> None:
    est = CostCapacityEstimator(prior_per_pod_cost=0.1)
    for t in range(1, 40):  # pods being created and deleted, none running yet (lagged n̄ = 0)
        est.observe(float(t), C_TRUE - 0.1 * (t % 3), t % 2, True, pods_lagged=0.0)
    assert est.churn_updates == 0 and est.cost_source == "config"


def test_settled_windows_still_learn_after_churn() -> None:
    """Churn that settles leaves the learning to the differenced update, starting from what the
    churn filter handed over."""
    est, n = churn_run(5, seconds=30, prior=0.1)
    handed = est.cost_updates
    now = 61.0
    for pods in (n, 6, 12):
        for _ in range(25):
            now += 1.0
            est.observe(now, C_TRUE - 0.3 * pods, pods, False)  # a heavier release: 0.3
    assert est.cost_updates >= handed + 1
    assert est.per_pod_cost == pytest.approx(0.3, rel=0.05)


def test_rescale_follows_a_change_of_unit() -> None:
    est, n = churn_run(7, seconds=30)
    before = (est.capacity, est.per_pod_cost, est.noise_var, est.avail(0.0, n, "estimate"))
    est.rescale(0.25)  # the typical workload grew fourfold: one old unit is 0.25 new ones
    assert est.capacity == pytest.approx(0.25 * before[0])
    assert est.per_pod_cost == pytest.approx(0.25 * before[1])
    assert est.noise_var == pytest.approx(0.0625 * before[2])
    assert est.avail(0.0, n, "estimate") == pytest.approx(before[3])  # pods do not change
    # the next observation in the new unit fits the rescaled line: not gated
    est.observe(100.0, 0.25 * (C_TRUE - P_TRUE * n), n, False)
    assert not est.gated
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="factor"):
            est.rescale(bad)


def test_bad_lagged_count_is_rejected() -> None:
    est = CostCapacityEstimator()
    with pytest.raises(ValueError, match="pods_lagged"):
        est.observe(1.0, 1.0, 3, True, pods_lagged=-1.0)
    with pytest.raises(ValueError, match="pods_lagged"):
        est.observe(1.0, 1.0, 3, True, pods_lagged=math.nan)


def test_a_fleet_prior_during_churn_pivots_at_what_the_node_sees_now() -> None:
    """ĉ learned on an idle node (memory limiting k) says nothing about the line CPU draws once
    pods run; a fleet prior arriving while the node is full must not be combined with it."""
    est = CostCapacityEstimator(prior_per_pod_cost=0.1)
    for t in range(1, 31):
        est.observe(float(t), 10.0, 0, False)
    assert est.capacity == pytest.approx(10.0)
    est.new_line()  # CPU now limits k
    for i, t in enumerate(range(31, 40)):
        n = 8 + i % 2  # full: k at its floor
        est.observe(float(t), 0.01, n, True, censored=True, pods_lagged=8.0)
    assert est.set_prior(0.125)
    assert est.cost_source == "fleet"
    # the line through (n̄ = 8, k = 0.01) with slope 0.125: ĉ ≈ 1.01, no room left. Pivoting the
    # stale ĉ = 10 instead would have offered 10.2/0.125 − 9 ≈ 73 pods.
    assert est.capacity == pytest.approx(0.01 + 0.125 * 8.0)
    assert est.avail(0.0, 9, "estimate") == 0.0
    assert est.avail(0.0, 8, "estimate") == pytest.approx(0.08)
