"""Pods Carico turned away, and when to wake kube-scheduler for them once there is room.

kube-scheduler parks a pod every node refused in its unschedulable queue and tries it again only on
a cluster event (a pod or node changing), or after five minutes. An extender's verdict rests on
capacity reports, which are no such event: when the room a pod waits for appears a few seconds
after the last pod event (the node's use settles after a pod ends), nothing wakes the pod and it
waits the five minutes through. Carico therefore remembers the pods its filter turned away (no
candidate passed, at least one failed on Carico's measure or its stale-data policy) and, once one
of those candidates has room for the pod, asks for the pod to be touched (an annotation): the pod
update event that sends it back to kube-scheduler's active queue
(docs/architecture.md#waking-turned-away-pods).

One touch per refusal: after a wake a pod is touched again only when the filter has turned it away
anew since, so a pod kube-scheduler does not retry (an in-tree filter refuses it first) is never
touched twice in a row. A record older than ``keep_for`` is dropped (deleted pods, pods bound by
someone else). Pure logic: no I/O, the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler_ext.pods import PodFacts

WAKE_ANNOTATION = "carico.io/room-seen-at"
MAX_WAITING = 10_000  # records kept at most; the oldest go first (bounded memory)


@dataclass(slots=True)
class TurnedAway:
    facts: PodFacts
    candidates: list[str]  # the names kube-scheduler asked about (kept by reference, not copied)
    refused_at: float
    woken_at: float | None = None  # the last wake asked for; None: not since the last refusal


class WaitingPods:
    """The pods whose last filter turned every candidate away, keyed by ``namespace/name``."""

    def __init__(
        self,
        *,
        settle_s: float = 1.0,
        keep_for_s: float = 600.0,
        max_per_round: int = 20,
        max_checks_per_round: int = 100,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        # settle_s: kube-scheduler retries a refused pod after its back-off (1 s first) on any
        # pod event anyway; waking it sooner would only race that retry.
        self.settle_s = settle_s
        self.keep_for_s = keep_for_s
        self.max_per_round = max_per_round
        # Each check is a filter over the pod's candidates: bounded per round, so that a
        # thousand pods waiting on a full cluster cost a sweep what a hundred filters do.
        self.max_checks_per_round = max_checks_per_round
        self.max_waiting = max_waiting
        self._pods: dict[str, TurnedAway] = {}
        self.woken = 0

    def __len__(self) -> int:
        return len(self._pods)

    def refused(self, facts: PodFacts, candidates: list[str], now: float) -> None:
        """The filter turned every candidate away (at least one on Carico's measure)."""
        self._pods.pop(facts.key, None)  # re-insert at the back: just looked at
        self._pods[facts.key] = TurnedAway(facts, candidates, now)
        while len(self._pods) > self.max_waiting:
            del self._pods[next(iter(self._pods))]

    def passed(self, key: str) -> None:
        """The pod passed a filter, was bound or is gone: nothing to wake any more."""
        self._pods.pop(key, None)

    def due(self, now: float, has_room: Callable[[PodFacts, list[str]], bool]) -> list[PodFacts]:
        """The pods to wake now: refused at least ``settle_s`` ago, not woken since their last
        refusal, with room on one of their candidates by ``has_room``. At most
        ``max_per_round`` pods and ``max_checks_per_round`` checks; the pods checked least
        recently come first (a pod checked without room goes to the back)."""
        horizon = now - self.keep_for_s
        for key in [k for k, p in self._pods.items() if p.refused_at < horizon]:
            del self._pods[key]
        out: list[PodFacts] = []
        no_room: list[str] = []
        checks = 0
        for key, pod in self._pods.items():
            if len(out) >= self.max_per_round or checks >= self.max_checks_per_round:
                break
            if pod.woken_at is not None or now - pod.refused_at < self.settle_s:
                continue
            checks += 1
            if has_room(pod.facts, pod.candidates):
                pod.woken_at = now
                out.append(pod.facts)
            else:
                no_room.append(key)
        for key in no_room:
            self._pods[key] = self._pods.pop(key)
        self.woken += len(out)
        return out
