"""ReportGate: a material change goes out at once, anything else as a keepalive
(agent/report_gate.py)."""

from __future__ import annotations

import dataclasses

import pytest

from agent.class_capacity import CapacityView, ClassReport
from agent.pipeline import CapacityReport
from agent.report_gate import GateConfig, ReportGate
from carico.footprint import ClassFootprint, Footprint

WEB = ClassFootprint("shop/Deployment/web", Footprint(0.5, 200e6), "learned", 40)


def view(headroom: float = 0.4, web_cpu: float = 0.5, web_pods: int = 2) -> CapacityView:
    web = dataclasses.replace(WEB, footprint=Footprint(web_cpu, 200e6))
    return CapacityView(
        (headroom, 0.5),
        ((0.25, 1e-10), (0.0, 3e-11)),
        (ClassReport(web, web_pods),),
        0.85,
        4.0,
        32e9,
        ClassFootprint("", Footprint(0.5, 256e6), "default"),
    )


def report(now: float, avail: float = 3.0, **changes: object) -> CapacityReport:
    base = CapacityReport(
        now=now,
        avail=avail,
        k=0.4,
        capacity=8.0,
        per_pod_cost=0.5,
        pods=2,
        mode="live",
        features=(0.4, 0.3),
        psi_available=True,
        churn=False,
        global_model=True,
        model_age_s=1.0,
        samples_missing=0,
        cost_source="learned",
        classes=view(),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_first_report_goes_then_unchanged_ones_only_as_keepalives() -> None:
    gate = ReportGate(GateConfig(keepalive_s=3.0))
    assert gate.why(report(0.0)) == "first"
    # Noise below every threshold: held back until the keepalive is due.
    assert gate.why(report(1.0, avail=3.05, features=(0.41, 0.3))) == ""
    assert gate.why(report(2.0, avail=2.95, model_age_s=2.0)) == ""
    assert gate.why(report(3.0, avail=3.02)) == "keepalive"
    assert gate.why(report(4.0)) == ""
    assert gate.held == 3 and gate.sent == {"first": 1, "keepalive": 1}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"avail": 3.1}, "avail"),
        ({"avail": 2.9}, "avail"),
        ({"avail": float("nan")}, "avail"),
        ({"mode": "estimate"}, "state"),
        ({"pods": 3}, "state"),
        ({"cost_source": "prior"}, "state"),
        ({"churn": True}, "health"),
        ({"psi_available": False}, "health"),
        ({"global_model": False}, "health"),
        ({"samples_missing": 4}, "health"),
        ({"classes": None}, "classes"),
        ({"classes": view(headroom=0.39)}, "headroom"),
        ({"classes": view(web_pods=3)}, "classes"),
        ({"classes": view(web_cpu=0.52)}, "footprint"),
        ({"counted_pods": ("uid-new",)}, "counted"),
    ],
)
def test_a_material_change_goes_at_once(changes: dict[str, object], reason: str) -> None:
    gate = ReportGate(GateConfig(keepalive_s=3.0))
    gate.why(report(0.0))
    assert gate.why(report(0.5, **changes)) == reason


def test_a_pod_counted_already_sent_or_no_longer_listed_is_no_change() -> None:
    gate = ReportGate(GateConfig(keepalive_s=10.0))
    gate.why(report(0.0, counted_pods=("u1", "u2")))
    assert gate.why(report(1.0, counted_pods=("u2", "u1"))) == ""
    assert gate.why(report(2.0, counted_pods=("u2",))) == ""  # u1 counted for half a minute
    assert gate.why(report(3.0, counted_pods=("u3", "u2"))) == "counted"


def test_changes_are_measured_from_the_last_report_sent_not_the_last_made() -> None:
    gate = ReportGate(GateConfig(keepalive_s=10.0))
    gate.why(report(0.0, avail=3.0))
    # Small steps add up: each 0.04 from the one before, held, until 0.1 from what was sent.
    assert [gate.why(report(t, avail=3.0 + 0.04 * t)) for t in (1.0, 2.0)] == ["", ""]
    assert gate.why(report(3.0, avail=3.12)) == "avail"


def test_below_the_footprint_threshold_and_a_steady_node_size_are_held() -> None:
    gate = ReportGate(GateConfig(keepalive_s=3.0))
    gate.why(report(0.0))
    assert gate.why(report(1.0, classes=view(web_cpu=0.505, headroom=0.405))) == ""


def test_keepalive_zero_sends_every_report_and_a_negative_one_is_refused() -> None:
    gate = ReportGate(GateConfig(keepalive_s=0.0))
    assert [gate.why(report(t)) for t in (0.0, 0.1, 0.2)] == ["first", "every", "every"]
    with pytest.raises(ValueError, match="keepalive"):
        ReportGate(GateConfig(keepalive_s=-1.0))
