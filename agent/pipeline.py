"""The agent's pure per-sample step: samples in, capacity reports out.

Design: docs/architecture.md#data-flow.

Every sample goes through the Dynamic EMA; every ``batch`` samples (1 s at 10 Hz) the batch of
smoothed vectors updates the local model, the local model is merged with the latest global model
(weights N−1 : 1), the capacity signal k is computed on the current smoothed telemetry, the
cost/capacity estimator observes it, and avail is computed in live or estimate mode. With k the
estimator gets what only the pipeline knows: whether k is censored (a resource within
``censor_headroom`` of full), the pod count lag-matched to the EMA (for its churn filter), and the
model's change of unit (``rescale``) or of limiting resource (``new_line``) since the last batch.

Estimate mode (avail = ĉ/p̂ − n) is used while the estimator halts for churn or rejects k, and while
the live signal is suspect (more than half of the batch's samples missing); it needs a known
capacity, so before that the agent stays live. No I/O and no clock: ``now`` comes in with every call
(monotonic seconds), so tests drive it with a scripted source. :mod:`agent.service` runs it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agent.class_capacity import CapacityView, ClassCapacity
from agent.telemetry import Sample
from carico.footprint import FleetSummary, Footprint
from carico.model import (
    DEFAULT_K_MAX,
    CostCapacityEstimator,
    DynamicEMA,
    SubspaceModel,
    capacity_signal,
)
from carico.pods import PodClass


@dataclass(frozen=True)
class PipelineConfig:
    sample_hz: float = 10.0
    batch: int = 10
    half_life_s: float = 30.0
    k_max: float = DEFAULT_K_MAX
    # Hold estimation this long after the last pod event (EMA settling + one batch,
    # docs/architecture.md#cost-and-capacity).
    hold_s: float = 2.5
    prior_per_pod_cost: float = 0.1
    # The most pods the node runs (kubelet's --max-pods, 110 by default): the one-cost avail never
    # passes max_pods − n, and a learned per-pod cost keeps the empty node within it
    # (docs/architecture.md#cost-and-capacity).
    max_pods: int = 110
    # The smoothed signal sees the pod count of this many samples ago: the Dynamic EMA snaps to a
    # step after N = 3 samples and the step lands one sample later. Measured on the simulator's
    # Job ramps: k regressed on the count lagged 0..15 samples fits best at 4 (residual 0.112 vs
    # 0.126 unlagged). The churn filter uses it (docs/architecture.md#cost-and-capacity);
    # width: the EMA's median of 3.
    pods_lag_samples: int = 4
    # A pod's measurements are learned from this long after they are taken, and dropped if the
    # pod ends meanwhile: its process exits up to a relist (1 s) plus a status write before the
    # pod watch says so, and readings in between show it idle
    # (docs/architecture.md#cost-and-capacity).
    exit_lag_s: float = 2.0
    # A resource within this of full is at its floor: its noisy samples are clipped at 1, so the
    # smoothed level stops short of 1 and k stays a little above 0 on a full node. Such a k is
    # censored like k = 0. 0.03 is the EMA's δ_min, the smallest level change it treats as real.
    censor_headroom: float = 0.03
    # Live signal is suspect when more than this fraction of a batch's samples is missing.
    max_missing_fraction: float = 0.5
    # A global model older than this (the aggregator has been unreachable) is no longer merged:
    # the node falls back to its own model rather than lean on a fleet view of unknown age.
    global_ttl_s: float = 300.0
    # The level of a feature at which the node counts as full (k, avail and the per-class
    # headroom alike): a trade-off between pod completion (lower) and utilisation (higher);
    # docs/architecture.md#avail says how the default was measured.
    full_level: float = 0.85
    # Workload classes whose footprints a node keeps (least recently seen dropped).
    max_classes: int = 64
    ema: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (self.sample_hz > 0 and self.batch >= 1 and self.half_life_s > 0):
            raise ValueError("sample rate, batch size and half-life must be positive")
        if not 0 <= self.max_missing_fraction < 1:
            raise ValueError("max_missing_fraction must be in [0, 1)")
        if not self.global_ttl_s > 0:
            raise ValueError("the global model's time to live must be positive")
        if not (math.isfinite(self.exit_lag_s) and self.exit_lag_s >= 0):
            raise ValueError("exit_lag_s must be a number of seconds >= 0")
        if self.pods_lag_samples < 0 or not 0 <= self.censor_headroom < 1:
            raise ValueError("pods_lag_samples must be >= 0 and censor_headroom in [0, 1)")
        if not 0 < self.full_level <= 1:
            raise ValueError("full_level must be in (0, 1]")
        if self.max_classes < 1:
            raise ValueError("max_classes must be at least 1")
        if self.max_pods < 1:
            raise ValueError("max_pods must be at least 1")

    @property
    def batch_seconds(self) -> float:
        return self.batch / self.sample_hz

    def local_weights(self) -> tuple[float, float]:
        """(old, new) weights per batch so that old data halves every ``half_life_s``."""
        keep = 0.5 ** (self.batch_seconds / self.half_life_s)
        return keep, 1.0 - keep


@dataclass(frozen=True)
class GlobalView:
    """The latest global model from the aggregator, as the pipeline uses it."""

    model: SubspaceModel
    contributing_nodes: int
    received_at: float  # monotonic seconds


@dataclass(frozen=True)
class CapacityReport:
    """What the agent reports once per batch (docs/architecture.md#avail)."""

    now: float
    avail: float
    k: float
    capacity: float
    per_pod_cost: float
    pods: int
    mode: str
    features: tuple[float, ...]
    psi_available: bool
    churn: bool
    global_model: bool
    model_age_s: float
    samples_missing: int
    cost_source: str
    classes: CapacityView | None = None  # per-class capacity (None until the node size is known)
    # The pods this report counts that began to count lately (docs/architecture.md#reservations).
    counted_pods: tuple[str, ...] = ()


class AgentPipeline:
    """The step function; one instance per node."""

    def __init__(self, feature_names: tuple[str, ...], config: PipelineConfig | None = None):
        self.config = config or PipelineConfig()
        self.feature_names = tuple(feature_names)
        d = len(self.feature_names)
        self.ema = DynamicEMA(d, **self.config.ema)
        self.estimator = CostCapacityEstimator(
            prior_per_pod_cost=self.config.prior_per_pod_cost,
            hold_seconds=self.config.hold_s,
            max_pods=self.config.max_pods,
        )
        self.local: SubspaceModel | None = None
        self.global_view: GlobalView | None = None
        self.samples = 0
        self.samples_missing = 0
        self.batches = 0
        self.last_report: CapacityReport | None = None
        # The batch's smoothed vectors as lists of floats: one array per batch, not per sample.
        self._rows: list[list[float]] = []
        self._batch_missing = 0
        self._batch_event = False
        self._last_event = -math.inf
        self._psi_available = True
        self._y: list[float] = [math.nan] * d
        self._w: np.ndarray | None = None  # the expected workload in the estimator's unit
        self._j = -1  # the resource that limited k at the last batch
        # pod counts of the last samples, oldest first, for the lag-matched count
        self._pod_history: deque[int] = deque(maxlen=self.config.pods_lag_samples + 3)
        self.classes = ClassCapacity(
            self.feature_names,
            self.config.full_level,
            self.config.max_classes,
            # the smoothed signal sees the pods of this long ago (see pods_lag_samples)
            lag=self.config.pods_lag_samples / self.config.sample_hz,
            exit_lag=self.config.exit_lag_s,
        )
        # CPU utilisation and pressure since the last per-pod usage reading (sums, counts)
        self._cpu_sums = [0.0, 0.0, 0, 0]
        self._default: Footprint | None = None  # the last legacy p̂·w in absolute units

    # -- inputs -------------------------------------------------------------------------------

    def set_global(self, view: GlobalView | None) -> bool:
        """Use ``view`` for the merge from the next batch on; False if its shape does not fit."""
        if view is not None and view.model.d != len(self.feature_names):
            return False
        self.global_view = view
        return True

    def set_fleet_prior(self, per_pod_cost: float) -> bool:
        """The aggregator's median per-pod cost, used until this node has learned its own."""
        if not (math.isfinite(per_pod_cost) and per_pod_cost > 0):
            return False
        return self.estimator.set_prior(per_pod_cost)

    def set_fleet_classes(self, fleet: FleetSummary) -> None:
        """The aggregator's per-class medians and request ratios (priors for unlearned classes)."""
        self.classes.fleet = fleet

    def set_pods(self, now: float, running: Mapping[str, PodClass]) -> None:
        """The running workload pods by uid, with their classes (from the pod watch)."""
        self.classes.set_running(now, running)

    def step(
        self, now: float, sample: Sample, pods: int | None, pod_event: bool = False
    ) -> CapacityReport | None:
        """One sample at ``now``; returns a report when it completes a batch, else None.

        A pod event while live also returns an immediate estimate-mode report (a mode change).
        ``pods`` None means the count is not known yet (the pod watch has not listed): the model
        learns, but the estimator waits and nothing is reported.

        ``pod_event`` says a pod event (or a churn hint) happened since the previous step.
        """
        self.samples += 1
        self._psi_available = sample.psi_available
        self.classes.set_node(sample.cores, sample.memory_bytes)
        if sample.running is not None:
            self.classes.set_running(now, sample.running)
        sums = self._cpu_sums
        if math.isfinite(sample.cpu_util):
            sums[0] += sample.cpu_util
            sums[2] += 1
        if math.isfinite(sample.psi_cpu):
            sums[1] += sample.psi_cpu
            sums[3] += 1
        learned = False
        if sample.pod_usage is not None:
            util_sum, psi_sum, n_util, n_psi = sums
            self._cpu_sums = [0.0, 0.0, 0, 0]
            known = len(self.classes.learner)
            self.classes.measure(
                now,
                sample.pod_usage,
                util_sum / n_util if n_util else math.nan,
                psi_sum / n_psi if n_psi else math.nan,
                sample.psi_available,
            )
            learned = len(self.classes.learner) > known
        if sample.missing:
            self.samples_missing += 1
            self._batch_missing += 1
        early = None
        if pod_event:
            self._batch_event = True
            self._last_event = now
        if (pod_event or learned) and pods is not None:
            # The running pods changed, or a class got its first measurement: tell the extender
            # now rather than at the end of the batch.
            early = self._churn_report(now, pods, churn=pod_event)
        if pods is not None:
            self._pod_history.append(pods)
        self._y = self.ema.update_values(sample.features)
        self._rows.append(self._y)
        if len(self._rows) < self.config.batch:
            return early
        return self._close_batch(now, pods)

    def _lagged_pods(self) -> float | None:
        """The pod count as the smoothed signal sees it: mean of 3 samples ending the lag ago."""
        history = self._pod_history
        if len(history) < (history.maxlen or 0):
            return None
        return sum(history[i] for i in range(3)) / 3.0

    def _churn_report(self, now: float, pods: int, churn: bool = True) -> CapacityReport | None:
        """At a pod event, switch to estimate mode at once instead of at the end of the batch.

        Nothing is learned here: the report repeats the last one with the new pod count,
        avail = ĉ/p̂ − n and the per-class headroom with the running pods as they are now, so the
        extender hears about the churn without waiting up to a second. With per-class data this
        report is made in every mode: the headroom changed.
        """
        last, est = self.last_report, self.estimator
        if last is None:
            return None
        classes = last.classes
        counted = self.classes.counted_recently(now)
        if classes is not None and self._default is not None:
            # The running pods changed: the expected use counts them at once, in every mode.
            classes = self.classes.view(now, None, self._psi_available, self._default, False)
        if churn and last.mode != "estimate" and math.isfinite(est.capacity):
            report = replace(
                last,
                now=now,
                pods=pods,
                mode="estimate",
                avail=est.avail(last.k, pods, "estimate"),
                churn=True,
                samples_missing=self.samples_missing,
                classes=classes,
                counted_pods=counted,
            )
        elif classes is not None:
            report = replace(
                last,
                now=now,
                pods=pods,
                churn=churn or last.churn,
                samples_missing=self.samples_missing,
                classes=classes,
                counted_pods=counted,
            )
        else:
            return None
        self.last_report = report
        return report

    # -- the batch ----------------------------------------------------------------------------

    def _close_batch(self, now: float, pods: int | None) -> CapacityReport | None:
        cfg = self.config
        batch = np.array(self._rows, dtype=np.float64).T  # (d, batch)
        missing, event = self._batch_missing, self._batch_event
        self._rows = []
        self._batch_missing, self._batch_event = 0, False
        self.batches += 1

        complete = batch[:, np.all(np.isfinite(batch), axis=0)]
        if complete.shape[1] > 0:
            if self.local is None:
                self.local = SubspaceModel.from_batch(complete)
            else:
                old, new = cfg.local_weights()
                self.local = self.local.update(complete, old, new)
        y = np.array(self._y)
        if self.local is None or pods is None or not np.all(np.isfinite(y)):
            return None

        model, age = self.local, 0.0
        view = self.global_view
        if view is not None and now - view.received_at > cfg.global_ttl_s:
            view = None  # stale: keep the last view for its age, but do not merge it
        if view is not None:
            model = SubspaceModel.merge(
                view.model, self.local, max(view.contributing_nodes - 1, 0), 1.0
            )
            age = max(0.0, now - view.received_at)
        k = capacity_signal(y, model, k_max=cfg.k_max, level=cfg.full_level)
        # Pods changed, or still settling after a recent event: the estimator must not learn.
        churn = event or (now - self._last_event < cfg.hold_s and not self.ema.settled)
        est = self.estimator
        sigma1, u1 = model.top()
        w = sigma1 * u1
        used = w > 0.0
        censored = bool(np.any(y[used] >= cfg.full_level - cfg.censor_headroom))
        if used.any():
            # k's unit is w along the resource that limits it; keep the estimator in step.
            j = int(np.flatnonzero(used)[np.argmin((cfg.full_level - y[used]) / w[used])])
            # While the same resource limits k, a model update only changes k's unit; when
            # another resource takes over, k(n) continues on another line.
            if self._w is not None and j == self._j and self._w[j] > 0.0:
                # Against the unit of the last rescale, so that small changes add up; a change
                # under 1 % (the noise of a steady model) leaves the estimator's state alone.
                factor = float(self._w[j] / w[j])
                if abs(factor - 1.0) > 0.01:
                    est.rescale(factor)
                    self._w = w
            else:
                if self._j >= 0:
                    est.new_line()
                self._w, self._j = w, j
        est.observe(now, k, pods, churn, censored=censored, pods_lagged=self._lagged_pods())

        mode = est.suggested_mode
        suspect = missing > cfg.max_missing_fraction * cfg.batch
        if suspect and math.isfinite(est.capacity):
            mode = "estimate"
        avail = est.avail(k, pods, mode)
        if not math.isfinite(avail):  # estimate mode before the capacity is known
            mode, avail = "live", est.avail(k, pods, "live")
        # A censored k is the floor of a full node: live, nothing more fits. Estimate mode keeps
        # ĉ/p̂ − n (also forcing 0 there was measured: ML Jobs 446 s instead of 332 s, the
        # refused pods waiting in kube-scheduler's queues; docs/simulator.md).
        if censored and mode == "live":
            avail = 0.0
        classes = None
        if math.isfinite(self.classes.cores) and math.isfinite(self.classes.memory_bytes):
            self._default = self.classes.default_footprint(
                est.per_pod_cost, w if used.any() else None, self._psi_available
            )
            classes = self.classes.view(now, y, self._psi_available, self._default, not churn)
        report = CapacityReport(
            now=now,
            avail=avail,
            k=k,
            capacity=est.capacity,
            per_pod_cost=est.per_pod_cost,
            pods=pods,
            mode=mode,
            features=tuple(self._y),
            psi_available=self._psi_available,
            churn=est.churn_hold,
            global_model=view is not None,
            model_age_s=age,
            samples_missing=self.samples_missing,
            cost_source=est.cost_source,
            classes=classes,
            counted_pods=self.classes.counted_recently(now),
        )
        self.last_report = report
        return report
