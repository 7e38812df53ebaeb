"""kube-scheduler's scheduling queue: back-off, unschedulable pods, flushes."""

from __future__ import annotations

import pytest

from carico_app.simulate.queue import SchedulingQueue


def test_backoff_doubles_from_one_second_to_ten() -> None:
    q = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0)
    q.add(7, 0.0)
    durations = []
    t = 0.0
    for _ in range(6):
        assert q.pop(t) == 7
        durations.append(q.backoff_duration(7))
        q.add_unschedulable(7, t)
        assert q.backoff_expiry(7) == pytest.approx(t + durations[-1])
        t += 100.0  # long after the back-off: an event sends it straight back to activeQ
        q.move_all(t)
    assert durations == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_unschedulable_pod_waits_for_an_event_then_its_backoff() -> None:
    q = SchedulingQueue()
    q.add(1, 0.0)
    assert q.pop(0.0) == 1
    q.add_unschedulable(1, 0.0)
    q.tick(5.0)
    assert q.pop(5.0) is None  # no event: stays unschedulable (flush is at 5 min)
    # A pod finishes at 5.2 s; pod 1's 1 s back-off ended at 1.0 -> straight to activeQ.
    q.move_all(5.2)
    assert q.pop(5.2) == 1
    q.add_unschedulable(1, 5.3)  # second failure: 2 s back-off, until 7.3
    q.move_all(6.0)
    assert q.pop(6.0) is None  # moved to backoffQ
    assert q.pending_counts() == (0, 1, 0)
    q.tick(7.0)
    assert q.pop(7.0) is None
    q.tick(8.0)  # the next 1 s flush after 7.3
    assert q.pop(8.0) == 1


def test_move_during_attempt_sends_pod_to_backoff_not_unschedulable() -> None:
    q = SchedulingQueue()
    q.add(1, 0.0)
    assert q.pop(0.0) == 1
    q.move_all(0.05)  # an event while pod 1 was being scheduled
    q.add_unschedulable(1, 0.1)
    assert q.pending_counts() == (0, 1, 0)
    q.tick(1.2)
    assert q.pop(1.2) == 1


def test_leftover_unschedulable_pods_flush_after_five_minutes() -> None:
    q = SchedulingQueue(flush_interval=30.0, max_unschedulable=300.0)
    q.add(1, 0.0)
    assert q.pop(0.0) == 1
    q.add_unschedulable(1, 0.0)
    t = 0.0
    pod = None
    while t <= 340.0:
        q.tick(t)
        if (pod := q.pop(t)) is not None:
            break
        t += 0.5
    assert pod == 1
    # Flushed at the first 30 s tick after 300 s in the queue.
    assert 300.0 < t <= 330.0


def test_active_queue_is_fifo_by_queue_time() -> None:
    q = SchedulingQueue()
    for i, t in ((3, 0.2), (1, 0.0), (2, 0.1)):
        q.add(i, t)
    assert [q.pop(1.0), q.pop(1.0), q.pop(1.0), q.pop(1.0)] == [1, 2, 3, None]


def test_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError):
        SchedulingQueue(initial_backoff=5.0, max_backoff=1.0)


def test_a_pod_update_brings_back_only_a_pod_an_extender_rejected() -> None:
    q = SchedulingQueue()
    for pod in (1, 2):
        q.add(pod, 0.0)
        assert q.pop(0.0) == pod
    q.add_unschedulable(1, 0.0, by_extender=True)
    q.add_unschedulable(2, 0.0)  # an in-tree filter refused it: its own update does not help
    q.pod_updated(1, 5.0)  # Carico's wake annotation
    q.pod_updated(2, 5.0)
    q.pod_updated(3, 5.0)  # not queued at all: nothing happens
    assert q.pop(5.0) == 1
    assert q.pop(5.0) is None
    assert q.pending_counts() == (0, 0, 1)
