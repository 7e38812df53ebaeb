"""The non-centred subspace model: a factor (U, σ) of a mean second moment.

Design: docs/architecture.md#subspace-model.

A ``SubspaceModel`` represents C ≈ U diag(σ²) Uᵀ, the mean of y yᵀ over the telemetry it has seen
(not mean-centred: its top direction is the typical resource use). Updates and merges are the same
weighted-mean operation on factors: the SVD of the block
``[√(wa/(wa+wb)) Ua diag(σa), √(wb/(wa+wb)) Ub diag(σb)]`` has second moment
``(wa·Ca + wb·Cb)/(wa+wb)``. With d ≤ 8 features a direct SVD of that d×(ra+rb) block is cheap and
exact, so no QR-based incremental tricks are needed. Pure: no I/O, no clock.

Its neighbours: the agent feeds it batches, the aggregator merges the nodes' models, and
``carico.signal`` turns the merged model into the capacity signal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

# U's columns must be orthonormal to this tolerance; factors that crossed the wire as float64 and
# came out of an SVD are orthonormal to ~1e-15, so 1e-6 rejects only genuinely broken input.
ORTHONORMAL_ATOL = 1e-6
MAX_DIMS = 64


class SubspaceModel:
    """A rank-r factor (U, σ) of a d×d mean second moment.

    >>> import numpy as np
    >>> Y = np.array([[0.2, 0.4], [0.1, 0.3]])
    >>> m = SubspaceModel.from_batch(Y)
    >>> bool(np.allclose(m.second_moment(), Y @ Y.T / 2))
    True
    >>> sigma1, u1 = m.top()
    >>> bool(np.isclose(sigma1**2, np.linalg.eigvalsh(Y @ Y.T / 2).max())) and bool((u1 >= 0).all())
    True
    """

    __slots__ = ("_sigma", "_u")

    def __init__(self, u: ArrayLike, sigma: ArrayLike) -> None:
        u_arr = np.array(u, dtype=np.float64)
        sigma_arr = np.array(sigma, dtype=np.float64)
        _validate(u_arr, sigma_arr)
        u_arr.setflags(write=False)
        sigma_arr.setflags(write=False)
        self._u = u_arr
        self._sigma = sigma_arr

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_batch(cls, batch: ArrayLike, rank: int | None = None) -> SubspaceModel:
        """The model of one batch ``Y`` of shape (d, b): its second moment is ``Y Yᵀ / b``.

        ``rank`` defaults to d (exact); a smaller rank keeps the top ``rank`` singular pairs.
        """
        y = np.asarray(batch, dtype=np.float64)
        if y.ndim != 2 or y.shape[0] < 1 or y.shape[1] < 1:
            raise ValueError(f"batch must have shape (d, b) with d, b >= 1, got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("batch contains NaN or inf")
        return cls._from_block(y / np.sqrt(y.shape[1]), rank)

    @classmethod
    def from_arrays(cls, u: ArrayLike, sigma: ArrayLike) -> SubspaceModel:
        """Rebuild a model from ``to_arrays()`` output or the wire; validates like ``__init__``."""
        return cls(u, sigma)

    def to_arrays(self) -> tuple[FloatArray, FloatArray]:
        """``(U, σ)`` as fresh writable arrays of shapes (d, r) and (r,)."""
        return self._u.copy(), self._sigma.copy()

    @classmethod
    def _from_block(cls, block: FloatArray, rank: int | None) -> SubspaceModel:
        d, cols = block.shape
        r = d if rank is None else min(rank, d)
        if r < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        # With fewer columns than the rank asked for (a batch of one sample, say), the SVD has
        # fewer singular values than r: complete U to an orthonormal basis and pad σ with zeros,
        # so that the model keeps its rank and later updates are not truncated by this one.
        u, s, _ = np.linalg.svd(block, full_matrices=cols < r)
        if s.shape[0] < r:
            s = np.concatenate((s, np.zeros(r - s.shape[0])))
        return cls(u[:, :r], s[:r])

    # -- operations ---------------------------------------------------------------------------

    @staticmethod
    def merge(
        a: SubspaceModel,
        b: SubspaceModel,
        weight_a: float,
        weight_b: float,
        rank: int | None = None,
    ) -> SubspaceModel:
        """The model whose second moment is ``(wa·Ca + wb·Cb)/(wa+wb)``, truncated to ``rank``.

        The rank defaults to the larger of the two inputs' ranks (full rank d when both are).

        >>> a = SubspaceModel.from_batch([[0.6], [0.0]])   # C_a = diag(0.36, 0)
        >>> b = SubspaceModel.from_batch([[0.0], [0.3]])   # C_b = diag(0, 0.09)
        >>> SubspaceModel.merge(a, b, 3, 1).second_moment().round(4).tolist()
        [[0.27, 0.0], [0.0, 0.0225]]
        """
        if a.d != b.d:
            raise ValueError(f"cannot merge models of dimension {a.d} and {b.d}")
        wa, wb = float(weight_a), float(weight_b)
        if not (np.isfinite(wa) and np.isfinite(wb)) or wa < 0 or wb < 0 or wa + wb <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not both 0, got {wa}, {wb}")
        total = wa + wb
        block = np.hstack(
            (np.sqrt(wa / total) * (a._u * a._sigma), np.sqrt(wb / total) * (b._u * b._sigma))
        )
        return SubspaceModel._from_block(block, max(a.r, b.r) if rank is None else rank)

    def update(self, batch: ArrayLike, old_weight: float, new_weight: float) -> SubspaceModel:
        """Fold a batch ``Y`` (d, b) in: second moment ``(wo·C + wn·Y Yᵀ/b)/(wo+wn)``.

        A 30 s half-life at one batch per second keeps ``wo = 0.5 ** (1/30)`` of the old moment:

        >>> m = SubspaceModel.from_batch([[0.5, 0.5]])
        >>> keep = 0.5 ** (1 / 30)
        >>> for _ in range(30):
        ...     m = m.update([[0.1, 0.1]], keep, 1 - keep)
        >>> round(float(m.second_moment()[0, 0]), 6)  # halfway from 0.25 to 0.01
        0.13
        """
        return SubspaceModel.merge(
            self, SubspaceModel.from_batch(batch), old_weight, new_weight, rank=self.r
        )

    # -- views --------------------------------------------------------------------------------

    @property
    def u(self) -> FloatArray:
        """U, shape (d, r), orthonormal columns (read-only)."""
        return self._u

    @property
    def sigma(self) -> FloatArray:
        """σ, shape (r,), descending and non-negative (read-only)."""
        return self._sigma

    @property
    def d(self) -> int:
        return int(self._u.shape[0])

    @property
    def r(self) -> int:
        return int(self._u.shape[1])

    def second_moment(self) -> FloatArray:
        """C = U diag(σ²) Uᵀ, shape (d, d)."""
        scaled = self._u * self._sigma
        result: FloatArray = scaled @ scaled.T
        return result

    def top(self) -> tuple[float, FloatArray]:
        """(σ₁, u₁): the top singular value and its direction, made non-negative.

        ``σ₁²`` is the largest eigenvalue of the second moment. Telemetry lies in [0,1]^d, so by
        Perron–Frobenius the top direction can be taken non-negative; the SVD's arbitrary sign is
        flipped and rounding-level negative entries are clipped to 0.
        """
        u1 = self._u[:, 0]
        sign = -1.0 if u1.sum() < 0 else 1.0
        return float(self._sigma[0]), np.clip(sign * u1, 0.0, None)

    def __repr__(self) -> str:
        sigma = np.array2string(self._sigma, precision=4)
        return f"SubspaceModel(d={self.d}, r={self.r}, sigma={sigma})"

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, SubspaceModel):
            return NotImplemented
        return bool(np.array_equal(self._u, other._u) and np.array_equal(self._sigma, other._sigma))

    __hash__ = None  # type: ignore[assignment]


def _validate(u: FloatArray, sigma: FloatArray) -> None:
    if u.ndim != 2:
        raise ValueError(f"U must be a 2-d array (d, r), got shape {u.shape}")
    d, r = u.shape
    if not 1 <= d <= MAX_DIMS:
        raise ValueError(f"dimension d must be in 1..{MAX_DIMS}, got {d}")
    if not 1 <= r <= d:
        raise ValueError(f"rank r must be in 1..d={d}, got {r}")
    if sigma.shape != (r,):
        raise ValueError(f"sigma must have shape ({r},) to match U {u.shape}, got {sigma.shape}")
    if not np.all(np.isfinite(u)):
        raise ValueError("U contains NaN or inf")
    if not np.all(np.isfinite(sigma)):
        raise ValueError("sigma contains NaN or inf")
    if np.any(sigma < 0):
        raise ValueError(f"sigma must be non-negative, got {sigma.tolist()}")
    if np.any(np.diff(sigma) > ORTHONORMAL_ATOL * max(1.0, float(sigma[0]))):
        raise ValueError(f"sigma must be in descending order, got {sigma.tolist()}")
    gram_error = float(np.max(np.abs(u.T @ u - np.eye(r))))
    if gram_error > ORTHONORMAL_ATOL:
        raise ValueError(f"U is not orthonormal: max |UᵀU - I| = {gram_error:.3g}")
