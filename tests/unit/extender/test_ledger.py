"""The reservation ledger's lifecycle with an injected clock."""

from __future__ import annotations

from scheduler_ext.capacity import CapacityTable, Ingest, Thresholds
from scheduler_ext.ledger import HANDOVER_TIMEOUT, Ledger, PodState, Release, StaleData
from scheduler_ext.pods import PodFacts

from .conftest import MakeReport


def _ledger(make_report: MakeReport, policy: StaleData = StaleData.FAIL_OPEN) -> Ledger:
    table = CapacityTable(Thresholds(stale_after=10.0))
    table.ingest(make_report("n1", 2.5), "s", now=0.0)
    table.ingest(make_report("n2", 5.0), "s", now=0.0)
    return Ledger(table, ttl=60.0, stale_policy=policy)


def pod(name: str, uid: str = "", **kw: object) -> PodFacts:
    return PodFacts("shop", name, uid or f"uid-{name}", **kw)  # type: ignore[arg-type]


def test_reserve_checks_capacity_and_is_idempotent(make_report: MakeReport) -> None:
    ledger = _ledger(make_report)
    assert ledger.reserve(pod("a"), "n1", 1.0).ok
    assert ledger.reserve(pod("a"), "n1", 2.0).ok  # the same again: no second unit
    assert ledger.table.reserved("n1") == 1
    assert ledger.reserve(pod("b"), "n1", 1.0).ok  # 2.5 - 1 >= 1
    refused = ledger.reserve(pod("c"), "n1", 1.0)
    assert not refused.ok and refused.error == "carico: avail 2.5 - reserved 2 < 1"
    moved = ledger.reserve(pod("a"), "n2", 1.0)
    assert not moved.ok and "already bound to node n1" in moved.error
    assert ledger.table.reserved_counts() == {"n1": 2}
    assert ledger.reserve(pod("c"), "n1", 1.0, check=False).ok  # forced (rebuild path)
    assert ledger.created == 3


def test_undo_gives_the_unit_back(make_report: MakeReport) -> None:
    ledger = _ledger(make_report)
    made = ledger.reserve(pod("a"), "n1", 1.0)
    assert ledger.undo(made)
    assert ledger.table.reserved("n1") == 0 and ledger.ended[Release.UNDONE] == 1
    assert not ledger.undo(made)  # once only


def test_undo_touches_only_what_its_own_reserve_made(make_report: MakeReport) -> None:
    ledger = _ledger(make_report)
    ledger.reserve(pod("a"), "n1", 1.0)
    before = ([(r.key, r.uid, r.node, r.created_at) for r in ledger.reservations()], 1)
    # The same pod again (a retried bind): nothing made, so nothing to give back.
    again = ledger.reserve(pod("a"), "n1", 2.0)
    assert again.ok and again.made is None
    assert not ledger.undo(again)
    # Another uid under the name displaces the reservation; its undo brings the first one back.
    other = ledger.reserve(pod("a", uid="u2"), "n2", 3.0)
    assert other.ok and ledger.table.reserved_counts() == {"n2": 1}
    assert ledger.undo(other)
    after = [(r.key, r.uid, r.node, r.created_at) for r in ledger.reservations()]
    assert (after, ledger.table.reserved("n1")) == before
    assert ledger.table.reserved_counts() == {"n1": 1}
    assert ledger.created - sum(ledger.ended.values()) == ledger.open_count() == 1
    # A reservation a pod event replaced meanwhile is not the call's to undo.
    third = ledger.reserve(pod("a", uid="u3"), "n2", 4.0)
    ledger.observe(PodState(pod("a", uid="u3"), "n2", "Running"), 5.0)
    ledger.observe(PodState(pod("a", uid="u4"), "n2", "Pending"), 5.0)
    assert not ledger.undo(third)
    assert [(r.uid, r.node) for r in ledger.reservations()] == [("u4", "n2")]


def test_stale_data_at_bind(make_report: MakeReport) -> None:
    open_ = _ledger(make_report)
    result = open_.reserve(pod("a"), "n1", 30.0)
    assert result.ok and result.stale == "stale"
    assert open_.reserve(pod("b"), "ghost", 1.0).stale == "missing"
    closed = _ledger(make_report, StaleData.FAIL_CLOSED)
    refused = closed.reserve(pod("a"), "n1", 30.0)
    assert not refused.ok and "no fresh capacity data for node n1" in refused.error


def test_ended_when_the_pod_ends_is_deleted_or_is_counted(make_report: MakeReport) -> None:
    ledger = _ledger(make_report)
    for name in ("a", "b", "c", "d", "e"):
        ledger.reserve(pod(name), "n2", 1.0)
    # An old event (Pending, not yet bound) changes nothing.
    assert ledger.observe(PodState(pod("a"), "", "Pending"), 2.0) is None
    assert ledger.observe(PodState(pod("a"), "n2", "Pending"), 2.0) is None
    # Out of the bound-Pending watch (a deletion carrying the last Pending state: the pod ran or
    # was deleted) or Running: handed over, held until a report counts the pod.
    assert ledger.observe(PodState(pod("a"), "n2", "Pending", deleted=True), 2.0) is None
    assert ledger.observe(PodState(pod("d"), "n2", "Running"), 2.5) is None
    held = [(r.key, r.handed_over_at) for r in ledger.reservations()]
    assert held == [
        ("shop/a", 2.0),
        ("shop/b", None),
        ("shop/c", None),
        ("shop/d", 2.5),
        ("shop/e", None),
    ]
    assert ledger.observe(PodState(pod("b"), "n2", "Succeeded"), 2.0) is Release.RELEASED
    assert ledger.observe(PodState(pod("c"), "n2", "Failed"), 2.0) is Release.RELEASED
    # A deletion of another pod with the same name (other uid) leaves e's reservation alone.
    assert ledger.observe(PodState(pod("e", uid="old"), "n2", "Pending", deleted=True), 2.0) is None
    assert [r.key for r in ledger.reservations()] == ["shop/a", "shop/d", "shop/e"]
    # A report of another node listing a's uid does not end it; one of its node does, and
    # counting a pod still Pending (the agent saw it first) ends its reservation too.
    assert ledger.counted("n1", ["uid-a", "uid-e"]) == []
    ended = ledger.counted("n2", ["uid-x", "uid-a", "uid-d", "uid-e"])
    assert [r.key for r in ended] == ["shop/a", "shop/d", "shop/e"]
    assert ledger.table.reserved("n2") == 0 and ledger.ended[Release.COUNTED] == 3
    # The watch's Running after the count finds nothing to hand over.
    assert ledger.observe(PodState(pod("a"), "n2", "Running"), 3.0) is None
    assert ledger.open_count() == 0


def test_a_running_pod_no_report_counts_ends_after_the_hand_over_timeout(
    make_report: MakeReport,
) -> None:
    ledger = _ledger(make_report)
    ledger.reserve(pod("a"), "n2", 0.0)
    ledger.reserve(pod("b"), "n2", 0.0)
    ledger.observe(PodState(pod("a"), "n2", "Running"), 10.0)
    assert ledger.expire(10.0 + HANDOVER_TIMEOUT - 0.01) == []
    assert ledger.open_count() == 2
    # Not an expiry (nothing amiss: an agent that does not list its pods), and b, Pending, stays.
    assert ledger.expire(10.0 + HANDOVER_TIMEOUT) == []
    assert [r.key for r in ledger.reservations()] == ["shop/b"]
    assert ledger.ended[Release.UNCOUNTED] == 1 and ledger.ended[Release.EXPIRED] == 0
    # Running on another node than the reservation's: the pod moved, the reservation ends.
    assert ledger.observe(PodState(pod("b"), "n1", "Running"), 20.0) is Release.RELEASED


def test_ingest_ends_the_reservations_a_report_counts(make_report: MakeReport) -> None:
    ledger = _ledger(make_report)
    ledger.reserve(pod("a"), "n2", 1.0)
    ledger.reserve(pod("b"), "n2", 1.0)
    counting = make_report("n2", 3.0, sequence=2, counted_pods=["uid-a"])
    assert ledger.ingest(counting, "s", 2.0)[0] is Ingest.ACCEPTED
    assert [r.key for r in ledger.reservations()] == ["shop/b"]
    # A refused report (an older sequence) counts nothing.
    stale = make_report("n2", 3.0, sequence=1, counted_pods=["uid-b"])
    assert ledger.ingest(stale, "s", 3.0)[0] is Ingest.OUT_OF_ORDER
    assert [r.key for r in ledger.reservations()] == ["shop/b"]


def test_pods_bound_elsewhere_are_tracked(make_report: MakeReport) -> None:
    ledger = _ledger(make_report)
    # Bound by another binder: reserve it without a check (it is already there).
    assert ledger.observe(PodState(pod("x"), "n1", "Pending"), 1.0) is None
    assert ledger.table.reserved("n1") == 1
    # Recreated under the same name on another node: the old one goes, the new one counts.
    assert ledger.observe(PodState(pod("x", uid="new"), "n2", "Pending"), 1.0) is Release.RELEASED
    assert ledger.table.reserved_counts() == {"n2": 1}
    # Exempt pods never hold reservations.
    daemon = PodFacts("shop", "agent", "u", owner_kinds=("DaemonSet",))
    ledger.observe(PodState(daemon, "n1", "Pending"), 1.0)
    assert ledger.get("shop/agent") is None


def test_ttl_expiry(make_report: MakeReport) -> None:
    ledger = _ledger(make_report)
    ledger.reserve(pod("a"), "n2", 0.0)
    ledger.reserve(pod("b"), "n2", 30.0)
    assert ledger.expire(59.9) == []
    assert [r.key for r in ledger.expire(60.0)] == ["shop/a"]
    assert [r.key for r in ledger.expire(90.0)] == ["shop/b"]
    assert ledger.ended[Release.EXPIRED] == 2 and ledger.open_count() == 0


def test_reconcile_rebuilds_from_a_list(make_report: MakeReport) -> None:
    ledger = _ledger(make_report)
    ledger.reserve(pod("gone"), "n1", 0.0)
    ledger.reserve(pod("kept"), "n2", 0.0)
    ledger.reserve(pod("moved"), "n1", 0.0)
    listed = [
        PodState(pod("kept"), "n2", "Pending"),
        PodState(pod("moved"), "n2", "Pending"),
        PodState(pod("new"), "n1", "Pending"),
        PodState(pod("running"), "n1", "Running"),
        PodState(PodFacts("kube-system", "p", "u"), "n1", "Pending"),
    ]
    ledger.reconcile(listed, 5.0)
    # "gone" is no longer Pending: it may have started while the watch was down, so it is
    # handed over (held until a report counts it or the hand-over timeout), not dropped.
    assert sorted((r.key, r.node, r.handed_over_at) for r in ledger.reservations()) == [
        ("shop/gone", "n1", 5.0),
        ("shop/kept", "n2", None),
        ("shop/moved", "n2", None),
        ("shop/new", "n1", None),
    ]
    assert ledger.table.reserved_counts() == {"n1": 2, "n2": 2}
    kept = ledger.get("shop/kept")
    assert kept is not None and kept.created_at == 0.0  # untouched, TTL not reset
