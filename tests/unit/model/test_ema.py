"""DynamicEMA: the acceptance cases of docs/architecture.md#testing and agreement with a scalar
reference.

Every behavioural test runs on both paths of the filter (``scalar=False``: vectorised numpy;
``scalar=True``: plain Python per dimension), and a property test checks that the two paths give
the same output bits sample by sample.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carico.model import DynamicEMA

H = 0.5
BASE = 0.2
ALPHA_SLOW = 0.05


# Both paths of the filter; a parameter rather than a fixture, so hypothesis tests can use it too.
both_paths = pytest.mark.parametrize("scalar", [False, True], ids=["vectorised", "scalar"])


def run(samples: list[float] | np.ndarray, scalar: bool, **params: float) -> np.ndarray:
    """Feed a 1-D series through a one-dimensional filter; return the levels after each sample."""
    ema = DynamicEMA(1, scalar=scalar, **params)  # type: ignore[arg-type]
    return np.array([ema.update([x])[0] for x in samples])


def reference(samples: list[float]) -> list[float]:
    """The rules of docs/architecture.md#dynamic-ema written out literally for one feature, as an
    independent check of the class."""
    m = math.nan
    c, sign, fast = 0, 0.0, False
    raw: list[float] = []
    residuals: list[float] = []
    out = []
    for x in samples:
        if not math.isfinite(x):
            out.append(m)  # missing: hold m, keep c
            continue
        if math.isnan(m):
            m = x
            raw.append(x)
            out.append(m)
            continue
        e = x - m
        if len(residuals) >= 2:
            r = np.array(residuals[-50:])
            sigma = 1.4826 * float(np.median(np.abs(r - np.median(r))))
        else:
            sigma = 0.0
        delta = max(0.03, 4 * sigma)
        if abs(e) > delta:
            s = math.copysign(1.0, e)
            c = c + 1 if (c > 0 and s == sign) else 1
            sign = s
        else:
            c, sign, fast = 0, 0.0, False
        raw.append(x)
        residuals.append(e)
        if c == 3:
            m = float(np.median(raw[-3:]))
            fast = True
        else:
            m = m + (0.5 if fast else ALPHA_SLOW) * e
        out.append(m)
    return out


# -- acceptance (docs/architecture.md#testing) -----------------------------------------------------


@pytest.mark.parametrize("sign", [1.0, -1.0])
@both_paths
def test_one_sample_spike_moves_the_level_by_at_most_alpha_slow_h(
    sign: float, scalar: bool
) -> None:
    base = 0.6
    out = run([base] * 60 + [base + sign * H] + [base] * 30, scalar)
    assert np.max(np.abs(out - base)) <= ALPHA_SLOW * H + 1e-9


@pytest.mark.parametrize("sign", [1.0, -1.0])
@both_paths
def test_two_sample_spike_moves_the_level_by_at_most_ten_percent(sign: float, scalar: bool) -> None:
    base = 0.6
    out = run([base] * 60 + [base + sign * H] * 2 + [base] * 30, scalar)
    # Two slow steps: 1 − (1 − α_slow)² = 9.75 % of H.
    assert np.max(np.abs(out - base)) <= (1 - (1 - ALPHA_SLOW) ** 2) * H + 1e-9


@both_paths
def test_noisy_two_sample_spike_stays_under_fifteen_percent_over_1000_seeds(scalar: bool) -> None:
    # The filters of the dimensions are independent, so 1000 seeds run as 1000 dimensions at once.
    seeds = 1000
    rng = np.random.default_rng(20260321)
    clean = np.array([BASE] * 60 + [BASE + H] * 2 + [BASE] * 38)
    samples = clean[:, None] + rng.normal(0.0, 0.02, (clean.size, seeds))
    ema = DynamicEMA(seeds, scalar=scalar)
    levels = np.array([ema.update(row) for row in samples])
    peak = np.max(levels[60:] - BASE, axis=0) / H
    assert peak.max() <= 0.15


@pytest.mark.parametrize(("start", "end"), [(BASE, BASE + H), (BASE + H, BASE)])
@both_paths
def test_step_reaches_ninety_percent_within_three_samples(
    start: float, end: float, scalar: bool
) -> None:
    out = run([start] * 60 + [end] * 20, scalar)
    progress = (out[60:] - start) / (end - start)
    assert progress[2] >= 0.9
    assert np.all(progress[2:] >= 0.9)  # and stays there


@both_paths
def test_noisy_step_reaches_ninety_percent_within_three_samples(scalar: bool) -> None:
    seeds = 200
    rng = np.random.default_rng(7)
    clean = np.array([BASE] * 60 + [BASE + H] * 20)
    samples = clean[:, None] + rng.normal(0.0, 0.02, (clean.size, seeds))
    ema = DynamicEMA(seeds, scalar=scalar)
    levels = np.array([ema.update(row) for row in samples])
    # The snap takes the median of three noisy samples: within ±0.05 (2.5σ, 5 % of H) of the new
    # level for every seed here, so 90 % of H is reached at the third sample.
    assert np.min((levels[62] - BASE) / H) >= 0.9


@both_paths
def test_400_ms_pulse_comes_through(scalar: bool) -> None:
    out = run([BASE] * 60 + [BASE + H] * 4 + [BASE] * 20, scalar)
    assert (out.max() - BASE) / H >= 0.9


@both_paths
def test_steady_noise_is_reduced_to_a_fifth_of_its_std(scalar: bool) -> None:
    rng = np.random.default_rng(11)
    x = 0.5 + rng.normal(0.0, 0.02, 5000)
    out = run(x, scalar)
    # A plain EMA with α = 0.05 gives √(α/(2−α)) ≈ 0.16; rare snaps on noise would push it higher.
    assert out[200:].std() / x[200:].std() <= 0.2


@both_paths
def test_missing_sample_holds_the_level_and_keeps_the_run(scalar: bool) -> None:
    ema = DynamicEMA(1, scalar=scalar)
    for _ in range(30):
        ema.update([BASE])
    ema.update([BASE + H])
    ema.update([BASE + H])
    held = ema.level
    assert ema.update([math.nan])[0] == held[0]
    assert ema.run.tolist() == [2]
    # The run continues: the next exceeding sample is the third and snaps to the step.
    assert ema.update([BASE + H])[0] == pytest.approx(BASE + H)
    assert ema.fast.tolist() == [True]


@both_paths
def test_first_sample_initialises_each_dimension_on_its_own(scalar: bool) -> None:
    ema = DynamicEMA(2, scalar=scalar)
    first = ema.update([math.nan, 0.4])
    assert math.isnan(first[0]) and first[1] == 0.4
    second = ema.update([0.7, 0.4])
    assert second.tolist() == [0.7, 0.4]


@both_paths
def test_settled_after_a_step_once_the_samples_stay_within_delta(scalar: bool) -> None:
    ema = DynamicEMA(1, scalar=scalar)
    for _ in range(30):
        ema.update([BASE])
    assert ema.settled
    for _ in range(3):
        ema.update([BASE + H])
    assert not ema.settled
    ema.update([BASE + H])
    assert ema.settled


@both_paths
def test_noise_estimate_follows_the_input_noise(scalar: bool) -> None:
    rng = np.random.default_rng(3)
    ema = DynamicEMA(1, scalar=scalar)
    for x in 0.5 + rng.normal(0.0, 0.02, 200):
        ema.update([x])
    # 1.4826·MAD of 50 residuals: relative standard error ≈ 1.17/√50 ≈ 17 %; ±40 % is > 2σ.
    assert 0.012 <= ema.noise()[0] <= 0.028


# -- agreement with the literal reference ----------------------------------------------------------

series = st.lists(
    st.one_of(st.floats(0.0, 1.0), st.just(math.nan)),
    min_size=1,
    max_size=120,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(series)
@both_paths
def test_matches_the_literal_reference(scalar: bool, samples: list[float]) -> None:
    expected = reference(samples)
    got = run(samples, scalar)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12, equal_nan=True)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(series, series, series)
@both_paths
def test_dimensions_are_independent(
    scalar: bool, a: list[float], b: list[float], c: list[float]
) -> None:
    length = min(len(a), len(b), len(c))
    cols = [np.array(s[:length]) for s in (a, b, c)]
    joint = DynamicEMA(3, scalar=scalar)
    together = np.array([joint.update([x, y, z]) for x, y, z in zip(*cols, strict=True)])
    for i, col in enumerate(cols):
        np.testing.assert_array_equal(together[:, i], run(col, scalar))


# -- the two paths agree ------------------------------------------------------------------------

# Wider than the telemetry range, with both kinds of missing value, so both paths see large jumps,
# snaps in both directions, NaN holds and late first samples.
wide_series = st.lists(
    st.one_of(
        st.floats(-2.0, 2.0),
        st.sampled_from([0.0, 0.5, 1.0]),  # repeats: ties in the sorted residuals and the medians
        st.just(math.nan),
        st.just(math.inf),
    ),
    min_size=1,
    max_size=150,
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    st.lists(wide_series, min_size=1, max_size=4),
    st.sampled_from(
        [
            {},
            # an even N (the snap median is a mean of two), a short window that wraps often, and
            # δ_min = 0 so that the MAD decides at almost every sample
            {"snap_samples": 4, "noise_window": 5, "delta_min": 0.0},
            {"snap_samples": 1, "noise_window": 2, "delta_sigmas": 1.0},
            {"snap_samples": 2, "noise_window": 7, "alpha_fast": 1.0, "delta_min": 0.01},
        ]
    ),
)
def test_the_two_paths_agree_sample_by_sample(
    columns: list[list[float]], params: dict[str, float]
) -> None:
    length = min(len(c) for c in columns)
    samples = np.array([c[:length] for c in columns]).T
    vec = DynamicEMA(len(columns), scalar=False, **params)  # type: ignore[arg-type]
    sca = DynamicEMA(len(columns), scalar=True, **params)  # type: ignore[arg-type]
    for x in samples:
        # Exactly equal, not close: the scalar path repeats numpy's arithmetic operation by
        # operation (NaN in the same places counts as equal).
        np.testing.assert_array_equal(sca.update(x), vec.update(x))
        np.testing.assert_array_equal(sca.run, vec.run)
        np.testing.assert_array_equal(sca.fast, vec.fast)
        np.testing.assert_array_equal(sca.noise(), vec.noise())
        assert sca.settled == vec.settled


@both_paths
def test_update_values_gives_the_levels_of_update_as_floats(scalar: bool) -> None:
    rng = np.random.default_rng(5)
    samples = np.where(rng.random((300, 2)) < 0.1, math.nan, 0.3 + rng.normal(0, 0.05, (300, 2)))
    samples[100:140] += 0.4  # a step, so that snaps and fast following happen too
    by_array, by_values = DynamicEMA(2, scalar=scalar), DynamicEMA(2, scalar=scalar)
    for i, x in enumerate(samples):
        # tuples (what the host source gives), lists and arrays all go in
        values = by_values.update_values(tuple(x.tolist()) if i % 2 else x.tolist())
        assert all(type(v) is float for v in values)
        np.testing.assert_array_equal(np.array(values), by_array.update(x))
    with pytest.raises(ValueError, match="shape"):
        by_values.update_values((0.1, 0.2, 0.3))
    with pytest.raises(ValueError):
        by_values.update_values(("not a number", 0.2))


def test_few_dimensions_take_the_scalar_path_by_default() -> None:
    assert DynamicEMA(2).scalar and DynamicEMA(8).scalar
    assert not DynamicEMA(9).scalar
    assert not DynamicEMA(2, scalar=False).scalar and DynamicEMA(100, scalar=True).scalar


def test_outputs_are_float_arrays_of_the_dims() -> None:
    for path in (False, True):
        ema = DynamicEMA(2, scalar=path)
        out = ema.update(np.array([0.1, math.nan]))
        assert out.dtype == np.float64 and out.shape == (2,)
        assert ema.run.dtype == np.int64 and ema.fast.dtype == np.bool_
        assert ema.noise().shape == (2,)


# -- input checking --------------------------------------------------------------------------------


@both_paths
def test_wrong_sample_shape_is_rejected(scalar: bool) -> None:
    with pytest.raises(ValueError, match="shape"):
        DynamicEMA(2, scalar=scalar).update([0.1, 0.2, 0.3])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"dims": 0}, "dims"),
        ({"dims": 2, "alpha_slow": 0.0}, "alpha_slow"),
        ({"dims": 2, "alpha_fast": 1.5}, "alpha_fast"),
        ({"dims": 2, "snap_samples": 0}, "snap_samples"),
        ({"dims": 2, "delta_min": -0.1}, "delta_min"),
        ({"dims": 2, "noise_window": 1}, "noise_window"),
    ],
)
@both_paths
def test_bad_parameters_are_rejected(params: dict[str, float], message: str, scalar: bool) -> None:
    with pytest.raises(ValueError, match=message):
        DynamicEMA(**params, scalar=scalar)  # type: ignore[arg-type]
