"""The soak's invariant checks over recorded observations."""

from __future__ import annotations

import json

from soak_invariants import (
    BindDecision,
    Binding,
    LoadSample,
    PendingSample,
    PodSpan,
    Recovery,
    ReservationSample,
    check_binds,
    check_budget,
    check_capacity,
    check_pending,
    check_recoveries,
    check_reservation_ttl,
    check_reserved,
    check_slot_ttl,
    check_workloads,
    open_spans,
    parse_decision,
    recovery_summary,
)


def _line(**fields: object) -> str:
    entry = {"ts": 10.0, "level": "info", "logger": "scheduler_ext.service", "msg": "bind"}
    entry.update(fields)
    return json.dumps(entry)


def test_decision_lines_are_parsed_and_other_lines_ignored() -> None:
    line = _line(decision="bind", pod="ns/p", uid="u", node="n1", room=1.5, threshold=1.0)
    d = parse_decision(line)
    assert d == BindDecision(10.0, "ns/p", "u", "n1", 1.5, 1.0)
    with_reserved = parse_decision(line.replace('"room"', '"reserved": 3, "room"'))
    assert with_reserved is not None and with_reserved.reserved == 3
    assert d is not None and d.basis == "checked"
    assert parse_decision(_line(msg="pod watch failed")) is None
    assert parse_decision(line[: len(line) // 2]) is None  # a killed process's torn last line
    stale = parse_decision(
        _line(decision="bind", pod="a/b", node="n", room=None, threshold=1, stale="stale")
    )
    assert stale is not None and stale.basis == "stale-policy" and stale.room is None


def test_binds_below_the_threshold_are_overcommits_unless_the_policy_or_a_slot_decided() -> None:
    decisions = [
        BindDecision(1, "ns/ok", "u1", "n1", 1.2, 1.0),
        BindDecision(2, "ns/over", "u2", "n1", 0.4, 1.0),
        BindDecision(3, "ns/stale", "u3", "n2", None, 1.0, stale="stale"),
        BindDecision(4, "ns/slot", "u4", "n2", None, 1.0, slot="plan-1"),
    ]
    bindings = [Binding(1, d.pod, d.uid, d.node) for d in decisions]
    check = check_binds(decisions, bindings)
    assert [d.pod for d in check.overcommits] == ["ns/over"]
    assert [d.pod for d in check.stale_policy] == ["ns/stale"]
    assert check.by_basis == {"checked": 2, "stale-policy": 1, "plan-slot": 1}
    assert check.violations == ["ns/over bound to n1 with room 0.40 < threshold 1"]


def test_a_binding_without_a_decision_for_that_node_is_a_violation() -> None:
    decisions = [BindDecision(1, "ns/a", "u1", "n1", 2.0, 1.0)]
    bindings = [Binding(1, "ns/a", "u1", "n1"), Binding(2, "ns/a", "u1", "n2")]
    check = check_binds(decisions, bindings)
    assert check.unexplained == [Binding(2, "ns/a", "u1", "n2")]
    assert check.violations == ["ns/a bound to n2 with no decision of the extender"]


def test_a_pod_starved_beside_room_is_reported_once() -> None:
    samples = [PendingSample(t, {"ns/p": t}, {"n1": 2.0}) for t in range(0, 80, 5)]
    out = check_pending(samples, bound_s=60)
    assert out == ["ns/p pending 65s while n1 had room 2.00"]


def test_a_pod_waiting_while_nodes_were_full_is_not_starved() -> None:
    # Room only for the last 20 s of a 60 s bound: the scheduler may not have retried yet.
    samples = [
        PendingSample(t, {"ns/p": t}, {"n1": 2.0 if t >= 50 else 0.5}) for t in range(0, 75, 5)
    ]
    assert check_pending(samples, bound_s=60) == []
    # Too few samples to cover the window say nothing either.
    assert check_pending([PendingSample(100, {"ns/p": 100}, {"n1": 3.0})], bound_s=60) == []


def test_room_counts_only_on_nodes_where_the_pods_requests_fit() -> None:
    # n1 has Carico room all along but not the pod's CPU request; n2 fits the request, no room.
    samples = [
        PendingSample(t, {"ns/p": t}, {"n1": 3.0, "n2": 0.2}, {"ns/p": frozenset({"n2"})})
        for t in range(0, 80, 5)
    ]
    assert check_pending(samples, bound_s=60) == []
    roomy = [PendingSample(s.at, s.waiting, {"n1": 3.0, "n2": 1.5}, s.fits) for s in samples]
    assert check_pending(roomy, bound_s=60) == ["ns/p pending 65s while n2 had room 1.50"]


def test_reservations_older_than_ttl_plus_slack() -> None:
    samples = [
        ReservationSample(1, {"ns/a": 30.0, "ns/b": 31.5}),
        ReservationSample(2, {"ns/b": 33.0}),
    ]
    assert check_reservation_ttl(samples, ttl_s=30, slack_s=2) == [
        "reservation of ns/b seen 33.0s old (ttl 30s)"
    ]


def test_slot_spans_longer_than_ttl() -> None:
    samples = [(0, 0), (1, 2), (5, 1), (9, 1), (10, 0), (20, 1), (21, 0), (30, 3)]
    assert open_spans(samples) == [(1, 9), (20, 20), (30, 30)]
    assert check_slot_ttl(samples, ttl_s=5) == ["plan slots open for 8s without a break (ttl 5s)"]


def test_capacity_overloads_once_per_node_and_resource() -> None:
    alloc = {"n1": {"cpu": 1000, "memory": 2048}}
    samples = [
        LoadSample(1, {"n1": {"cpu": 1000, "memory": 100}}),
        LoadSample(2, {"n1": {"cpu": 1200}}),
        LoadSample(3, {"n1": {"cpu": 1300}, "other": {"cpu": 10**6}}),
    ]
    assert check_capacity(samples, alloc) == ["n1: cpu requested 1200 > allocatable 1000"]


def test_budget_counts_only_after_it_was_first_met() -> None:
    samples = [(0, 0), (1, 1), (2, 2), (3, 2), (4, 1), (5, 2)]
    assert check_budget(samples, 2, "keep") == ["keep: 1 healthy < minAvailable 2 at 4.0"]


def test_workloads_short_of_their_goal() -> None:
    out = check_workloads({"j1": True, "j2": False}, {"d1": (3, 3), "d2": (1, 2)})
    assert out == ["job j2 did not complete", "deployment d2: 1/2 ready"]


def test_recoveries_over_the_bound_or_never() -> None:
    rs = [
        Recovery("kill-extender", "", 4.0),
        Recovery("kill-extender", "", 8.0),
        Recovery("kill-agent", "n1", 70.0),
        Recovery("restart-etcd", "", None),
    ]
    assert check_recoveries(rs, 60) == [
        "kill-agent n1: ready again after 70.0s > 60s",
        "restart-etcd: not ready again",
    ]
    summary = recovery_summary(rs)
    assert summary["kill-extender"] == {"count": 2.0, "median": 6.0, "max": 8.0}
    assert "restart-etcd" not in summary


def test_reservations_must_cover_the_pods_bound_and_pending_on_the_node() -> None:
    spans = [
        PodSpan("ns/a", "ua", "n1", bound_at=100.0, left_at=None),
        PodSpan("ns/b", "ub", "n1", bound_at=101.0, left_at=140.0),
        PodSpan("ns/c", "uc", "n2", bound_at=100.0, left_at=None),  # another node
        PodSpan("ns/d", "ud", "n1", bound_at=102.0, left_at=109.5),  # started: within the lag
        PodSpan("ns/e", "ue", "n1", bound_at=20.0, left_at=None),  # older than the TTL
        PodSpan("ns/p", "up", "n1", bound_at=110.0, left_at=None),  # the pod being decided
    ]
    held = BindDecision(110.0, "ns/p", "up", "n1", 2.0, 1.0, reserved=3)
    lost = BindDecision(110.0, "ns/p", "up", "n1", 2.0, 1.0, reserved=2)
    assert check_reserved([held], spans, ttl_s=60, lag_s=1) == []
    assert check_reserved([lost], spans, ttl_s=60, lag_s=1) == [
        "ns/p bound to n1 with 1 other reservation(s) held while 2 pod(s) were bound there and "
        "Pending: ns/a, ns/b"
    ]
    # The stale-data policy's binds check nothing and are not judged here.
    blind = BindDecision(110.0, "ns/p", "up", "n1", None, 1.0, reserved=1, stale="stale")
    assert check_reserved([blind], spans, ttl_s=60, lag_s=1) == []
