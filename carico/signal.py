"""The capacity signal k: how many typical workloads still fit on this node.

Design: docs/architecture.md#capacity-signal.

From the merged model M take the top singular pair (σ₁, u₁), u₁ made non-negative; the expected
workload is w = σ₁·u₁ (σ₁ is a singular value of the mean second moment, i.e. an RMS length in
telemetry units, so w lives in the same [0,1] units as y). With y the node's current smoothed
telemetry and L the level at which a resource counts as full (1 unless configured lower), k is
the largest k with y + k·w < L in every dimension:

    k = min over j with w_j > ε of (L − y_j) / w_j,   clamped to [0, k_max].

A node whose usage is orthogonal to the expected workload shows a higher k; a node loaded along it a
lower k. A resource that is already full (y_j ≥ L) gives k = 0 whatever w says: nothing more fits.
Pure: no I/O, no clock.

Neighbours: ``carico.subspace`` provides the model, ``carico.estimator`` turns k into pods.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from carico.subspace import SubspaceModel

# k counts "typical workloads", and w is the fleet's typical node usage (σ₁ is the RMS length of
# telemetry vectors in [0,1]^d). k exceeds 1000 only when w is under 0.1 % of the free room on every
# resource it uses: a workload at the level of measurement noise, so a larger k carries no
# information. The bound keeps k finite when w vanishes (an idle fleet, or no model yet).
DEFAULT_K_MAX = 1000.0

# Entries of w at or below this are treated as "does not use the resource": dividing by them would
# only produce a huge k that the clamp removes anyway.
DEFAULT_EPS = 1e-9


def expected_workload(model: SubspaceModel) -> np.ndarray:
    """w = σ₁·u₁ with u₁ non-negative: the typical workload, in the telemetry's [0,1] units.

    >>> import numpy as np
    >>> expected_workload(SubspaceModel(np.array([[0.6, -0.8], [0.8, 0.6]]), [0.5, 0.1])).tolist()
    [0.3, 0.4]
    """
    sigma1, u1 = model.top()
    w: np.ndarray = sigma1 * u1
    return w


def capacity_signal(
    y: ArrayLike,
    model: SubspaceModel,
    k_max: float = DEFAULT_K_MAX,
    eps: float = DEFAULT_EPS,
    level: float = 1.0,
) -> float:
    """The capacity signal k of telemetry ``y`` (shape ``(d,)``) under ``model``, in [0, k_max].

    Hand-computed example: w = σ₁u₁ = 0.5·(0.6, 0.8) = (0.3, 0.4), y = (0.4, 0.2); CPU allows
    (1 − 0.4)/0.3 = 2, memory (1 − 0.2)/0.4 = 2 → k = 2. A memory-heavy node y = (0.1, 0.6) gets
    min(3, 1) = 1; a node at y = (0.0, 1.0) is full: k = 0.

    >>> import numpy as np
    >>> model = SubspaceModel(np.array([[0.6, -0.8], [0.8, 0.6]]), [0.5, 0.1])
    >>> capacity_signal([0.4, 0.2], model)
    2.0
    >>> round(capacity_signal([0.1, 0.6], model), 12)
    1.0
    >>> capacity_signal([0.0, 1.0], model)
    0.0
    >>> capacity_signal([0.5, 0.5], SubspaceModel(np.eye(2), [0.0, 0.0]), k_max=50.0)
    50.0
    >>> round(capacity_signal([0.4, 0.2], model, level=0.7), 12)  # full at 70 %: (0.7 − 0.4)/0.3
    1.0
    """
    if not (isinstance(level, int | float) and 0.0 < level <= 1.0):
        raise ValueError(f"level must be in (0, 1], got {level!r}")
    if not (isinstance(k_max, int | float) and math.isfinite(k_max) and k_max >= 0):
        raise ValueError(f"k_max must be a finite number >= 0, got {k_max!r}")
    if not (isinstance(eps, int | float) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    y_arr = np.asarray(y, dtype=np.float64)
    if y_arr.shape != (model.d,):
        raise ValueError(f"y must have shape ({model.d},) to match the model, got {y_arr.shape}")
    if not np.all(np.isfinite(y_arr)):
        raise ValueError("y contains NaN or inf (telemetry not available for every feature)")
    if np.any(y_arr >= level):
        return 0.0
    w = expected_workload(model)
    used = w > eps
    if not used.any():
        return float(k_max)
    k = float(np.min((level - y_arr[used]) / w[used]))
    return min(max(k, 0.0), float(k_max))
