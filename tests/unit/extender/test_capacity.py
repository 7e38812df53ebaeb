"""The capacity table: validation, report ordering, verdicts and staleness."""

from __future__ import annotations

import math

import pytest

from carico.pods import MAX_AVAIL, MAX_COUNTED_PODS, MAX_UID
from scheduler_ext.capacity import CapacityTable, Ingest, Thresholds, fmt, validate

from .conftest import MakeReport
from .test_shape import WEB, per_class


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("avail", math.nan, "avail is not finite"),
        ("avail", math.inf, "avail is not finite"),
        ("avail", -0.5, "avail is negative"),
        ("k", -1.0, "k is negative"),
        ("capacity", math.nan, "capacity is not finite"),
        ("per_pod_cost", -0.1, "per_pod_cost is negative"),
        ("timestamp", 0.0, "timestamp is missing"),
        ("timestamp", -5.0, "timestamp is negative"),
        ("node", "", "node name is empty"),
        ("node", "x" * 254, "at most 253"),
        ("node", "Node_1", "not a DNS-1123 subdomain"),
        ("mode", 7, "unknown mode"),
    ],
)
def test_invalid_reports_are_refused(
    make_report: MakeReport, field: str, value: object, fragment: str
) -> None:
    msg = make_report("n1", 2.0)
    setattr(msg, field, value)
    problem = validate(msg)
    assert problem is not None and fragment in problem
    table = CapacityTable()
    outcome, why = table.ingest(msg, "s", now=0.0)
    assert outcome is Ingest.INVALID and fragment in why
    assert table.reports() == []
    # A node the table knows (its name is no longer matched) is refused alike.
    if field != "node":
        good = make_report("n1", 2.0)
        assert table.ingest(good, "s", now=0.0)[0] is Ingest.ACCEPTED
        msg.sequence = good.sequence + 1
        outcome, why = table.ingest(msg, "s", now=1.0)
        assert outcome is Ingest.INVALID and fragment in why
        assert [r.sequence for r in table.reports()] == [good.sequence]


def test_a_runaway_avail_is_taken_at_the_bound_with_its_per_class_data(
    make_report: MakeReport,
) -> None:
    """An older agent's one-cost avail of 1.19e6 pods (its per-pod cost at the floor): refusing
    the report left the node stale and, under fail-open, open to every pod."""
    msg = per_class(make_report, "n1", 0.7)
    msg.avail = 1.19e6
    assert validate(msg) is None
    table = CapacityTable()
    assert table.ingest(msg, "s", now=0.0)[0] is Ingest.ACCEPTED
    (report,) = table.reports()
    assert report.avail == MAX_AVAIL
    assert report.classes is not None and WEB in report.classes.classes


def test_feature_vectors_are_checked(make_report: MakeReport) -> None:
    msg = make_report("n1", 2.0, features=[0.2, math.nan])
    assert validate(msg) == "features contain a non-finite value"
    msg = make_report("n1", 2.0, features=[0.2, 0.3], feature_names=["cpu"])
    assert validate(msg) == "features and feature_names differ in length"
    assert validate(make_report("n1", 2.0, features=[0.2], feature_names=["cpu"])) is None


def test_the_counted_pods_list_is_bounded(make_report: MakeReport) -> None:
    uids = [f"{i:08d}-0000-0000-0000-000000000000" for i in range(MAX_COUNTED_PODS)]
    assert validate(make_report("n1", 2.0, counted_pods=uids)) is None
    too_many = make_report("n1", 2.0, counted_pods=[*uids, "one-more"])
    assert validate(too_many) == f"{MAX_COUNTED_PODS + 1} counted pods (at most {MAX_COUNTED_PODS})"
    too_long = make_report("n1", 2.0, counted_pods=["u" * (MAX_UID + 1)])
    assert validate(too_long) == f"a counted pod's uid is longer than {MAX_UID} characters"


def test_sequence_rules_within_one_stream(make_report: MakeReport) -> None:
    table = CapacityTable()
    assert table.ingest(make_report("n", 1.0, sequence=5), "s", 0.0)[0] is Ingest.ACCEPTED
    assert table.ingest(make_report("n", 9.0, sequence=5), "s", 0.0)[0] is Ingest.DUPLICATE
    # A lower sequence on the same stream is out of order even with a newer timestamp.
    late = make_report("n", 9.0, sequence=4, timestamp=2e9)
    assert table.ingest(late, "s", 0.0)[0] is Ingest.OUT_OF_ORDER
    assert table.ingest(make_report("n", 3.0, sequence=6), "s", 1.0)[0] is Ingest.ACCEPTED
    report = table.report("n")
    assert report is not None and report.avail == 3.0 and report.received_at == 1.0


def test_another_stream_needs_newer_data(make_report: MakeReport) -> None:
    table = CapacityTable()
    table.ingest(make_report("n", 1.0, sequence=900, timestamp=100.0), "old", 0.0)
    # Restarted agent: sequence starts again, clock is later.
    restarted = make_report("n", 2.0, sequence=1, timestamp=101.0)
    assert table.ingest(restarted, "new", 1.0)[0] is Ingest.ACCEPTED
    # The old stream lingers with a higher sequence but older data: refused.
    lingering = make_report("n", 5.0, sequence=901, timestamp=100.5)
    outcome, why = table.ingest(lingering, "old", 1.0)
    assert outcome is Ingest.OUT_OF_ORDER and "not newer" in why
    same = make_report("n", 2.0, sequence=1, timestamp=101.0)
    assert table.ingest(same, "third", 1.0)[0] is Ingest.DUPLICATE
    assert table.report("n").avail == 2.0  # type: ignore[union-attr]


def test_verdicts_follow_reports_and_reservations(make_report: MakeReport) -> None:
    table = CapacityTable(Thresholds(threshold=1.0))
    table.ingest(make_report("n", 1.4), "s", 0.0)
    assert table.free == {"n": 1.4} and table.failing == {}
    table.add_reserved("n", 1)
    assert table.failing == {"n": "carico: avail 1.4 - reserved 1 < 1"}
    assert table.free["n"] == pytest.approx(0.4)  # float subtraction
    table.add_reserved("n", -1)
    assert table.failing == {} and table.reserved("n") == 0
    with pytest.raises(AssertionError):
        table.add_reserved("n", -1)
    # Reservations on a node without a report are kept but give no verdict.
    table.add_reserved("ghost", 2)
    assert "ghost" not in table.free and table.reserved_counts() == {"ghost": 2}


def test_threshold_is_configurable(make_report: MakeReport) -> None:
    table = CapacityTable(Thresholds(threshold=2.5))
    table.ingest(make_report("a", 2.5), "s", 0.0)
    table.ingest(make_report("b", 2.4), "s", 0.0)
    assert table.failing == {"b": "carico: avail 2.4 - reserved 0 < 2.5"}


def test_staleness_uses_the_receive_clock(make_report: MakeReport) -> None:
    table = CapacityTable(Thresholds(stale_after=10.0))
    table.ingest(make_report("a", 1.0), "s", 0.0)
    table.ingest(make_report("b", 1.0), "s", 5.0)
    assert table.stale_nodes(9.9) == set()
    assert table.stale_nodes(10.0) == {"a"}
    assert table.is_fresh("b", 10.0) and not table.is_fresh("a", 10.0)
    # A new report from "a" makes it the newest.
    table.ingest(make_report("a", 1.0, sequence=2), "s", 12.0)
    assert table.stale_nodes(16.0) == {"b"}
    assert not table.is_fresh("unknown", 0.0)
    assert table.forget_older_than(20.0, 10.0) == ["b"]  # 15 s silent; "a" only 8 s
    assert table.forget_older_than(100.0, 50.0) == ["a"]
    assert table.reports() == [] and table.free == {}


def test_fmt_is_short() -> None:
    assert [fmt(x) for x in (0.4, 1.0, 12.345, 0.0, 3.10)] == ["0.4", "1", "12.35", "0", "3.1"]


def test_slot_arrays_grow_and_reuse_slots(make_report: MakeReport) -> None:
    table = CapacityTable(Thresholds(threshold=1.0, stale_after=10.0))
    names = [f"n{i}" for i in range(3000)]  # beyond the initial 1,024 slots, twice
    for i, name in enumerate(names):
        table.ingest(make_report(name, float(i % 3)), "s", now=float(i) / 1000)
    assert len(table.free_arr) >= 3000
    for name in ("n0", "n1024", "n2999"):
        slot = table.slot[name]
        assert table.free_arr[slot] == table.free[name]
        assert table.failing_arr[slot] == (name in table.failing)
        assert table.received_arr[slot] == table.report(name).received_at  # type: ignore[union-attr]
    gone = table.forget_older_than(10.0, 9.5)  # received before 0.5 s
    assert len(gone) == 500 and "n0" not in table.slot
    table.ingest(make_report("late", 5.0), "s", now=11.0)
    assert table.slot["late"] < 3000  # a freed slot was reused
    assert table.free_arr[table.slot["late"]] == 5.0
