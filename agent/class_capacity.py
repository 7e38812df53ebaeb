"""Per-class capacity of one node: what each workload class costs here, and the room left.

The pipeline (``agent.pipeline``) hands this module, once per batch, the smoothed telemetry y,
the node's CPU utilisation and pressure over the batch, each pod's own usage (from its cgroup,
when the source reads it) and the running pods with their classes. It keeps:

* the per-class footprints (``carico.footprint.FootprintLearner``), from each pod's usage: CPU
  demand attributed with ``telemetry.pod_cpu_demand`` (censored on a saturated node), memory
  as measured; a measurement is held ``exit_lag`` seconds and dropped if its pod ends
  meanwhile (it may span the pod's exit, before the pod watch said so);
* the node's *unexplained* use: what its telemetry y shows beyond the footprints of the pods that
  were running when y was measured (y lags the pods by the EMA's delay, ``lag`` seconds), and
  its slow average y_base (system daemons, exempt pods), learned in quiet batches;
* the expected use max(unexplained, y_base) + Σ_j n_j·S·f_j (S the node's feature scale, n_j
  the pods of class j running *now*, f_j its footprint): a pod counts the moment it starts and
  stops counting the moment it ends, while the telemetry still covers what the footprints miss;
* the headroom L − expected per feature, never below 0.

The extender decides with the headroom and the footprints (docs/architecture.md#cost-and-capacity).
Pure: no I/O, ``now`` comes in.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from agent.telemetry import PodUsage, feature_scale, pod_cpu_demand
from carico.footprint import (
    EMPTY_FLEET,
    MAX_CLASSES_PER_REPORT,
    ClassFootprint,
    FleetSummary,
    Footprint,
    FootprintLearner,
    PodMeasurement,
    resolve,
)
from carico.pods import MAX_COUNTED_PODS, PodClass, Requests

# y_base follows the node's unexplained use with this gain per quiet batch (half-life about 14 s):
# slow enough that one noisy batch moves it little, fast enough to follow a daemon that starts.
BASE_GAIN = 0.05
# Readings closer together than this give no measurement (mostly noise over so short a time).
MIN_INTERVAL = 0.25
# A pod is listed among the pods a report counts for this long after it began to count: the
# extender holds its reservation until a report lists it (docs/architecture.md#reservations), and
# half a minute of reports outlasts a reconnecting stream.
COUNTED_WINDOW = 30.0


@dataclass(frozen=True, slots=True)
class ClassReport:
    """A class as the node reports it: its footprint and how many of its pods run here."""

    footprint: ClassFootprint
    pods: int


@dataclass(frozen=True, slots=True)
class CapacityView:
    """What the node reports for per-class decisions."""

    headroom: tuple[float, ...]  # per feature, >= 0
    scale: tuple[tuple[float, float], ...]  # per feature: (per core, per byte)
    classes: tuple[ClassReport, ...]
    full_level: float
    cores: float
    memory_bytes: float
    default: ClassFootprint  # the cost of a pod nothing is known of


class ClassCapacity:
    """The per-class state of one node's agent."""

    def __init__(
        self,
        feature_names: tuple[str, ...],
        full_level: float,
        max_classes: int,
        lag: float = 0.4,
        exit_lag: float = 0.0,
    ) -> None:
        if not 0.0 < full_level <= 1.0:
            raise ValueError(f"full_level must be in (0, 1], got {full_level!r}")
        if not (math.isfinite(exit_lag) and exit_lag >= 0):
            raise ValueError(f"exit_lag must be a number of seconds >= 0, got {exit_lag!r}")
        self.feature_names = feature_names
        self.full_level = full_level
        self.learner = FootprintLearner(max_classes=max_classes)
        self.fleet: FleetSummary = EMPTY_FLEET
        self.running: dict[str, PodClass] = {}  # pod uid -> its class, running workload pods
        self._counted_since: dict[str, float] = {}  # pod uid -> when it began to count
        self._usage: dict[str, tuple[float, PodUsage]] = {}  # uid -> (when read, last reading)
        self._base: np.ndarray | None = None
        self._unexplained: np.ndarray | None = None
        self.lag = lag
        self.exit_lag = exit_lag
        # Measurements not yet learned from, oldest first: (when taken, [(pod uid, measurement)])
        self._held: deque[tuple[float, list[tuple[str, PodMeasurement]]]] = deque()
        # (since when, running pods per class), newest last: the counts at y's measurement time
        self._history: deque[tuple[float, dict[str, int]]] = deque([(-math.inf, {})], maxlen=64)
        self.cores = math.nan
        self.memory_bytes = math.nan
        self.measurements = 0  # per-pod measurements taken

    # -- inputs -------------------------------------------------------------------------------

    def set_running(self, now: float, running: Mapping[str, PodClass]) -> None:
        """The node's running workload pods and their classes (from the pod watch)."""
        self.running = dict(running)
        since = self._counted_since
        self._counted_since = {uid: since.get(uid, now) for uid in self.running}
        counts: dict[str, int] = {}
        for pod in self.running.values():
            self.learner.note_requests(pod.name, pod.requests, now)
            counts[pod.name] = counts.get(pod.name, 0) + 1
        self._history.append((now, counts))

    def counted_recently(self, now: float) -> tuple[str, ...]:
        """The uids of the running pods that began to count in the last ``COUNTED_WINDOW``
        seconds, newest first, at most ``MAX_COUNTED_PODS``."""
        recent = [(t, uid) for uid, t in self._counted_since.items() if now - t <= COUNTED_WINDOW]
        recent.sort(reverse=True)
        return tuple(uid for _, uid in recent[:MAX_COUNTED_PODS])

    def _counts_at(self, t: float) -> dict[str, int]:
        """The running pods per class at time ``t`` (the last change at or before it)."""
        found = self._history[0][1]
        for since, counts in self._history:
            if since > t:
                break
            found = counts
        return found

    def set_node(self, cores: float, memory_bytes: float) -> None:
        if math.isfinite(cores) and cores > 0:
            self.cores = cores
        if math.isfinite(memory_bytes) and memory_bytes > 0:
            self.memory_bytes = memory_bytes

    def measure(
        self,
        now: float,
        usage: Mapping[str, PodUsage],
        cpu_util: float,
        psi_cpu: float,
        psi_available: bool,
    ) -> None:
        """Per-pod usage read at ``now``: a measurement per running pod, over the time since its
        last reading taken while it was already running. Not since it started, nor from a
        reading taken before the pod watch said Running: a pod's cgroup exists from its sandbox
        on, and what it uses while its containers are created and start is not what it uses
        running (on a real node a first interval spanning the start read a quarter of the pod).

        Nor the end: a pod's process exits a second or two before the pod watch says it ended
        (the kubelet notices at its next relist, then writes the status), and the readings in
        between show the pod using nothing. Each batch of measurements is therefore held
        ``exit_lag`` seconds and learned from only for the pods still running then (but for a
        class not learned here yet, whose pods are probed until its first measurement). Without
        the hold, on a real node, a wave of three 1-core pods ending together lowered their
        class's cost until the node read room for 5 of them where 3 fit
        (docs/architecture.md#cost-and-capacity)."""
        measured: list[tuple[str, PodMeasurement]] = []
        for uid, reading in usage.items():
            pod = self.running.get(uid)
            last = self._usage.get(uid)
            if pod is not None and last is not None:
                then, before = last
                dt = now - then
                if dt < MIN_INTERVAL:
                    continue
                used = reading.cpu_seconds - before.cpu_seconds
                if dt > 0 and used >= 0:
                    demand, censored = pod_cpu_demand(used / dt, cpu_util, psi_cpu, psi_available)
                    measured.append(
                        (uid, PodMeasurement(pod.name, demand, reading.memory_bytes, censored))
                    )
        self._usage = {uid: (now, r) for uid, r in usage.items() if uid in self.running}
        # A class not learned here yet is learned from at once: until then its pods are probed a
        # few at a time (scheduler_ext.class_fit), and a pod ending within a second of its first
        # reading is rare; its later readings are held like any.
        new = {m.workload_class for _, m in measured if not self.learner.knows(m.workload_class)}
        if new:
            first = [m for _, m in measured if m.workload_class in new]
            self.measurements += len(first)
            self.learner.observe(now, first)
            measured = [(u, m) for u, m in measured if m.workload_class not in new]
        if measured:
            self._held.append((now, measured))
        self._release(now)

    def _release(self, now: float) -> None:
        """Learn from the held batches at least ``exit_lag`` old, each as the batch it was (the
        learner averages a class's pods per batch), for the pods still running."""
        held = self._held
        while held and now - held[0][0] >= self.exit_lag:
            _, batch = held.popleft()
            kept = [m for uid, m in batch if uid in self.running]
            self.measurements += len(kept)
            if kept:
                self.learner.observe(now, kept)

    # -- the view -----------------------------------------------------------------------------

    def scale(self, psi_available: bool) -> tuple[tuple[float, float], ...]:
        return feature_scale(self.feature_names, self.cores, self.memory_bytes, psi_available)

    def footprints(self, default: Footprint) -> dict[str, ClassFootprint]:
        """The footprint of every class running here."""
        out: dict[str, ClassFootprint] = {}
        for pod in self.running.values():
            if pod.name not in out:
                local = self.learner.learned(pod.name)
                out[pod.name] = resolve(pod.name, pod.requests, local, self.fleet, default)
        return out

    def _load(self, counts: Mapping[str, int], fps: Mapping[str, ClassFootprint]) -> np.ndarray:
        load = np.zeros(2)
        for name, n in counts.items():
            fp = fps.get(name)
            if fp is not None:
                load += n * np.array([fp.footprint.cpu, fp.footprint.memory])
        return load

    def view(
        self,
        now: float,
        y: np.ndarray | None,
        psi_available: bool,
        default: Footprint,
        learn_base: bool,
    ) -> CapacityView:
        """Headroom and classes for a report at ``now``.

        ``y`` is the smoothed telemetry just measured; None reuses what the last one left
        unexplained (a report made between batches, when the running pods change).
        ``learn_base`` in quiet, uncensored batches.
        """
        scale = self.scale(psi_available)
        s = np.array(scale, dtype=np.float64).reshape(len(self.feature_names), 2)
        fps = self.footprints(default)
        # the footprints of the classes that ran a moment ago, too (they explain the lagged y)
        lagged = self._counts_at(now - self.lag) if y is not None else {}
        for name in lagged:
            if name not in fps:
                req = self.learner.requests_of(name) or Requests()
                fps[name] = resolve(name, req, self.learner.learned(name), self.fleet, default)
        if y is not None:
            unexplained = np.maximum(y - s @ self._load(lagged, fps), 0.0)
            self._unexplained = unexplained
            if learn_base or self._base is None:
                if self._base is None:
                    self._base = unexplained
                else:
                    self._base = self._base + BASE_GAIN * (unexplained - self._base)
        d = len(self.feature_names)
        unexplained = self._unexplained if self._unexplained is not None else np.zeros(d)
        base = self._base if self._base is not None else np.zeros(d)
        counts = self._counts_at(now)
        expected = np.maximum(unexplained, base) + s @ self._load(counts, fps)
        headroom = np.maximum(self.full_level - expected, 0.0)
        # The running classes, and every class learned here (with 0 pods when none runs now): the
        # extender's fleet view is made of the reports, so a class learned here must outlive its
        # pods, or its next pods would be probed again as if nobody knew them.
        reported = [ClassReport(fps[name], n) for name, n in sorted(counts.items())]
        learned = reversed(self.learner.all_learned())  # the most recently seen first
        reported += [ClassReport(c, 0) for c in learned if c.name not in counts]
        classes = tuple(reported[:MAX_CLASSES_PER_REPORT])
        return CapacityView(
            tuple(float(h) for h in headroom),
            scale,
            classes,
            self.full_level,
            self.cores,
            self.memory_bytes,
            ClassFootprint("", default, "default"),
        )

    def default_footprint(
        self, per_pod_cost: float, w: np.ndarray | None, psi_available: bool
    ) -> Footprint:
        """The legacy per-pod cost p̂·w, in absolute units: the cost of a pod nothing is known of."""
        if w is None or not (math.isfinite(per_pod_cost) and per_pod_cost > 0):
            return Footprint(0.0, 0.0)
        cpu = memory = 0.0
        for (per_core, per_byte), wj in zip(self.scale(psi_available), w, strict=True):
            if per_core > 0:
                cpu = max(cpu, per_pod_cost * float(wj) / per_core)
            if per_byte > 0:
                memory = max(memory, per_pod_cost * float(wj) / per_byte)
        return Footprint(cpu, memory)
