"""Plan slots: the room a repack plan holds on a node for a pod that is yet to be scheduled there.

In apply mode (docs/architecture.md#repack-execution) a plan moves a pod by evicting it; its
controller then creates a *replacement* (a new name and uid, the same owner and the same class:
requests, priority and node constraints), and the extender has to send that replacement to the
planned node. A formerly pending pod likewise has to land on its planned node. A slot says so:

* a *replacement* slot matches any pod whose controller has ``owner_uid`` and whose class
  signature equals the slot's; a *pending* slot matches the pod with ``pod_uid``; a *hold*
  matches like a replacement slot but has no node: the replacement of a pod the plan evicts for
  good waits until the plan ends instead of taking room the plan gives to others;
* a pod that matches open slots passes the filter only on their nodes; every other node fails
  with a reason naming the plan;
* an open slot holds one pod-unit of its node in the capacity table (as a reservation does), so
  other pods do not take the room meanwhile. When the pod is bound there the slot is *claimed*
  and its unit is handed over to the ledger's reservation of that pod;
* a slot ends when its plan step is done, when the plan aborts, or after a TTL (safety net).

Lookups are one dict access by owner uid and one by pod uid; a pod without a slot costs nothing
more, and nothing here is done per node for it. Pure logic: times are passed in, no I/O.
Neighbours: ``service`` (filter and bind consult it), ``repack.executor`` (opens and closes
slots), ``capacity`` (the units).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduler_ext.capacity import CapacityTable
from scheduler_ext.pods import PodFacts

DEFAULT_SLOT_TTL = 600.0

# (requests, priority, node selector, required affinity, tolerations), each made hashable.
Signature = tuple[object, ...]


class SlotKind(enum.Enum):
    REPLACEMENT = "replacement"  # steers the pod a controller creates in place of an evicted one
    PENDING = "pending"  # steers a pod that was pending when the plan was made
    HOLD = "hold"  # keeps an evicted pod's replacement off every node until the plan ends


class SlotEnd(enum.Enum):
    DONE = "done"  # its step completed
    RELEASED = "released"  # its plan ended otherwise (abort)
    EXPIRED = "expired"  # the TTL passed


@dataclass(slots=True)
class Slot:
    id: int
    plan: str
    kind: SlotKind
    node: str
    match: str  # owner uid (replacement) or pod uid (pending)
    signature: Signature | None  # class of the replacement; None for a pending slot
    for_pod: str  # namespace/name of the pod the plan moves or places (for reasons and logs)
    created_at: float
    claimed_by: str = ""  # uid of the pod bound into the slot


@dataclass
class SlotTable:
    """Open slots by the uid they match; every open (unclaimed) slot holds one unit of its node."""

    table: CapacityTable
    ttl: float = DEFAULT_SLOT_TTL
    _slots: dict[int, Slot] = field(default_factory=dict)
    _by_match: dict[str, list[Slot]] = field(default_factory=dict)
    # pods whose class the filter checked against a replacement slot: pod uid -> slot ids
    _vetted: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    opened: int = 0
    ended: dict[SlotEnd, int] = field(default_factory=lambda: dict.fromkeys(SlotEnd, 0))

    def __bool__(self) -> bool:
        return bool(self._slots)

    # -- queries ---------------------------------------------------------------------------

    def open_count(self) -> int:
        """Slots not yet ended (claimed or not): what ``carico_repack_plan_slots_open`` shows."""
        return len(self._slots)

    def slots(self, plan: str | None = None) -> list[Slot]:
        with self.table.lock:
            return [s for s in self._slots.values() if plan is None or s.plan == plan]

    def get(self, slot_id: int) -> Slot | None:
        return self._slots.get(slot_id)

    def candidates(self, pod: PodFacts) -> list[Slot]:
        """Unclaimed slots that may match ``pod`` (by pod uid, else by its controller's uid);
        a replacement slot still needs its signature checked (``matching``)."""
        by_match = self._by_match
        if not by_match:
            return []
        found = by_match.get(pod.uid) if pod.uid else None
        if found is None and pod.owner_uid:
            found = by_match.get(pod.owner_uid)
        if not found:
            return []
        return [s for s in found if not s.claimed_by]

    def matching(self, pod: PodFacts, signature: Signature | None) -> list[Slot]:
        """The unclaimed slots ``pod`` fits: a pending slot by uid, a replacement slot by owner
        and class. Remembers the match so that ``claim`` at bind time needs no class again."""
        found = [
            s
            for s in self.candidates(pod)
            if s.kind is SlotKind.PENDING or (signature is not None and s.signature == signature)
        ]
        if found and pod.uid:
            self._vetted[pod.uid] = tuple(s.id for s in found)
        return found

    # -- plan side -------------------------------------------------------------------------

    def open(
        self,
        plan: str,
        kind: SlotKind,
        node: str,
        match: str,
        now: float,
        *,
        signature: Signature | None = None,
        for_pod: str = "",
    ) -> Slot:
        if not match:
            raise ValueError("a slot needs the uid it matches (owner uid or pod uid)")
        if kind is not SlotKind.PENDING and signature is None:
            raise ValueError(f"a {kind.value} slot needs the class signature of the pod")
        if (kind is SlotKind.HOLD) != (not node):
            raise ValueError("a hold has no node; every other slot has one")
        with self.table.lock:
            slot = Slot(next(self._ids), plan, kind, node, match, signature, for_pod, now)
            self._slots[slot.id] = slot
            self._by_match.setdefault(match, []).append(slot)
            if node:
                self.table.add_reserved(node, 1)
            self.opened += 1
            return slot

    def close(self, slot_id: int, how: SlotEnd = SlotEnd.DONE) -> bool:
        """End a slot; its unit is given back unless a bound pod's reservation took it over."""
        with self.table.lock:
            slot = self._slots.pop(slot_id, None)
            if slot is None:
                return False
            same = self._by_match[slot.match]
            same.remove(slot)
            if not same:
                del self._by_match[slot.match]
            if slot.node and not slot.claimed_by:
                self.table.add_reserved(slot.node, -1)
            self.ended[how] += 1
            if not self._slots:
                self._vetted.clear()
            return True

    def release_plan(self, plan: str, how: SlotEnd = SlotEnd.RELEASED) -> int:
        """End every slot of ``plan`` (the plan completed or aborted); returns how many."""
        with self.table.lock:
            ids = [s.id for s in self._slots.values() if s.plan == plan]
            for slot_id in ids:
                self.close(slot_id, how)
            return len(ids)

    def expire(self, now: float) -> list[Slot]:
        """End the slots older than the TTL (their plan died without releasing them)."""
        with self.table.lock:
            old = [s for s in self._slots.values() if now - s.created_at >= self.ttl]
            for slot in old:
                self.close(slot.id, SlotEnd.EXPIRED)
            return old

    # -- extender side ---------------------------------------------------------------------

    def claim(self, pod: PodFacts, node: str) -> Slot | None:
        """At bind: take the slot on ``node`` that ``pod`` matched at filter time, if any.

        The slot's unit is handed to the caller, which reserves it for the pod in the ledger
        (or gives it back with ``unclaim`` when the binding fails)."""
        with self.table.lock:
            vetted = self._vetted.get(pod.uid, ()) if pod.uid else ()
            for slot_id in vetted:
                slot = self._slots.get(slot_id)
                if slot is not None and slot.node and slot.node == node and not slot.claimed_by:
                    slot.claimed_by = pod.uid
                    self.table.add_reserved(node, -1)
                    return slot
            return None

    def unclaim(self, slot: Slot) -> None:
        """The binding failed: the slot is open again and holds its unit again."""
        with self.table.lock:
            if self._slots.get(slot.id) is slot and slot.claimed_by:
                slot.claimed_by = ""
                self.table.add_reserved(slot.node, 1)

    def filter_reason(self, slots: Iterable[Slot]) -> str:
        """The reason a node fails for a pod that the plan wants elsewhere."""
        by_plan: dict[str, list[str]] = {}
        for slot in slots:
            by_plan.setdefault(slot.plan, []).append(slot.node)
        parts = [
            f"plan {plan} holds its slot on {', '.join(sorted(set(nodes) - {''}))}"
            if any(nodes)
            else f"plan {plan} holds this pod back until it ends"
            for plan, nodes in sorted(by_plan.items())
        ]
        return f"carico: repack {'; '.join(parts)}"


def signature(
    requests: Mapping[str, int],
    priority: int,
    node_selector: Mapping[str, str],
    affinity: object,
    tolerations: Iterable[object],
) -> Signature:
    """The class of a pod as the repacker groups pods (see ``repack.classes``), hashable."""
    return (
        tuple(sorted((k, v) for k, v in requests.items() if v)),
        priority,
        tuple(sorted(node_selector.items())),
        affinity,
        tuple(tolerations),
    )
