"""The model core end to end: 10 Hz telemetry → EMA → model → signal → estimator → avail."""

from __future__ import annotations

import numpy as np
import pytest

from carico.model import CostCapacityEstimator, DynamicEMA, SubspaceModel, capacity_signal

CPU_IDLE, CPU_PER_POD = 0.1, 0.04  # CPU is the binding resource: full at 22.5 pods
MEM_IDLE, MEM_PER_POD = 0.15, 0.02
NODES = 20


def test_the_pipeline_learns_the_cost_of_a_pod_in_signal_units() -> None:
    rng = np.random.default_rng(5)
    # the fleet's typical node: (0.6, 0.3); this node's share in the merged view is 1/20
    fleet = SubspaceModel.from_batch(np.clip(rng.normal([[0.6], [0.3]], 0.05, (2, 200)), 0, 1))
    ema, est = DynamicEMA(2), CostCapacityEstimator()
    keep = 0.5 ** (1 / 30)
    local: SubspaceModel | None = None
    merged = fleet
    batch = np.empty((2, 10))
    now, k, level = 0.0, 0.0, np.zeros(2)
    for pods in (3, 6, 10, 7, 12, 9, 14, 5, 11, 8):
        for second in range(60):
            for i in range(10):
                cpu = CPU_IDLE + CPU_PER_POD * pods + rng.normal(0.0, 0.02)
                mem = MEM_IDLE + MEM_PER_POD * pods + rng.normal(0.0, 0.01)
                if second == 0 and i < 2:
                    cpu += 0.4  # a 200 ms container start-up burst
                level = ema.update([cpu, mem])
                batch[:, i] = level
            local = (
                SubspaceModel.from_batch(batch)
                if local is None
                else local.update(batch, keep, 1 - keep)
            )
            merged = SubspaceModel.merge(fleet, local, NODES - 1, 1)
            k = capacity_signal(level, merged)
            now += 1.0
            est.observe(now, k, pods, second == 0 or not ema.settled)
    # With CPU binding, k = (1 − CPU_IDLE − CPU_PER_POD·n)/w_cpu: linear in n with
    # c = (1 − CPU_IDLE)/w_cpu and p = CPU_PER_POD/w_cpu. w drifts slightly as the node's own
    # 1/20 share of the merged model changes with its load; the final w is used as the truth.
    sigma1, u1 = merged.top()
    w_cpu = sigma1 * u1[0]
    assert est.cost_source == "learned"
    assert est.per_pod_cost == pytest.approx(CPU_PER_POD / w_cpu, rel=0.05)
    assert est.capacity == pytest.approx((1 - CPU_IDLE) / w_cpu, rel=0.05)
    # and in pods: (1 − 0.1)/0.04 = 22.5 pods fit, 8 run
    assert est.avail(k, 8, "live") == pytest.approx(22.5 - 8, abs=0.5)
    assert est.avail(k, 8, "estimate") == pytest.approx(22.5 - 8, abs=0.5)
