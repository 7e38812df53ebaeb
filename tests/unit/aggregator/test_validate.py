"""Every class of bad model is refused with a message naming the problem; good ones pass."""

import math

import numpy as np
import pytest

from aggregator.validate import (
    COST_SPREAD,
    MAX_WEIGHT,
    MIN_FLEET_COSTS,
    SenderPolicy,
    ValidationError,
    _check_factor_2x2,
    _check_factor_numpy,
    _check_factor_small,
    check_factor,
    checked_entry,
    cost_band,
    validate_local_model,
)
from protos.carico.v1 import aggregator_pb2

FEATURES = ("cpu", "memory")


def _good(make_local, rng: np.random.Generator) -> aggregator_pb2.LocalModel:  # type: ignore[no-untyped-def]
    return make_local("node-1.example", rng.uniform(size=(2, 10)), costs=(0.5,))


def test_a_real_model_passes_and_becomes_an_entry(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    message = _good(make_local, rng)
    entry, names = validate_local_model(message, FEATURES, received_at=5.0)
    assert names == FEATURES
    assert (entry.node, entry.d, entry.r, entry.weight) == ("node-1.example", 2, 2, 1)
    assert entry.u == tuple(message.model.u) and entry.per_pod_costs == (0.5,)
    assert entry.received_at == 5.0


def test_unset_weight_means_one_node(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    message = _good(make_local, rng)
    message.weight = 0
    assert validate_local_model(message, None, 0.0)[0].weight == 1


def _mutations() -> list[tuple[str, object, str]]:
    def node(value: str):  # type: ignore[no-untyped-def]
        def apply(m: aggregator_pb2.LocalModel) -> None:
            m.node = value

        return apply

    def model(**fields):  # type: ignore[no-untyped-def]
        def apply(m: aggregator_pb2.LocalModel) -> None:
            for key, value in fields.items():
                if isinstance(value, list):
                    getattr(m.model, key)[:] = value
                else:
                    setattr(m.model, key, value)

        return apply

    def envelope(**fields):  # type: ignore[no-untyped-def]
        def apply(m: aggregator_pb2.LocalModel) -> None:
            for key, value in fields.items():
                if isinstance(value, list):
                    getattr(m, key)[:] = value
                else:
                    setattr(m, key, value)

        return apply

    def no_model(m: aggregator_pb2.LocalModel) -> None:
        m.ClearField("model")

    def scale_u(m: aggregator_pb2.LocalModel) -> None:
        m.model.u[:] = [2 * x for x in m.model.u]

    def swap_sigma(m: aggregator_pb2.LocalModel) -> None:
        m.model.sigma[:] = list(reversed(m.model.sigma))

    def nan_u(m: aggregator_pb2.LocalModel) -> None:
        m.model.u[0] = math.nan

    def inf_sigma(m: aggregator_pb2.LocalModel) -> None:
        m.model.sigma[1] = math.inf

    def negative_sigma(m: aggregator_pb2.LocalModel) -> None:
        m.model.sigma[1] = -0.01

    return [
        ("empty node", node(""), "node name is empty"),
        ("upper-case node", node("Node-1"), "DNS-1123"),
        ("underscore node", node("node_1"), "DNS-1123"),
        ("trailing dash", node("node-"), "DNS-1123"),
        ("long node", node("a" * 254), "at most 253"),
        ("no model", no_model, "no model"),
        ("d vs names", model(d=3), "d=3 but 2 feature names"),
        ("u length", model(u=[1.0, 0.0, 0.0]), "U has 3 values"),
        ("sigma length", model(sigma=[0.5]), "sigma has 1 values"),
        ("rank 0", model(r=0), "rank r=0"),
        ("rank > d", model(r=3), "rank r=3"),
        ("NaN in U", nan_u, "U contains NaN or inf"),
        ("inf in sigma", inf_sigma, "sigma contains NaN or inf"),
        ("negative sigma", negative_sigma, "non-negative"),
        ("ascending sigma", swap_sigma, "descending"),
        ("sigma above sqrt(d)", model(sigma=[1.5, 0.1]), r"exceeds sqrt\(d\)"),
        ("not orthonormal", scale_u, "not orthonormal"),
        ("other features", model(feature_names=["cpu", "disk"]), "differs from this aggregator"),
        ("weight too large", envelope(weight=MAX_WEIGHT + 1), "weight"),
        ("more costs than nodes", envelope(per_pod_costs=[0.1, 0.2]), "2 per-pod costs"),
        ("NaN cost", envelope(per_pod_costs=[math.nan]), "per-pod cost"),
        ("zero cost", envelope(per_pod_costs=[0.0]), "per-pod cost"),
        ("negative cost", envelope(per_pod_costs=[-1.0]), "per-pod cost"),
        ("NaN timestamp", envelope(timestamp=math.nan), "timestamp"),
        ("negative timestamp", envelope(timestamp=-1.0), "timestamp"),
    ]


@pytest.mark.parametrize(
    ("mutate", "expected"), [m[1:] for m in _mutations()], ids=[m[0] for m in _mutations()]
)
def test_every_bad_input_class_is_refused_with_its_reason(
    make_local, rng, mutate, expected
) -> None:  # type: ignore[no-untyped-def]
    message = _good(make_local, rng)
    mutate(message)
    with pytest.raises(ValidationError, match=expected):
        validate_local_model(message, FEATURES, 0.0)


def test_feature_names_are_checked_when_no_set_is_pinned(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    message = _good(make_local, rng)
    message.model.feature_names[:] = ["cpu", "cpu"]
    with pytest.raises(ValidationError, match="not distinct"):
        validate_local_model(message, None, 0.0)
    message.model.feature_names[:] = ["cpu", "mem ory"]
    with pytest.raises(ValidationError, match="feature name 'mem ory' is invalid"):
        validate_local_model(message, None, 0.0)


def _random_factor(rng: np.random.Generator, d: int, r: int) -> tuple[list[float], list[float]]:
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    sigma = np.sort(rng.uniform(0, math.sqrt(d) / r, size=r))[::-1]
    return q[:, :r].ravel().tolist(), sigma.tolist()


def test_small_and_numpy_paths_apply_the_same_rules(rng: np.random.Generator) -> None:
    """Random good factors and corruptions of them get the same verdict from both paths."""
    corruptions = [
        lambda u, s: (u, s),
        lambda u, s: ([x * 1.001 for x in u], s),  # breaks orthonormality by ~2e-3
        lambda u, s: ([x * (1 + 1e-8) for x in u], s),  # within tolerance
        lambda u, s: (u, [math.sqrt(len(u) / len(s)) * 1.01, *s[1:]]),
        lambda u, s: (u, list(reversed(s))),
        lambda u, s: ([math.nan, *u[1:]], s),
        lambda u, s: (u, [*s[:-1], -1e-3]),
    ]
    for _ in range(50):
        d = int(rng.integers(1, 9))
        r = int(rng.integers(1, d + 1))
        u, s = _random_factor(rng, d, r)
        for corrupt in corruptions:
            cu, cs = corrupt(u, s)
            if len(cs) != r:
                continue
            verdicts = []
            for check in (_check_factor_small, _check_factor_numpy):
                try:
                    check(d, r, cu, cs)
                    verdicts.append("ok")
                except ValidationError as exc:
                    verdicts.append(str(exc).split(":")[0].split(" (")[0][:20])
            assert verdicts[0] == verdicts[1], (d, r, verdicts)


def test_large_factors_take_the_numpy_path_and_are_checked(rng: np.random.Generator) -> None:
    u, s = _random_factor(rng, 12, 12)
    check_factor(12, 12, u, s)
    bad = list(u)
    bad[5] += 0.01
    with pytest.raises(ValidationError, match="not orthonormal"):
        check_factor(12, 12, bad, s)


def test_dimension_and_rank_ranges() -> None:
    with pytest.raises(ValidationError, match="d=65 out of range"):
        check_factor(65, 1, [1.0] + [0.0] * 64, [0.5])
    with pytest.raises(ValidationError, match="d=0 out of range"):
        check_factor(0, 0, [], [])


def test_the_unrolled_2x2_check_never_accepts_what_the_general_one_refuses(
    rng: np.random.Generator,
) -> None:
    """Perturbations straddling the tolerances: both paths reach the same verdict."""
    seen = set()
    for _ in range(2000):
        u, s = _random_factor(rng, 2, 2)
        scale = 10.0 ** rng.uniform(-9, -4)  # straddles the 1e-6 tolerance
        u = [x + scale * float(rng.normal()) for x in u]
        s = [x + scale * float(rng.normal()) for x in s]
        if rng.uniform() < 0.1:
            s = [math.sqrt(2) * (1 + float(rng.uniform(-1e-8, 1e-8))), s[1] * 0.1]
        verdicts = []
        for check in (_check_factor_2x2, _check_factor_small):
            try:
                check(*(() if check is _check_factor_2x2 else (2, 2)), u, s)  # type: ignore[operator]
                verdicts.append(True)
            except ValidationError:
                verdicts.append(False)
        assert verdicts[0] == verdicts[1], (u, s)
        seen.add(verdicts[0])
    assert seen == {True, False}  # the perturbations really straddle the tolerances


@pytest.mark.parametrize(
    ("weight", "costs", "dims"), [(0, (), 2), (1, (0.5,), 2), (7, (0.1, 0.2, 0.3), 2), (1, (), 5)]
)
def test_the_entry_of_a_checked_model_is_the_validated_entry(
    make_local, rng, weight: int, costs: tuple[float, ...], dims: int
) -> None:  # type: ignore[no-untyped-def]
    # What the merger builds from a model a worker validated must be what validation builds.
    message = make_local("n-1", rng.uniform(size=(dims, 9)), weight=weight, costs=costs)
    names = tuple(message.model.feature_names)
    policy = SenderPolicy(frozenset({"n-1"}))  # a child aggregator, for the weight of 7
    assert checked_entry(message, 7.0) == validate_local_model(message, names, 7.0, (), policy)


def test_only_a_named_child_stands_for_more_than_one_node(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    message = make_local("agg-b", rng.uniform(size=(2, 6)), weight=40, costs=(0.1,) * 40)
    with pytest.raises(ValidationError, match="a node is one node"):
        validate_local_model(message, FEATURES, 0.0)
    child = SenderPolicy(frozenset({"agg-b"}), max_child_weight=40)
    assert validate_local_model(message, FEATURES, 0.0, (), child)[0].weight == 40
    message.weight = 41
    with pytest.raises(ValidationError, match="above --max-child-weight 40"):
        validate_local_model(message, FEATURES, 0.0, (), child)


def test_costs_absurd_for_the_fleet_are_refused_once_its_median_is_known(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    assert cost_band(0.1, MIN_FLEET_COSTS - 1) is None  # too few costs to judge by
    assert cost_band(None, 100) is None
    band = cost_band(0.1, MIN_FLEET_COSTS)
    assert band == pytest.approx((0.1 / COST_SPREAD, 0.1 * COST_SPREAD))
    for cost, ok in ((0.1 * COST_SPREAD, True), (0.1 * COST_SPREAD * 1.01, False), (1e-5, False)):
        message = make_local("n-1", rng.uniform(size=(2, 6)), costs=(cost,))
        if ok:
            validate_local_model(message, FEATURES, 0.0, (), band=band)
        else:
            with pytest.raises(ValidationError, match="absurd for this fleet"):
                validate_local_model(message, FEATURES, 0.0, (), band=band)
        validate_local_model(message, FEATURES, 0.0)  # without a band, only the absolute bound
