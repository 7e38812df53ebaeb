"""The pure pipeline step driven by scripted telemetry and a scripted clock (no sleeping)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.class_capacity import COUNTED_WINDOW
from agent.pipeline import AgentPipeline, CapacityReport, GlobalView, PipelineConfig
from agent.telemetry import Sample
from carico.model import SubspaceModel, capacity_signal
from carico.pods import PodClass, Requests

LEVEL = PipelineConfig().full_level  # k counts the typical workloads that fit under it

NAMES = ("cpu", "memory")
DT = 0.1  # 10 Hz


def sample(cpu: float, mem: float, missing: bool = False) -> Sample:
    return Sample(np.array([cpu, mem]), psi_available=True, missing=missing)


def drive(
    pipe: AgentPipeline,
    t0: float,
    seconds: float,
    y: tuple[float, float],
    pods: int,
    event_at: float | None = None,
    missing: bool = False,
) -> tuple[float, list[CapacityReport]]:
    """Feed ``seconds`` of constant telemetry at 10 Hz; returns the end time and the reports."""
    reports = []
    steps = round(seconds / DT)
    for i in range(steps):
        now = t0 + i * DT
        event = event_at is not None and abs(now - event_at) < DT / 2
        s = sample(math.nan, math.nan, True) if missing else sample(*y)
        r = pipe.step(now, s, pods, pod_event=event)
        if r is not None:
            reports.append(r)
    return t0 + steps * DT, reports


def test_one_report_per_batch_with_k_from_the_local_model() -> None:
    pipe = AgentPipeline(NAMES)
    _, reports = drive(pipe, 0.0, 5.0, (0.3, 0.2), pods=3)
    assert len(reports) == 5  # b = 10 samples at 10 Hz: one per second
    last = reports[-1]
    assert pipe.local is not None
    # Constant telemetry: the local second moment is y yᵀ and k follows from it exactly.
    y = np.array([0.3, 0.2])
    assert np.allclose(pipe.local.second_moment(), np.outer(y, y))
    assert last.k == pytest.approx(capacity_signal(y, pipe.local, level=LEVEL))
    assert last.mode == "live" and not last.global_model
    assert last.avail == pytest.approx(last.k / last.per_pod_cost)
    assert last.features == pytest.approx((0.3, 0.2))
    assert last.samples_missing == 0


def test_half_life_weights() -> None:
    cfg = PipelineConfig(half_life_s=30.0)
    keep, new = cfg.local_weights()
    assert keep**30 == pytest.approx(0.5)  # 30 one-second batches halve the old data
    assert keep + new == pytest.approx(1.0)


def test_merge_with_the_global_model_uses_weights_n_minus_1_to_1() -> None:
    pipe = AgentPipeline(NAMES)
    t, _ = drive(pipe, 0.0, 3.0, (0.3, 0.2), pods=0)
    fleet = SubspaceModel.from_batch(np.array([[0.1, 0.2], [0.6, 0.5]]))
    assert pipe.set_global(GlobalView(fleet, contributing_nodes=4, received_at=t))
    _, reports = drive(pipe, t, 1.0, (0.3, 0.2), pods=0)
    assert pipe.local is not None
    merged = SubspaceModel.merge(fleet, pipe.local, 3, 1)
    r = reports[-1]
    assert r.global_model and r.model_age_s == pytest.approx(1.0 - DT)
    assert r.k == pytest.approx(capacity_signal(np.array([0.3, 0.2]), merged, level=LEVEL))
    assert r.k != pytest.approx(capacity_signal(np.array([0.3, 0.2]), pipe.local, level=LEVEL))


def test_a_stale_global_model_is_no_longer_merged() -> None:
    pipe = AgentPipeline(NAMES, PipelineConfig(global_ttl_s=5.0))
    t, _ = drive(pipe, 0.0, 2.0, (0.3, 0.2), pods=0)
    fleet = SubspaceModel.from_batch(np.array([[0.1, 0.2], [0.6, 0.5]]))
    pipe.set_global(GlobalView(fleet, contributing_nodes=4, received_at=t))
    t, fresh = drive(pipe, t, 4.0, (0.3, 0.2), pods=0)
    assert all(r.global_model for r in fresh)
    _, stale = drive(pipe, t, 3.0, (0.3, 0.2), pods=0)
    assert not stale[-1].global_model  # 6.9 s after it arrived, beyond the 5 s time to live
    assert pipe.local is not None
    assert stale[-1].k == pytest.approx(
        capacity_signal(np.array([0.3, 0.2]), pipe.local, level=LEVEL)
    )


def test_global_model_of_other_dimensions_is_refused() -> None:
    pipe = AgentPipeline(NAMES)
    other = SubspaceModel.from_batch(np.ones((3, 2)) * 0.2)
    assert not pipe.set_global(GlobalView(other, 2, 0.0))
    assert pipe.global_view is None


def test_fleet_prior_sets_the_cold_start_cost() -> None:
    pipe = AgentPipeline(NAMES, PipelineConfig(prior_per_pod_cost=0.1))
    assert pipe.set_fleet_prior(0.04)
    assert not pipe.set_fleet_prior(float("nan"))
    _, reports = drive(pipe, 0.0, 2.0, (0.3, 0.2), pods=2)
    assert reports[-1].per_pod_cost == pytest.approx(0.04)
    assert reports[-1].cost_source == "fleet"


def test_avail_stops_at_the_nodes_max_pods() -> None:
    """A tiny fleet prior makes k / p̂ a thousand pods; the node runs at most --max-pods."""
    pipe = AgentPipeline(NAMES, PipelineConfig(max_pods=30))
    assert pipe.set_fleet_prior(1e-3)
    _, reports = drive(pipe, 0.0, 2.0, (0.3, 0.2), pods=2)
    assert reports[-1].k / reports[-1].per_pod_cost > 1000
    assert reports[-1].avail == 28  # 30 − the 2 running
    with pytest.raises(ValueError, match="max_pods"):
        PipelineConfig(max_pods=0)


def test_pod_change_holds_estimation_and_switches_to_estimate_mode() -> None:
    pipe = AgentPipeline(NAMES, PipelineConfig(hold_s=2.5))
    t, before = drive(pipe, 0.0, 10.0, (0.3, 0.2), pods=2)
    assert all(r.mode == "live" and not r.churn for r in before[1:])
    capacity = before[-1].capacity
    assert math.isfinite(capacity)
    # A pod starts: the watch reports the event and the count goes to 3.
    t, during = drive(pipe, t, 2.0, (0.35, 0.25), pods=3, event_at=t + 0.3)
    # The mode change is reported at the event itself, not at the end of the batch.
    assert during[0].now == pytest.approx(t - 2.0 + 0.3)
    assert during[0].churn and during[0].mode == "estimate"
    assert during[0].avail == pytest.approx(capacity / during[0].per_pod_cost - 3)
    assert during[1].churn and during[1].mode == "estimate"  # the batch report agrees
    assert len(during) == 3  # the early report plus one per batch
    # After the hold the agent is live again.
    _, after = drive(pipe, t, 4.0, (0.35, 0.25), pods=3)
    assert not after[-1].churn and after[-1].mode == "live"


def test_reports_list_the_pods_that_began_to_count_from_the_event_on() -> None:
    """The report made at a pod's event lists its uid (the extender ends the pod's reservation
    on it), and so do the batch reports of the next half minute."""
    pipe = AgentPipeline(NAMES, PipelineConfig(hold_s=2.5))
    web = PodClass("shop/Deployment/web", Requests(0.5, 0.0))

    def sized(running: dict[str, PodClass] | None = None) -> Sample:
        return Sample(np.array([0.3, 0.2]), True, cores=4.0, memory_bytes=8e9, running=running)

    now, reports = 0.0, []
    for i in range(50):  # 5 s, one pod running from the start
        now = i * DT
        reports.append(pipe.step(now, sized({"a": web} if i == 0 else None), 1))
    assert [r.counted_pods for r in reports if r is not None][-1] == ("a",)
    now += DT
    early = pipe.step(now, sized({"a": web, "b": web}), 2, pod_event=True)
    assert early is not None and early.counted_pods == ("b", "a")
    assert early.classes is not None and early.classes.classes[0].pods == 2
    batch = []
    while now < 40.0:
        now += DT
        if (r := pipe.step(now, sized(), 2)) is not None:
            batch.append((r.now, r.counted_pods))
    assert all(counted == ("b", "a") for t, counted in batch if t <= COUNTED_WINDOW)
    assert all(counted == ("b",) for t, counted in batch if COUNTED_WINDOW < t <= 5.1 + 30)
    assert batch[-1][1] == ()


def test_missing_samples_are_counted_and_make_the_live_signal_suspect() -> None:
    pipe = AgentPipeline(NAMES)
    t, ok = drive(pipe, 0.0, 5.0, (0.3, 0.2), pods=1)
    assert ok[-1].mode == "live"
    _, bad = drive(pipe, t, 1.0, (0.3, 0.2), pods=1, missing=True)
    assert pipe.samples_missing == 10
    r = bad[-1]
    assert r.samples_missing == 10 and r.mode == "estimate"
    assert r.features == pytest.approx((0.3, 0.2))  # the EMA held its level


def test_no_report_before_any_telemetry() -> None:
    pipe = AgentPipeline(NAMES)
    _, reports = drive(pipe, 0.0, 2.0, (0.3, 0.2), pods=0, missing=True)
    assert reports == [] and pipe.local is None and pipe.batches == 2


@pytest.mark.parametrize("level", [1.0, 0.8])
def test_a_resource_at_its_floor_is_censored_and_reads_full(level: float) -> None:
    """Clipped noise keeps the smoothed CPU of a full node a little under its full level, so k
    stays a little above 0; within ``censor_headroom`` of full the estimator is told the sample
    is censored and live avail is 0, not k/p̂ (which with a small p̂ would offer several pods)."""
    pipe = AgentPipeline(NAMES, PipelineConfig(prior_per_pod_cost=0.001, full_level=level))
    t, _ = drive(pipe, 0.0, 5.0, (0.5, 0.2), pods=8)
    t, _ = drive(pipe, t, 5.0, (level - 0.015, 0.2), pods=8)  # the EMA reaches the new level
    updates = pipe.estimator.capacity_updates
    _, reports = drive(pipe, t, 20.0, (level - 0.015, 0.2), pods=8)
    last = reports[-1]
    assert last.k > 0.0  # the signal itself is not at its clamp
    assert pipe.estimator.censored and last.mode == "live" and last.avail == 0.0
    assert pipe.estimator.capacity_updates == updates  # a censored sample teaches nothing


def test_the_estimator_follows_a_change_of_the_models_unit() -> None:
    """The global model's typical workload doubles along the limiting resource: k halves for the
    same telemetry, and the estimator's ĉ and p̂ halve with it instead of being gated and
    relearned; avail, a count of pods, is unchanged."""
    pipe = AgentPipeline(NAMES, PipelineConfig(prior_per_pod_cost=0.05))
    small = SubspaceModel.from_batch(np.tile([[0.2], [0.1]], (1, 10)))
    pipe.set_global(GlobalView(small, 50, 0.0))
    t, before = drive(pipe, 0.0, 5.0, (0.3, 0.2), pods=4)
    r0 = before[-1]
    big = SubspaceModel.from_batch(np.tile([[0.4], [0.2]], (1, 10)))  # same direction, σ₁ × 2
    pipe.set_global(GlobalView(big, 50, t))
    _, after = drive(pipe, t, 2.0, (0.3, 0.2), pods=4)
    r1 = after[-1]
    ratio = r1.k / r0.k
    assert 0.45 < ratio < 0.6  # the merged model's w grew by ≈ 49/50·2 + 1/50
    assert r1.per_pod_cost == pytest.approx(r0.per_pod_cost * ratio, rel=0.02)
    assert r1.capacity == pytest.approx(r0.capacity * ratio, rel=0.02)
    assert r1.avail == pytest.approx(r0.avail, rel=0.02)
    assert not pipe.estimator.gated
