"""capacity_signal: hand-computed values and the dissertation's §3.4.1 scenarios."""

from __future__ import annotations

import math

import numpy as np
import pytest

from carico.model import DEFAULT_K_MAX, SubspaceModel, capacity_signal


def repeated(v: list[float], b: int = 10) -> SubspaceModel:
    """The model of a batch whose every sample is v: second moment v vᵀ, so σ₁u₁ = v exactly."""
    return SubspaceModel.from_batch(np.tile(np.array(v)[:, None], (1, b)))


# -- hand-computed values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("w", "y", "expected"),
    [
        # w = (0.4, 0.2): CPU allows (1−0.2)/0.4 = 2, memory (1−0.5)/0.2 = 2.5 → 2
        ([0.4, 0.2], [0.2, 0.5], 2.0),
        # memory binds: (1−0.1)/0.4 = 2.25 vs (1−0.8)/0.2 = 1
        ([0.4, 0.2], [0.1, 0.8], 1.0),
        # an empty node: min(1/0.4, 1/0.2) = 2.5
        ([0.4, 0.2], [0.0, 0.0], 2.5),
        # three features: (0.5/0.25, 0.7/0.1, 0.9/0.3) = (2, 7, 3) → 2
        ([0.25, 0.1, 0.3], [0.5, 0.3, 0.1], 2.0),
    ],
)
def test_hand_computed_values(w: list[float], y: list[float], expected: float) -> None:
    assert capacity_signal(y, repeated(w)) == pytest.approx(expected, rel=1e-12)


def test_a_resource_the_workload_does_not_use_is_ignored() -> None:
    # Two orthogonal rank-1 models merged 1:1: C = diag(0.6², 0.3²)/2 = diag(0.18, 0.045), so
    # σ₁ = √0.18 and u₁ = (1, 0): w = (0.4243, 0). Memory is nearly full but w does not use it.
    model = SubspaceModel.merge(repeated([0.6, 0.0]), repeated([0.0, 0.3]), 1, 1)
    assert capacity_signal([0.1, 0.99], model) == pytest.approx(0.9 / math.sqrt(0.18), rel=1e-12)


def test_a_full_resource_gives_zero_even_if_the_workload_does_not_use_it() -> None:
    model = SubspaceModel.merge(repeated([0.6, 0.0]), repeated([0.0, 0.3]), 1, 1)
    assert capacity_signal([0.1, 1.0], model) == 0.0
    assert capacity_signal([1.2, 0.1], model) == 0.0


def test_the_signal_is_clamped_to_k_max() -> None:
    tiny = repeated([1e-5, 1e-5])
    assert capacity_signal([0.1, 0.1], tiny) == DEFAULT_K_MAX
    assert capacity_signal([0.1, 0.1], tiny, k_max=20.0) == 20.0
    idle = SubspaceModel(np.eye(2), [0.0, 0.0])  # no workload at all: w = 0
    assert capacity_signal([0.3, 0.3], idle, k_max=7.0) == 7.0


def test_the_sign_of_the_svd_does_not_matter() -> None:
    u = np.array([[0.6, -0.8], [0.8, 0.6]])
    plus = SubspaceModel(u, [0.5, 0.1])
    minus = SubspaceModel(-u, [0.5, 0.1])
    # w = 0.5·(0.6, 0.8) = (0.3, 0.4); y = (0.4, 0.2): min(0.6/0.3, 0.8/0.4) = 2
    assert capacity_signal([0.4, 0.2], plus) == pytest.approx(2.0)
    assert capacity_signal([0.4, 0.2], minus) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("y", "k_max", "message"),
    [
        ([0.1, 0.2, 0.3], 10.0, "shape"),
        ([0.1, math.nan], 10.0, "NaN"),
        ([0.1, 0.2], -1.0, "k_max"),
        ([0.1, 0.2], math.inf, "k_max"),
    ],
)
def test_bad_input_is_rejected(y: list[float], k_max: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        capacity_signal(y, repeated([0.4, 0.2]), k_max=k_max)


# -- the dissertation's §3.4.1 scenarios ---------------------------------------------------------
#
# A node merges the fleet's global model (weight N−1) with its own local model (weight 1) and
# evaluates its current telemetry y = (cpu, memory) against the merged model. The fleet then
# changes from a light mixed workload to a CPU-intense one (the dissertation ran bpi(2000) on the
# surrounding nodes).

NODES = 10
FLEET_BEFORE = [0.3, 0.3]  # light, mixed
FLEET_AFTER = [0.9, 0.2]  # CPU-intense


def merged_view(fleet: list[float], own: list[float]) -> SubspaceModel:
    return SubspaceModel.merge(repeated(fleet), repeated(own), NODES - 1, 1)


def reference_k(fleet: list[float], own: list[float], y: list[float]) -> float:
    """The same quantity from numpy's eigensolver on the explicit mean second moment."""
    f, o = np.array(fleet), np.array(own)
    c = ((NODES - 1) * np.outer(f, f) + np.outer(o, o)) / NODES
    vals, vecs = np.linalg.eigh(c)
    w = math.sqrt(vals[-1]) * np.abs(vecs[:, -1])
    return float(np.min((1 - np.array(y)) / w))


def test_conflicting_workload_lowers_the_signal() -> None:
    """Figure 3.1 / 4.7: a node running a light CPU load while the fleet turns CPU-intense.

    The expected workload grows along the direction the node already uses, so fewer fit.
    """
    own = [0.35, 0.1]
    y = own
    before = capacity_signal(y, merged_view(FLEET_BEFORE, own))
    after = capacity_signal(y, merged_view(FLEET_AFTER, own))
    assert before == pytest.approx(reference_k(FLEET_BEFORE, own, y), rel=1e-9)
    assert after == pytest.approx(reference_k(FLEET_AFTER, own, y), rel=1e-9)
    assert after < 0.5 * before
    # CPU binds after the change: k = (1 − 0.35) / w_cpu with w_cpu ≈ 0.86
    assert 0.65 / 0.9 < after < 0.65 / 0.8


def test_complementary_workload_raises_the_signal() -> None:
    """Figure 3.2 / 4.8: a node running a memory-heavy load while the fleet turns CPU-intense.

    The node's usage is nearly orthogonal to the new expected workload, so more of it fits.
    """
    own = [0.1, 0.7]
    y = own
    before = capacity_signal(y, merged_view(FLEET_BEFORE, own))
    after = capacity_signal(y, merged_view(FLEET_AFTER, own))
    assert before == pytest.approx(reference_k(FLEET_BEFORE, own, y), rel=1e-9)
    assert after == pytest.approx(reference_k(FLEET_AFTER, own, y), rel=1e-9)
    assert after > before
    # memory binds before (0.3 / w_mem, w_mem ≈ 0.33), CPU or memory after, both well above
    assert before < 1.0 < after


def test_same_telemetry_under_both_fleets_orders_the_nodes() -> None:
    """Under a CPU-heavy fleet a memory-loaded node advertises more than an equally loaded
    CPU node; under a memory-heavy fleet the order flips."""
    cpu_node, mem_node = [0.6, 0.1], [0.1, 0.6]
    cpu_fleet, mem_fleet = repeated([0.5, 0.1]), repeated([0.1, 0.5])
    assert capacity_signal(mem_node, cpu_fleet) > capacity_signal(cpu_node, cpu_fleet)
    assert capacity_signal(cpu_node, mem_fleet) > capacity_signal(mem_node, mem_fleet)
    # by symmetry the two favourable (and the two unfavourable) values are equal: 0.9/0.5 = 1.8
    assert capacity_signal(mem_node, cpu_fleet) == pytest.approx(1.8)
    assert capacity_signal(cpu_node, cpu_fleet) == pytest.approx(0.8)
