"""SubspaceModel: construction, validation and the weighted-mean identity on small cases."""

import numpy as np
import pytest

from carico.model import SubspaceModel


def test_merge_is_the_weighted_mean_of_second_moments() -> None:
    rng = np.random.default_rng(1)
    ya, yb = rng.random((3, 10)), rng.random((3, 7))
    a, b = SubspaceModel.from_batch(ya), SubspaceModel.from_batch(yb)
    merged = SubspaceModel.merge(a, b, 3.0, 1.0)
    expected = (3 * ya @ ya.T / 10 + yb @ yb.T / 7) / 4
    # float64 SVD round trip: errors are ~1e-15 relative; 1e-12 leaves ample room.
    assert np.allclose(merged.second_moment(), expected, atol=1e-12)
    assert np.allclose(a.update(yb, 3.0, 1.0).second_moment(), expected, atol=1e-12)


def test_round_trip_through_arrays_is_exact() -> None:
    m = SubspaceModel.from_batch(np.random.default_rng(2).random((2, 10)))
    u, sigma = m.to_arrays()
    assert SubspaceModel.from_arrays(u, sigma) == m


@pytest.mark.parametrize(
    ("u", "sigma", "message"),
    [
        (np.eye(2), [1.0, np.nan], "NaN"),
        (np.eye(2), [1.0], "shape"),
        (np.eye(2), [0.5, 1.0], "descending"),
        (np.eye(2), [1.0, -0.1], "non-negative"),
        ([[1.0, 1.0], [0.0, 1.0]], [1.0, 0.5], "orthonormal"),
        (np.ones(3), [1.0], "2-d"),
    ],
)
def test_bad_factors_are_rejected_with_a_reason(u: object, sigma: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SubspaceModel(u, sigma)  # type: ignore[arg-type]


def test_merge_refuses_mismatched_dimensions() -> None:
    with pytest.raises(ValueError, match="dimension"):
        SubspaceModel.merge(
            SubspaceModel(np.eye(2), [1, 0]), SubspaceModel(np.eye(3), [1, 0, 0]), 1, 1
        )
