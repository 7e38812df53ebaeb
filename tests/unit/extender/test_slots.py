"""The plan slot table: matching, the units it holds, claims at bind, release and expiry."""

from __future__ import annotations

import pytest

from scheduler_ext.capacity import CapacityTable
from scheduler_ext.pods import PodFacts
from scheduler_ext.slots import SlotEnd, SlotKind, SlotTable, signature

SIG = signature({"cpu": 200, "memory": 600, "pods": 1}, 0, {}, None, ())
OTHER = signature({"cpu": 250, "memory": 600, "pods": 1}, 0, {}, None, ())


def replacement(name: str, owner: str = "rs-uid") -> PodFacts:
    return PodFacts("default", name, uid=f"uid-{name}", owner_uid=owner)


@pytest.fixture
def slots() -> SlotTable:
    return SlotTable(CapacityTable(), ttl=60.0)


def test_open_slot_holds_a_unit_until_closed(slots: SlotTable) -> None:
    assert not slots and slots.candidates(replacement("a")) == []
    s = slots.open("p1", SlotKind.REPLACEMENT, "n1", "rs-uid", 0.0, signature=SIG)
    assert slots and slots.open_count() == 1
    assert slots.table.reserved_counts() == {"n1": 1}
    assert slots.close(s.id) is True and slots.close(s.id) is False
    assert slots.table.reserved_counts() == {} and slots.ended[SlotEnd.DONE] == 1


def test_replacement_matches_by_owner_and_class_only(slots: SlotTable) -> None:
    slots.open("p1", SlotKind.REPLACEMENT, "n2", "rs-uid", 0.0, signature=SIG)
    assert [s.node for s in slots.matching(replacement("a"), SIG)] == ["n2"]
    assert slots.matching(replacement("b"), OTHER) == []
    assert slots.matching(replacement("c"), None) == []  # class unknown: never steered
    assert slots.matching(replacement("d", owner="other"), SIG) == []


def test_pending_slot_matches_by_pod_uid(slots: SlotTable) -> None:
    slots.open("p1", SlotKind.PENDING, "n3", "uid-pending", 0.0)
    assert [s.node for s in slots.matching(PodFacts("default", "pending", "uid-pending"), None)]
    assert slots.matching(PodFacts("default", "pending", "uid-recreated"), None) == []


def test_claim_hands_the_unit_over_and_unclaim_takes_it_back(slots: SlotTable) -> None:
    s = slots.open("p1", SlotKind.REPLACEMENT, "n2", "rs-uid", 0.0, signature=SIG)
    pod = replacement("a")
    assert slots.claim(pod, "n2") is None  # never vetted by a filter call
    slots.matching(pod, SIG)
    assert slots.claim(pod, "n1") is None  # not the slot's node
    claimed = slots.claim(pod, "n2")
    assert claimed is s and s.claimed_by == "uid-a"
    assert slots.table.reserved_counts() == {}  # the ledger reserves for the pod instead
    assert slots.candidates(replacement("b")) == []  # a claimed slot steers nobody else
    slots.unclaim(s)
    assert s.claimed_by == "" and slots.table.reserved_counts() == {"n2": 1}
    slots.matching(pod, SIG)
    slots.claim(pod, "n2")
    slots.close(s.id)  # closing a claimed slot gives back nothing: it holds no unit
    assert slots.table.reserved_counts() == {}


def test_release_plan_ends_only_that_plans_slots(slots: SlotTable) -> None:
    slots.open("p1", SlotKind.PENDING, "n1", "u1", 0.0)
    slots.open("p1", SlotKind.REPLACEMENT, "n2", "rs", 0.0, signature=SIG)
    slots.open("p2", SlotKind.PENDING, "n1", "u2", 0.0)
    assert slots.release_plan("p1") == 2
    assert [s.plan for s in slots.slots()] == ["p2"]
    assert slots.table.reserved_counts() == {"n1": 1}
    assert slots.ended[SlotEnd.RELEASED] == 2


def test_slots_expire_after_their_ttl(slots: SlotTable) -> None:
    slots.open("p1", SlotKind.PENDING, "n1", "u1", 0.0)
    slots.open("p1", SlotKind.PENDING, "n1", "u2", 30.0)
    assert slots.expire(59.0) == []
    assert [s.match for s in slots.expire(60.0)] == ["u1"]
    assert slots.table.reserved_counts() == {"n1": 1} and slots.ended[SlotEnd.EXPIRED] == 1


def test_filter_reason_names_plan_and_nodes(slots: SlotTable) -> None:
    a = slots.open("p1", SlotKind.REPLACEMENT, "n2", "rs", 0.0, signature=SIG)
    b = slots.open("p1", SlotKind.REPLACEMENT, "n1", "rs", 0.0, signature=SIG)
    assert slots.filter_reason([a, b]) == "carico: repack plan p1 holds its slot on n1, n2"


def test_bad_slots_are_refused(slots: SlotTable) -> None:
    with pytest.raises(ValueError, match="uid"):
        slots.open("p1", SlotKind.PENDING, "n1", "", 0.0)
    with pytest.raises(ValueError, match="signature"):
        slots.open("p1", SlotKind.REPLACEMENT, "n1", "rs", 0.0)
    assert slots.open_count() == 0 and slots.table.reserved_counts() == {}


def test_hold_matches_like_a_replacement_but_holds_no_unit_and_passes_no_node(
    slots: SlotTable,
) -> None:
    hold = slots.open("p1", SlotKind.HOLD, "", "rs-uid", 0.0, signature=SIG)
    assert slots.table.reserved_counts() == {}
    pod = replacement("a")
    assert slots.matching(pod, SIG) == [hold]
    assert slots.claim(pod, "n1") is None
    assert slots.filter_reason([hold]) == "carico: repack plan p1 holds this pod back until it ends"
    assert slots.release_plan("p1") == 1 and slots.table.reserved_counts() == {}
    with pytest.raises(ValueError, match="hold has no node"):
        slots.open("p1", SlotKind.HOLD, "n1", "rs-uid", 0.0, signature=SIG)
