"""kube-scheduler's scheduling queue, emulated on the simulation clock (pure, no I/O).

Three sub-queues, as in kube-scheduler (pkg/scheduler/backend/queue):
* activeQ: pods ready to be tried, ordered by priority (all equal here) then by the time they were
  (re)queued;
* backoffQ: pods waiting out their back-off ``initial * 2**(attempts-1)``, capped at ``max``
  (defaults 1 s and 10 s); flushed to activeQ every second;
* unschedulable: pods whose last attempt found no node. A cluster event that may free room (an
  assigned pod deleted or finished — the scheduler's informer drops terminal pods, so a finished
  pod is a delete) moves them all back: to activeQ if their back-off has expired, else to backoffQ.
  A pod an extender rejected moves back on *any* pod event (a pod created, bound, started or
  finished): kube-scheduler cannot tell which event helps an extender, so since v1.30 it requeues
  such pods on every event (kubernetes#122019, PR #122022). Pods left there longer than 5
  minutes are flushed every 30 s whatever happens. Carico's extender wakes a pod it turned away
  once there is room for it, by updating the pod (``pod_updated``). A pod whose attempt
  overlapped a move request goes to backoffQ directly, so it is not forgotten.

Neighbours: ``scheduler.py`` pops from it and reports failures; the engine signals events.
"""

from __future__ import annotations

import heapq
import itertools


class SchedulingQueue:
    def __init__(
        self,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        flush_interval: float = 30.0,
        max_unschedulable: float = 300.0,
        backoff_flush_period: float = 1.0,
    ) -> None:
        if initial_backoff <= 0 or max_backoff < initial_backoff:
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.flush_interval = flush_interval
        self.max_unschedulable = max_unschedulable
        self.backoff_flush_period = backoff_flush_period
        self._seq = itertools.count()
        self._active: list[tuple[float, int, int]] = []
        self._backoff: list[tuple[float, int, int]] = []
        self.unschedulable: dict[int, float] = {}  # pod -> time it was put there
        self.on_any_event: set[int] = set()  # the unschedulable pods an extender rejected
        self.attempts: dict[int, int] = {}
        self.last_attempt: dict[int, float] = {}
        self._in_active: set[int] = set()
        self._in_backoff: set[int] = set()
        self._cycle = 0
        self._pod_cycle: dict[int, int] = {}
        self._move_cycle = -1
        self._next_backoff_flush = 0.0
        self._next_unsched_flush = flush_interval

    def __len__(self) -> int:
        return len(self._in_active) + len(self._in_backoff) + len(self.unschedulable)

    def pending_counts(self) -> tuple[int, int, int]:
        return len(self._in_active), len(self._in_backoff), len(self.unschedulable)

    def backoff_duration(self, pod: int) -> float:
        n = self.attempts.get(pod, 0)
        if n <= 0:
            return 0.0
        return min(self.initial_backoff * 2.0 ** (n - 1), self.max_backoff)

    def backoff_expiry(self, pod: int) -> float:
        return self.last_attempt.get(pod, float("-inf")) + self.backoff_duration(pod)

    def _push_active(self, pod: int, now: float) -> None:
        heapq.heappush(self._active, (now, next(self._seq), pod))
        self._in_active.add(pod)

    def _push_backoff(self, pod: int) -> None:
        heapq.heappush(self._backoff, (self.backoff_expiry(pod), next(self._seq), pod))
        self._in_backoff.add(pod)

    def add(self, pod: int, now: float) -> None:
        """A new pending pod."""
        self._push_active(pod, now)

    def pop(self, now: float) -> int | None:
        """Next pod to try, or None; counts the attempt."""
        while self._active:
            _, _, pod = heapq.heappop(self._active)
            if pod not in self._in_active:
                continue  # stale entry
            self._in_active.discard(pod)
            self.attempts[pod] = self.attempts.get(pod, 0) + 1
            self.last_attempt[pod] = now
            self._cycle += 1
            self._pod_cycle[pod] = self._cycle
            return pod
        return None

    def done(self, pod: int) -> None:
        """The pod was bound (or deleted): forget it."""
        self._in_active.discard(pod)
        self._in_backoff.discard(pod)
        self.unschedulable.pop(pod, None)
        self.on_any_event.discard(pod)
        self.attempts.pop(pod, None)
        self.last_attempt.pop(pod, None)
        self._pod_cycle.pop(pod, None)

    def add_unschedulable(self, pod: int, now: float, by_extender: bool = False) -> None:
        """The attempt found no node (``by_extender``: the extender rejected every candidate)."""
        self.last_attempt[pod] = now
        if self._move_cycle >= self._pod_cycle.get(pod, 0):
            self._push_backoff(pod)
        else:
            self.unschedulable[pod] = now
            if by_extender:
                self.on_any_event.add(pod)

    def _move(self, pod: int, now: float) -> None:
        del self.unschedulable[pod]
        self.on_any_event.discard(pod)
        if self.backoff_expiry(pod) <= now:
            self._push_active(pod, now)
        else:
            self._push_backoff(pod)

    def move_all(self, now: float) -> None:
        """A cluster event that may make unschedulable pods schedulable."""
        for pod in list(self.unschedulable):
            self._move(pod, now)
        self._move_cycle = self._cycle

    def move_extender_rejected(self, now: float) -> None:
        """Any pod event: the pods an extender rejected go back (kubernetes#122019)."""
        for pod in list(self.on_any_event):
            self._move(pod, now)

    def pod_updated(self, pod: int, now: float) -> None:
        """The pod itself changed (Carico's wake annotation): an unschedulable pod an extender
        rejected goes back, as on any event (docs/architecture.md#waking-turned-away-pods)."""
        if pod in self.on_any_event:
            self._move(pod, now)

    def tick(self, now: float) -> None:
        """The queue's periodic flushes (backoffQ every 1 s, leftovers every 30 s)."""
        if now + 1e-9 >= self._next_backoff_flush:
            self._next_backoff_flush = now + self.backoff_flush_period
            while self._backoff and self._backoff[0][0] <= now + 1e-9:
                _, _, pod = heapq.heappop(self._backoff)
                if pod in self._in_backoff:
                    self._in_backoff.discard(pod)
                    self._push_active(pod, now)
        if now + 1e-9 >= self._next_unsched_flush:
            self._next_unsched_flush = now + self.flush_interval
            for pod, since in list(self.unschedulable.items()):
                if now - since > self.max_unschedulable:
                    self._move(pod, now)
