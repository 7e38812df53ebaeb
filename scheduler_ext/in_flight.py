"""Pods between their filter and their bind: the room they are about to take.

kube-scheduler binds asynchronously: once a pod's scheduling cycle has chosen a node, the next
pod's cycle starts, and its filter can reach the extender before the first pod's bind does. The
second filter then sees the room the first pod is about to take, passes a node that has room for
one of them, and the second bind is refused; an extender marked ``ignorable`` (the shipped
configuration) has its bind refusal skipped, and kube-scheduler's own binder binds the pod anyway.

So a pod that passes a filter *holds* the passed nodes where little room is left (room for
fewer than ``HOLD_MARGIN`` more pods than the threshold, the holds already there counted), until
its bind comes, its pod is seen bound or gone, its next filter comes, or ``HOLD_TTL`` passes. A
later filter of another pod that passes a held node only because the holders are not counted
yet waits for them (docs/architecture.md#pods-in-flight). Holds count in pods of the filtered
pod's class: exact for a burst of one class, a short wait at worst for mixed ones.

Pure: no I/O, times are passed in. Neighbours: ``service`` (the waiting), ``ledger``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# A node is held when it has room for fewer than this many more pods of the filtered pod's class
# than the threshold: a node with more room is not at risk from the few pods in flight at once
# (kube-scheduler runs one scheduling cycle at a time, and a bind reaches the extender within
# milliseconds of its cycle: one pod in flight is the common case, two cover a slow bind). A
# larger margin holds more nodes of a nearly full cluster at every filter: at 5,000 nodes, 4
# made holding 7 % of the extender's time.
HOLD_MARGIN = 2
# A hold whose bind never came (the pod's cycle failed after the filter, another binder bound it
# and the watch missed it) ends after this long: a filter waits at most this long for it.
HOLD_TTL = 1.0


@dataclass(slots=True)
class _Hold:
    nodes: frozenset[str]
    until: float


class InFlight:
    """The holds of the pods that passed a filter and have not been bound yet.

    Kept by pod only, with no index from node to holders: a hold is taken at every filter and
    ended at every bind, over the hundred or more nearly full nodes of a busy cluster, while only
    the one or two pods in flight at once hold anything. So the questions about a node ("who
    holds it?") go through the few holds with C-level set operations instead, and taking or
    ending a hold does no per-node work in Python beyond choosing its nodes."""

    def __init__(self, ttl: float = HOLD_TTL, margin: int = HOLD_MARGIN) -> None:
        if not ttl > 0 or margin < 1:
            raise ValueError(f"hold ttl must be > 0 and margin >= 1, got {ttl!r}, {margin!r}")
        self.ttl = ttl
        self.margin = margin
        self._holds: dict[str, _Hold] = {}  # pod key -> its hold

    def __len__(self) -> int:
        return len(self._holds)

    def holders(self, node: str) -> frozenset[str]:
        return frozenset(pod for pod, hold in self._holds.items() if node in hold.nodes)

    def conflicts(
        self, pod: str, counted: Iterable[tuple[str, float]], threshold: float
    ) -> dict[str, frozenset[str]]:
        """Of the ``counted`` nodes the pod passed (with the pods of its class that fit on each;
        those with much room may be left out), the ones it passes only because the pods holding
        them are not counted yet: its count there less the other holders is below
        ``threshold``; with the holders of each."""
        others = [(p, hold.nodes) for p, hold in self._holds.items() if p != pod]
        out: dict[str, frozenset[str]] = {}
        if not others:
            return out
        counts = dict(counted)
        if len(others) == 1:  # the common case: one pod in flight, one set of holders
            holder, nodes = others[0]
            holders = frozenset((holder,))
            # in the order passed (the reasons' order in the reply), not a set's
            for node in [n for n in counts if n in nodes]:
                if counts[node] - 1 < threshold:
                    out[node] = holders
            return out
        held = others[0][1].union(*(nodes for _, nodes in others[1:]))
        # a node with room for as many pods as there are others is no conflict whoever holds it
        below = threshold + len(others)
        sets: dict[tuple[str, ...], frozenset[str]] = {}  # one frozenset per set of holders
        for node in [n for n in counts if n in held]:
            count = counts[node]
            if count >= below:
                continue
            who = tuple(p for p, nodes in others if node in nodes)
            if count - len(who) < threshold:
                out[node] = sets.get(who) or sets.setdefault(who, frozenset(who))
        return out

    def hold(
        self, pod: str, counted: Iterable[tuple[str, float]], threshold: float, now: float
    ) -> int:
        """``pod`` passed the ``counted`` nodes, with that many pods of its class fitting on
        each (nodes with much room may be left out): hold those with little room left.
        Replaces the pod's earlier hold. Returns the nodes held."""
        self.release(pod)
        limit = threshold + self.margin
        pairs = list(counted)
        if not pairs:
            return 0
        names, counts = zip(*pairs, strict=True)
        # a node with little room is held whoever else holds it; only one with more room needs
        # its holders counted (none with the service's list, which leaves such nodes out)
        if max(counts) < limit:
            nodes = frozenset(names)
        else:
            holds = self._holds.values()
            nodes = frozenset(
                node
                for node, count in pairs
                if count < limit or count - sum(node in h.nodes for h in holds) < limit
            )
        if nodes:
            self._holds[pod] = _Hold(nodes, now + self.ttl)
        return len(nodes)

    def release(self, pod: str) -> bool:
        """The pod's hold ends (its bind came, it was seen bound or gone, or it is filtered
        again); False if it held nothing."""
        return self._holds.pop(pod, None) is not None

    def expire(self, now: float) -> list[str]:
        """End the holds older than the TTL; the pods whose holds ended."""
        gone = [pod for pod, hold in self._holds.items() if hold.until <= now]
        for pod in gone:
            self.release(pod)
        return gone

    def next_expiry(self, pods: Iterable[str]) -> float | None:
        """When the first of these pods' holds ends by its TTL (None: none holds)."""
        times = [h.until for p in pods if (h := self._holds.get(p)) is not None]
        return min(times) if times else None
