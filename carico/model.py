"""The public API of Carico's model core: import from here, not from the submodules.

Design: docs/architecture.md#data-flow.

The agent, the simulator, the benchmarks and the tests all use these names:

* ``DynamicEMA`` (``carico.ema``): the persistence-gated EMA that smooths 10 Hz telemetry;
* ``SubspaceModel`` (``carico.subspace``): the factor (U, σ) of the mean second moment;
* ``capacity_signal`` (``carico.signal``): k, how many typical workloads still fit, and
  ``expected_workload``, the typical workload w it counts in;
* ``CostCapacityEstimator`` (``carico.estimator``): capacity, per-pod cost and avail in pods.
"""

from carico.ema import DynamicEMA
from carico.estimator import CostCapacityEstimator
from carico.signal import DEFAULT_K_MAX, capacity_signal, expected_workload
from carico.subspace import SubspaceModel

__all__ = [
    "DEFAULT_K_MAX",
    "CostCapacityEstimator",
    "DynamicEMA",
    "SubspaceModel",
    "capacity_signal",
    "expected_workload",
]
