"""WaitingPods: which turned-away pods to wake, and when (scheduler_ext/waiting.py)."""

from __future__ import annotations

from scheduler_ext.pods import PodFacts
from scheduler_ext.waiting import WaitingPods

A = PodFacts("ns", "a", "uid-a")
B = PodFacts("ns", "b", "uid-b")
C = PodFacts("ns", "c", "uid-c")


class RoomOn:
    """A has_room that sees room on ``nodes`` only, recording what it was asked."""

    def __init__(self, *nodes: str) -> None:
        self.nodes = nodes
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def __call__(self, facts: PodFacts, candidates: list[str]) -> bool:
        self.asked.append((facts.key, tuple(candidates)))
        return any(n in self.nodes for n in candidates)


def test_a_pod_is_woken_once_one_of_its_candidates_has_room() -> None:
    w = WaitingPods(settle_s=1.0)
    w.refused(A, ["n0", "n1"], now=10.0)
    assert w.due(10.5, RoomOn("n0")) == []  # kube-scheduler's own back-off retry comes first
    assert w.due(11.0, RoomOn()) == []  # no room anywhere yet
    assert w.due(12.0, RoomOn("n2")) == []  # room, but not on a node it may go to
    assert w.due(13.0, RoomOn("n1")) == [A]
    assert w.woken == 1


def test_one_wake_per_refusal() -> None:
    w = WaitingPods(settle_s=0.0)
    w.refused(A, ["n0"], now=0.0)
    assert w.due(1.0, RoomOn("n0")) == [A]
    # Not retried yet (or an in-tree filter turned it away before Carico was asked): no more.
    assert w.due(2.0, RoomOn("n0")) == []
    assert w.due(60.0, RoomOn("n0")) == []
    # Carico turned it away again: the next room wakes it again.
    w.refused(A, ["n0"], now=61.0)
    assert w.due(62.0, RoomOn("n0")) == [A]


def test_a_pod_that_passed_was_bound_or_went_is_forgotten() -> None:
    w = WaitingPods(settle_s=0.0)
    w.refused(A, ["n0"], now=0.0)
    w.refused(B, ["n0"], now=0.0)
    w.passed(A.key)
    w.passed("ns/never-seen")  # harmless
    assert len(w) == 1
    assert w.due(1.0, RoomOn("n0")) == [B]


def test_the_longest_waiting_first_and_a_bounded_round() -> None:
    w = WaitingPods(settle_s=0.0, max_per_round=2)
    w.refused(A, ["n0"], now=0.0)
    w.refused(B, ["n0"], now=1.0)
    w.refused(C, ["n0"], now=2.0)
    w.refused(A, ["n0"], now=3.0)  # refused again: now the most recent
    assert w.due(4.0, RoomOn("n0")) == [B, C]
    assert w.due(5.0, RoomOn("n0")) == [A]


def test_old_records_and_the_oldest_beyond_the_bound_are_dropped() -> None:
    w = WaitingPods(settle_s=0.0, keep_for_s=100.0, max_waiting=2)
    w.refused(A, ["n0"], now=0.0)
    w.refused(B, ["n0"], now=50.0)
    w.refused(C, ["n0"], now=60.0)  # over the bound: A, the oldest, goes
    assert len(w) == 2
    has_room = RoomOn("n0")
    assert w.due(155.0, has_room) == [C]  # B is older than keep_for and dropped unasked
    assert [key for key, _ in has_room.asked] == [C.key]
    assert len(w) == 1


def test_room_is_looked_up_on_the_candidates_the_filter_was_asked_about() -> None:
    w = WaitingPods(settle_s=0.0)
    names = ["n3", "n7"]
    w.refused(A, names, now=0.0)
    has_room = RoomOn()
    w.due(1.0, has_room)
    assert has_room.asked == [(A.key, ("n3", "n7"))]


def test_checks_are_bounded_per_round_and_rotate() -> None:
    w = WaitingPods(settle_s=0.0, max_checks_per_round=2)
    for i, pod in enumerate((A, B, C)):
        w.refused(pod, [f"n{i}"], now=0.0)
    first = RoomOn()
    assert w.due(1.0, first) == []
    assert [key for key, _ in first.asked] == [A.key, B.key]  # two checks, then the round ends
    second = RoomOn("n0", "n2")
    assert w.due(2.0, second) == [C, A]  # C was not looked at last round: it comes first
    assert [key for key, _ in second.asked] == [C.key, A.key]
