"""Which capacity reports the agent sends to the extender: a material change at once, otherwise
one keepalive every few seconds. Pure: no I/O, times come with the reports.

The pipeline makes a report every batch (1 s). Most of them repeat the last within its noise,
and each one costs the extender about 160 µs of CPU (docs/benchmarks.md#ingest): a 5,000-node
cluster reporting every batch would keep most of a core busy for nothing. A report goes out when
it differs from the last one sent in anything a decision reads (mode, pods, health flags, a pod
counted that the last one did not list, avail by ``avail_delta`` pods, a headroom by
``headroom_delta``, a class's footprint by ``footprint_rel`` of itself, the classes present or
their pod counts, the node's size), and otherwise when ``keepalive_s`` has passed, which keeps
the node fresh at the extender (its ``--stale-after``, 10 s by default, must stay well above
it). The default is 3 s; ``keepalive_s`` 0 sends every report
(docs/architecture.md#report-cadence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.class_capacity import CapacityView
from agent.pipeline import CapacityReport
from carico.footprint import footprint_moved

# A third of the reports of a steady node, and a node lost from three keepalives in a row still
# fresh at the extender's default --stale-after (10 s). The real node's tests passed with it in
# every run once pods in flight were held and the one-cost estimate could no longer run away
# (docs/architecture.md#report-cadence).
DEFAULT_KEEPALIVE_S = 3.0


@dataclass(frozen=True)
class GateConfig:
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    avail_delta: float = 0.1  # pods: a tenth of the filter's one-pod threshold
    headroom_delta: float = 0.01  # of the node, per feature
    footprint_rel: float = 0.02  # of the class's own footprint


def _moved(a: float, b: float, delta: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) != math.isnan(b)
    return abs(a - b) >= delta


def _classes_changed(a: CapacityView | None, b: CapacityView | None, c: GateConfig) -> str:
    if a is None or b is None:
        return "classes" if (a is None) != (b is None) else ""
    if (a.full_level, a.cores, a.memory_bytes, a.scale) != (
        b.full_level,
        b.cores,
        b.memory_bytes,
        b.scale,
    ):
        return "node size"
    if len(a.headroom) != len(b.headroom) or any(
        _moved(x, y, c.headroom_delta) for x, y in zip(a.headroom, b.headroom, strict=True)
    ):
        return "headroom"
    old = {r.footprint.name: r for r in a.classes}
    if len(old) != len(b.classes):
        return "classes"
    for r in b.classes:
        before = old.get(r.footprint.name)
        if before is None or before.pods != r.pods or before.footprint.source != r.footprint.source:
            return "classes"
        if footprint_moved(before.footprint.footprint, r.footprint.footprint, c.footprint_rel):
            return "footprint"
    if footprint_moved(a.default.footprint, b.default.footprint, c.footprint_rel):
        return "footprint"
    return ""


def change(last: CapacityReport, new: CapacityReport, config: GateConfig) -> str:
    """What changed materially from ``last`` to ``new`` ("" for nothing)."""
    if (last.mode, last.pods, last.cost_source) != (new.mode, new.pods, new.cost_source):
        return "state"
    if (last.psi_available, last.churn, last.global_model) != (
        new.psi_available,
        new.churn,
        new.global_model,
    ):
        return "health"
    if (last.samples_missing > 0) != (new.samples_missing > 0):
        return "health"
    if not set(new.counted_pods) <= set(last.counted_pods):
        return "counted"  # the extender holds these pods' reservations until it hears of them
    if _moved(last.avail, new.avail, config.avail_delta):
        return "avail"
    return _classes_changed(last.classes, new.classes, config)


class ReportGate:
    """Decides, report by report, whether it goes out; remembers the last one that did."""

    def __init__(self, config: GateConfig | None = None) -> None:
        config = config or GateConfig()
        if not config.keepalive_s >= 0:
            raise ValueError(f"keepalive must be >= 0 seconds, got {config.keepalive_s!r}")
        self.config = config
        self._last: CapacityReport | None = None
        self.sent: dict[str, int] = {}  # why reports went out: first, keepalive, or a change
        self.held = 0

    def why(self, report: CapacityReport) -> str:
        """Why ``report`` goes out ("" when it is held back); a report that goes out becomes
        the one the next are compared with."""
        last = self._last
        if last is None:
            reason = "first"
        elif self.config.keepalive_s <= 0:
            reason = "every"
        else:
            reason = change(last, report, self.config)
            if not reason and report.now - last.now >= self.config.keepalive_s:
                reason = "keepalive"
        if not reason:
            self.held += 1
            return ""
        self._last = report
        self.sent[reason] = self.sent.get(reason, 0) + 1
        return reason
