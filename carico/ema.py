"""Dynamic EMA: a persistence-gated exponential moving average per telemetry feature.

Design: docs/architecture.md#dynamic-ema.

Container creation and deletion cause short (~200 ms) spikes in CPU and memory telemetry that must
not reach the model, while real load changes must come through within ~300 ms. A plain EMA cannot do
both, and adaptive filters (KAMA, the 1€ filter) speed up on sudden moves and so follow the spikes.
This filter moves slowly (α_slow) unless the sample stays beyond a noise-scaled threshold δ on the
same side for N consecutive samples; then it snaps to the median of those N raw samples and follows
fast (α_fast) until the samples come back within δ.

Per feature the state is the level m, the run counter c, the fast flag, the sign of the current run,
the last N raw samples and the last ``noise_window`` residuals, whose MAD gives the noise estimate
σ̂ = 1.4826·MAD and the threshold δ = max(δ_min, 4σ̂). All features are filtered independently.

Two paths compute exactly the same thing. Many dimensions (the simulator, the tests' thousand seeds)
go through one vectorised numpy step. A few dimensions (the agent has two) go through a plain-Python
filter per dimension, :class:`_Channel`: numpy's fixed cost per operation dominates on arrays of two
elements, and at 10 Hz with cold caches after every 100 ms sleep a vectorised update measured
≈ 0.4 ms, more than half of the agent's per-sample CPU. Pure: no I/O, no clock.

Neighbours: the agent feeds it normalised samples at 10 Hz and batches its output for
``carico.subspace``; it also reads ``settled`` to decide the churn hold of ``carico.estimator``.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

# 1.4826 · MAD is a consistent estimator of the standard deviation of Gaussian noise.
MAD_TO_SIGMA = 1.4826
# Up to this many dimensions the per-dimension Python path is the default (see the module doc).
SCALAR_MAX_DIMS = 8


class DynamicEMA:
    """Persistence-gated EMA, one independent filter per dimension.

    Parameters (keyword-only, defaults from docs/architecture.md#dynamic-ema): ``alpha_slow`` (0.05,
    τ ≈ 2 s at 10 Hz), ``alpha_fast`` (0.5), ``snap_samples`` N (3 = 300 ms at 10 Hz), ``delta_min``
    (0.03), ``delta_sigmas`` (4: δ = max(δ_min, 4σ̂); 2.5 was found to snap on noise),
    ``noise_window`` (50 residuals), ``scalar`` (None: the per-dimension Python path for at most
    ``SCALAR_MAX_DIMS`` dimensions, else the vectorised one; True or False forces a path; both give
    the same bits). The first finite sample of a dimension initialises its level; until then its
    output is NaN. A NaN (or ±inf) entry is a missing sample: that dimension's level is held and its
    run counter is not reset.

    >>> ema = DynamicEMA(2)
    >>> ema.update([0.2, 0.5]).tolist()          # the first sample initialises the level
    [0.2, 0.5]
    >>> for _ in range(20):                       # steady input: σ̂ = 0, so δ = δ_min
    ...     level = ema.update([0.2, 0.5])
    >>> ema.update([0.7, float("nan")]).tolist()  # a spike moves m by α_slow·H; NaN holds m
    [0.225, 0.5]
    >>> ema.update([0.2, 0.5]).round(6).tolist()
    [0.22375, 0.5]
    >>> for _ in range(3):  # a persistent step: snap to the median after N = 3 samples
    ...     level = ema.update([0.6, 0.5])
    >>> level.round(6).tolist(), ema.settled
    ([0.6, 0.5], False)
    """

    __slots__ = (
        "_alpha_fast",
        "_alpha_slow",
        "_channels",
        "_dims",
        "_delta_min",
        "_delta_sigmas",
        "_fast",
        "_level",
        "_noise_window",
        "_raw",
        "_raw_pos",
        "_res_count",
        "_res_pos",
        "_residuals",
        "_rows",
        "_run",
        "_run_sign",
        "_seen",
        "_snap",
    )

    def __init__(
        self,
        dims: int,
        *,
        alpha_slow: float = 0.05,
        alpha_fast: float = 0.5,
        snap_samples: int = 3,
        delta_min: float = 0.03,
        delta_sigmas: float = 4.0,
        noise_window: int = 50,
        scalar: bool | None = None,
    ) -> None:
        if isinstance(dims, bool) or not isinstance(dims, int | np.integer) or dims < 1:
            raise ValueError(f"dims must be a positive integer, got {dims!r}")
        for name, value in (("alpha_slow", alpha_slow), ("alpha_fast", alpha_fast)):
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if not isinstance(snap_samples, int) or snap_samples < 1:
            raise ValueError(f"snap_samples must be an integer >= 1, got {snap_samples!r}")
        if not (np.isfinite(delta_min) and delta_min >= 0):
            raise ValueError(f"delta_min must be finite and >= 0, got {delta_min}")
        if not (np.isfinite(delta_sigmas) and delta_sigmas >= 0):
            raise ValueError(f"delta_sigmas must be finite and >= 0, got {delta_sigmas}")
        if not isinstance(noise_window, int) or noise_window < 2:
            raise ValueError(f"noise_window must be an integer >= 2, got {noise_window!r}")
        self._dims = int(dims)
        self._alpha_slow = float(alpha_slow)
        self._alpha_fast = float(alpha_fast)
        self._snap = snap_samples
        self._delta_min = float(delta_min)
        self._delta_sigmas = float(delta_sigmas)
        self._noise_window = noise_window
        if scalar is None:
            scalar = self._dims <= SCALAR_MAX_DIMS
        self._channels: list[_Channel] | None = None
        if scalar:
            self._channels = [
                _Channel(
                    self._alpha_slow,
                    self._alpha_fast,
                    snap_samples,
                    self._delta_min,
                    self._delta_sigmas * MAD_TO_SIGMA,
                    noise_window,
                )
                for _ in range(self._dims)
            ]
        self._rows = np.arange(self._dims)
        self._level = np.full(self._dims, np.nan)
        self._run = np.zeros(self._dims, dtype=np.int64)
        self._run_sign = np.zeros(self._dims)
        self._fast = np.zeros(self._dims, dtype=bool)
        # Ring buffers with a write position per dimension: a missing sample skips only its row.
        self._raw = np.zeros((self._dims, snap_samples))
        self._raw_pos = np.zeros(self._dims, dtype=np.int64)
        self._seen = np.zeros(self._dims, dtype=bool)  # has the dimension had a finite sample
        self._residuals = np.zeros((self._dims, noise_window))
        self._res_pos = np.zeros(self._dims, dtype=np.int64)
        self._res_count = np.zeros(self._dims, dtype=np.int64)

    # -- the filter ---------------------------------------------------------------------------

    def update(self, x: ArrayLike) -> FloatArray:
        """Filter one sample ``x`` of shape ``(dims,)`` and return the new levels (a copy)."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self._dims,):
            raise ValueError(f"sample must have shape ({self._dims},), got {x.shape}")
        if self._channels is not None:
            return np.array(
                [ch.update(v) for ch, v in zip(self._channels, x.tolist(), strict=True)]
            )
        valid = np.isfinite(x)
        if valid.all() and self._seen.all():
            # the common case: slices index the state arrays as views, no fancy-index copies
            self._step(x, self._rows, slice(None))
        else:
            first = valid & ~self._seen
            if first.any():
                idx = np.flatnonzero(first)
                self._level[idx] = x[idx]
                self._seen[idx] = True
                self._remember(x, idx)
            rest = np.flatnonzero(valid & ~first)
            if rest.size:
                self._step(x, rest, rest)
        return self._level.copy()

    def update_values(self, x: Sequence[float] | FloatArray) -> list[float]:
        """:meth:`update` with the new levels as a list of floats.

        On the scalar path a list or tuple of numbers goes in and the levels come out without
        building any numpy array: the agent calls this ten times a second, and with cold caches
        each small array costs it tens of microseconds.
        """
        channels = self._channels
        if channels is not None and type(x) in (list, tuple) and len(x) == self._dims:
            try:
                values = [float(v) for v in x]
            except (TypeError, ValueError):
                pass  # not numbers: update() says what is wrong
            else:
                return [ch.update(v) for ch, v in zip(channels, values, strict=True)]
        return self.update(x).tolist()

    def _step(self, x: FloatArray, rows: NDArray[np.intp], sel: NDArray[np.intp] | slice) -> None:
        """One filter step for the dimensions ``rows`` (all have a level and a finite sample);
        ``sel`` indexes the same dimensions (a slice when they are all of them)."""
        e = x[sel] - self._level[sel]
        # δ ≥ δ_min, so |e| ≤ δ_min can never exceed δ: the MAD is only needed where |e| > δ_min.
        exceed = np.abs(e) > self._delta_min
        if exceed.any():
            exceed[exceed] = np.abs(e[exceed]) > self._delta(rows[exceed])
        sign = np.sign(e)
        run = self._run[sel]
        same = exceed & (run > 0) & (sign == self._run_sign[sel])
        run = np.where(exceed, np.where(same, run + 1, 1), 0)
        fast = self._fast[sel] & exceed
        self._run[sel] = run
        self._run_sign[sel] = np.where(exceed, sign, 0.0)
        self._remember(x, rows)
        self._record_residual(e, rows)
        level = self._level[sel] + np.where(fast, self._alpha_fast, self._alpha_slow) * e
        snap = run == self._snap
        if snap.any():
            # The last N raw samples are exactly the N samples of this run (missing ones are not
            # stored and do not reset the run), so their median is the new level.
            level[snap] = np.median(self._raw[rows[snap]], axis=1)
            fast = fast | snap
        self._fast[sel] = fast
        self._level[sel] = level

    def _delta(self, rows: NDArray[np.intp]) -> FloatArray:
        """δ = max(δ_min, k·1.4826·MAD of the stored residuals) for the dimensions ``rows``."""
        delta = np.full(rows.shape[0], self._delta_min)
        counts = self._res_count[rows]
        full = counts == self._noise_window
        if full.any():  # the common case, one vectorised median for all full windows
            r = self._residuals[rows[full]]
            mad = np.median(np.abs(r - np.median(r, axis=1, keepdims=True)), axis=1)
            delta[full] = np.maximum(self._delta_min, self._delta_sigmas * MAD_TO_SIGMA * mad)
        for i in np.flatnonzero(~full & (counts >= 2)).tolist():
            # a window still filling (the first few seconds): its own length; with fewer than two
            # residuals there is no spread to measure and δ_min stands alone
            r = self._residuals[rows[i], : counts[i]]
            mad_i = float(np.median(np.abs(r - np.median(r))))
            delta[i] = max(self._delta_min, self._delta_sigmas * MAD_TO_SIGMA * mad_i)
        return delta

    def _remember(self, x: FloatArray, rows: NDArray[np.intp]) -> None:
        pos = self._raw_pos[rows]
        self._raw[rows, pos] = x[rows]
        self._raw_pos[rows] = (pos + 1) % self._snap

    def _record_residual(self, e: FloatArray, rows: NDArray[np.intp]) -> None:
        pos = self._res_pos[rows]
        self._residuals[rows, pos] = e
        self._res_pos[rows] = (pos + 1) % self._noise_window
        count = self._res_count[rows]
        if count.min() < self._noise_window:  # only while the window is still filling
            self._res_count[rows] = np.minimum(count + 1, self._noise_window)

    # -- read-only state ----------------------------------------------------------------------

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def scalar(self) -> bool:
        """True when the per-dimension Python path filters the samples."""
        return self._channels is not None

    @property
    def level(self) -> FloatArray:
        """The current levels m (a copy; NaN for a dimension that has seen no finite sample)."""
        if self._channels is not None:
            return np.array([ch.level for ch in self._channels])
        return self._level.copy()

    @property
    def run(self) -> NDArray[np.int64]:
        """The run counters c (a copy)."""
        if self._channels is not None:
            return np.array([ch.run for ch in self._channels], dtype=np.int64)
        return self._run.copy()

    @property
    def fast(self) -> NDArray[np.bool_]:
        """The fast flags (a copy)."""
        if self._channels is not None:
            return np.array([ch.fast for ch in self._channels], dtype=bool)
        return self._fast.copy()

    @property
    def settled(self) -> bool:
        """True when no dimension is in a run beyond δ or following fast after a snap."""
        if self._channels is not None:
            return not any(ch.run or ch.fast for ch in self._channels)
        return not (self._run.any() or self._fast.any())

    def noise(self) -> FloatArray:
        """σ̂ = 1.4826·MAD of the stored residuals per dimension (NaN with fewer than 2)."""
        if self._channels is not None:
            return np.array([ch.noise() for ch in self._channels])
        out = np.full(self._dims, np.nan)
        for row in range(self._dims):
            n = int(self._res_count[row])
            if n >= 2:
                r = self._residuals[row, :n]
                out[row] = MAD_TO_SIGMA * float(np.median(np.abs(r - np.median(r))))
        return out


def _median_sorted(s: list[float]) -> float:
    """The median of an already sorted list, computed as ``np.median`` does (even length: the mean
    of the two middle values, (a + b)/2), so both paths give the same bits."""
    n = len(s)
    half = n // 2
    if n % 2:
        return s[half]
    return (s[half - 1] + s[half]) / 2


def _mad_sorted(s: list[float]) -> float:
    """Median absolute deviation from the median of a sorted list (at least one element).

    The deviations of the values below and above the median are each already ordered, outward
    from the middle, so the middle of their merge is found in n/2 steps without sorting.
    """
    n = len(s)
    med = _median_sorted(s)
    lo = (n - 1) // 2  # the last value <= the median on the left side
    hi = lo + 1
    want = n // 2 + 1  # merge until the element(s) at the middle of the deviations are known
    prev = cur = 0.0
    for _ in range(want):
        prev = cur
        if hi >= n or (lo >= 0 and abs(s[lo] - med) <= abs(s[hi] - med)):
            cur = abs(s[lo] - med)
            lo -= 1
        else:
            cur = abs(s[hi] - med)
            hi += 1
    return cur if n % 2 else (prev + cur) / 2


class _Channel:
    """One dimension of the filter in plain Python, step for step the vectorised one.

    The residual window is kept twice: as a ring (to know which value leaves) and as a sorted list
    (insort/removal by bisection), so the median is an index and the MAD a walk of half the
    window; and it is computed only when |e| exceeds δ_min, as in the vectorised path.
    """

    __slots__ = (
        "_alpha_fast",
        "_alpha_slow",
        "_delta_min",
        "_k_sigma",
        "_raw",
        "_raw_pos",
        "_res_pos",
        "_ring",
        "_snap",
        "_sorted",
        "_window",
        "fast",
        "level",
        "run",
        "sign",
    )

    def __init__(
        self,
        alpha_slow: float,
        alpha_fast: float,
        snap: int,
        delta_min: float,
        k_sigma: float,
        window: int,
    ) -> None:
        self._alpha_slow = alpha_slow
        self._alpha_fast = alpha_fast
        self._snap = snap
        self._delta_min = delta_min
        self._k_sigma = k_sigma  # delta_sigmas · 1.4826, multiplied in the same order as numpy
        self._window = window
        self.level = math.nan
        self.run = 0
        self.sign = 0.0
        self.fast = False
        self._raw = [0.0] * snap
        self._raw_pos = 0
        self._ring: list[float] = []
        self._res_pos = 0
        self._sorted: list[float] = []

    def update(self, x: float) -> float:
        if not math.isfinite(x):
            return self.level  # missing: hold the level, keep the run
        level = self.level
        if level != level:  # NaN: the first finite sample initialises the level
            self.level = x
            self._remember(x)
            return x
        e = x - level
        exceed = False
        mag = abs(e)
        if mag > self._delta_min:
            srt = self._sorted
            if len(srt) >= 2:
                exceed = mag > max(self._delta_min, self._k_sigma * _mad_sorted(srt))
            else:
                exceed = True
        fast = self.fast
        if exceed:
            sign = 1.0 if e > 0 else -1.0
            self.run = self.run + 1 if (self.run > 0 and sign == self.sign) else 1
            self.sign = sign
        else:
            self.run, self.sign, fast = 0, 0.0, False
        self._remember(x)
        self._record_residual(e)
        if self.run == self._snap:
            # the last N raw samples are the N samples of this run (see the vectorised _step)
            level = _median_sorted(sorted(self._raw))
            fast = True
        else:
            level = level + (self._alpha_fast if fast else self._alpha_slow) * e
        self.fast = fast
        self.level = level
        return level

    def _remember(self, x: float) -> None:
        self._raw[self._raw_pos] = x
        self._raw_pos = (self._raw_pos + 1) % self._snap

    def _record_residual(self, e: float) -> None:
        ring = self._ring
        if len(ring) < self._window:
            ring.append(e)
        else:
            old = ring[self._res_pos]
            ring[self._res_pos] = e
            self._res_pos = (self._res_pos + 1) % self._window
            del self._sorted[bisect_left(self._sorted, old)]
        insort(self._sorted, e)

    def noise(self) -> float:
        if len(self._sorted) < 2:
            return math.nan
        return MAD_TO_SIGMA * _mad_sorted(self._sorted)
