"""Pods in flight between their filter and their bind: which nodes they hold, which later filters
would pass a node only by not counting them, and how holds end."""

from __future__ import annotations

import math

import pytest

from scheduler_ext.in_flight import InFlight

COUNTS = {"full": 0.0, "one": 1.0, "two": 2.0, "roomy": 9.0}


def counted(nodes: list[str]) -> list[tuple[str, float]]:
    return [(n, COUNTS[n]) for n in nodes]


def test_a_pod_holds_only_the_passed_nodes_with_little_room() -> None:
    flight = InFlight(ttl=1.0, margin=4)
    # threshold 1: nodes with room for fewer than 1 + 4 pods are held
    held = flight.hold("ns/a", counted(["one", "two", "roomy"]), 1.0, now=0.0)
    assert held == 2
    assert flight.holders("one") == flight.holders("two") == {"ns/a"}
    assert flight.holders("roomy") == frozenset()


def test_a_later_pod_conflicts_where_the_holders_would_leave_too_little() -> None:
    flight = InFlight()
    flight.hold("ns/a", counted(["one", "two"]), 1.0, now=0.0)
    # "one": 1 - 1 holder < 1; "two": 2 - 1 = 1 still fits; a pod's own hold is no conflict
    assert flight.conflicts("ns/b", counted(["one", "two", "roomy"]), 1.0) == {
        "one": frozenset({"ns/a"})
    }
    assert flight.conflicts("ns/a", counted(["one", "two"]), 1.0) == {}
    # a second pod in flight on "two" (its count there already less the first holder)
    flight.hold("ns/b", counted(["two"]), 1.0, now=0.0)
    assert flight.conflicts("ns/c", counted(["two"]), 1.0) == {"two": frozenset({"ns/a", "ns/b"})}


def test_a_node_with_more_room_is_held_when_its_holders_leave_little() -> None:
    flight = InFlight(ttl=1.0, margin=1)
    # threshold 1, margin 1: "two" has room for 2 pods, not fewer than 1 + 1, so a lone pod
    # does not hold it; with one holder already it has room for 1 more, and the next pod holds it
    assert flight.hold("ns/a", counted(["two"]), 1.0, now=0.0) == 0
    assert flight.hold("ns/x", [("two", 1.0)], 1.0, now=0.0) == 1  # as it counted the node
    assert flight.hold("ns/b", counted(["two", "roomy"]), 1.0, now=0.0) == 1
    assert flight.holders("two") == {"ns/x", "ns/b"}


def test_conflicts_name_every_holder_with_two_pods_in_flight() -> None:
    flight = InFlight()
    flight.hold("ns/a", counted(["one", "two"]), 1.0, now=0.0)
    flight.hold("ns/b", counted(["two"]), 1.0, now=0.0)
    # "one": 1 - 1 < 1; "two": 2 - 2 < 1; "roomy" is held by nobody
    found = flight.conflicts("ns/c", counted(["one", "two", "roomy"]), 1.0)
    assert found == {"one": {"ns/a"}, "two": {"ns/a", "ns/b"}}
    # a holder asking again does not count itself: room for 1 less the other holder
    assert flight.conflicts("ns/b", [("two", 1.0)], 1.0) == {"two": {"ns/a"}}


def test_holds_end_by_release_and_by_ttl() -> None:
    flight = InFlight(ttl=1.0)
    flight.hold("ns/a", counted(["one"]), 1.0, now=0.0)
    flight.hold("ns/b", counted(["one", "two"]), 1.0, now=0.5)
    assert flight.next_expiry(["ns/a", "ns/b"]) == 1.0
    assert flight.release("ns/a") and not flight.release("ns/a")
    assert flight.holders("one") == {"ns/b"}
    assert flight.expire(1.4) == []
    assert flight.expire(1.5) == ["ns/b"]
    assert len(flight) == 0 and flight.holders("one") == flight.holders("two") == frozenset()
    assert flight.next_expiry(["ns/b"]) is None


def test_holding_again_replaces_the_pods_earlier_hold() -> None:
    flight = InFlight()
    flight.hold("ns/a", counted(["one"]), 1.0, now=0.0)
    flight.hold("ns/a", counted(["two"]), 1.0, now=0.0)
    assert flight.holders("one") == frozenset() and flight.holders("two") == {"ns/a"}


@pytest.mark.parametrize(("ttl", "margin"), [(0.0, 4), (-1.0, 4), (math.nan, 4), (1.0, 0)])
def test_bad_settings_are_refused(ttl: float, margin: int) -> None:
    with pytest.raises(ValueError, match="hold ttl"):
        InFlight(ttl=ttl, margin=margin)
