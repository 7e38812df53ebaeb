"""The reservation ledger: a pod's cost held on a node from bind until the node's reports count it.

Between a bind and the moment the node's agent counts the new pod, the node's reported avail still
includes the room that pod will take; without a reservation every pod of a burst would be sent to
the same node (docs/architecture.md#reservations). ``reserve`` checks the capacity and takes the
unit under the table's lock, so parallel binds never over-reserve.

A reservation ends when a report of its node lists the pod among the pods it counts (the agent
lists the uids of the pods it began to count in the last half minute); when the pod watch says it
ended (Succeeded, Failed) or went to another node; when the bind that made it fails (undone: a
failed bind never touches a reservation it did not make); or after a TTL as a safety net. A pod
that leaves the bound-Pending watch (it runs, or was deleted: the watch cannot tell) is *handed
over*: its reservation stays until a report counts it, or ``handover_timeout`` seconds.
Ending it at Running instead left a gap: the pod counted nowhere until its agent's next report,
and kube-scheduler, which retries waiting pods on that very pod update, could fill the node past
its room. On start, and whenever the watch has to relist, the ledger is reconciled against the
pods that are bound and still Pending.

Pure logic: times are passed in. Neighbours: ``capacity`` (the counts live there, so verdicts see
them), ``service`` (bind flow), the cluster implementations (pod events).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from carico.pods import Requests
from protos.carico.v1 import capacity_pb2
from scheduler_ext.capacity import CapacityTable, Ingest, fmt
from scheduler_ext.class_fit import Fit
from scheduler_ext.pods import ExemptionPolicy, PodFacts

PENDING = "Pending"
RUNNING = "Running"
# Seconds a pod out of Pending keeps its reservation while no report of its node lists it: an
# agent lists a pod in the report it makes on seeing the pod Running, within a second even on a
# busy node; a pod deleted before it ran, or on a node whose agent is older than the list, is
# never listed and is let go after this.
HANDOVER_TIMEOUT = 5.0
DEFAULT_EXEMPTIONS = ExemptionPolicy()


@dataclass(frozen=True, slots=True)
class PodState:
    """A pod as the watch or a list reports it."""

    facts: PodFacts
    node: str  # spec.nodeName ("" when not bound)
    phase: str
    deleted: bool = False


@dataclass(slots=True)
class Reservation:
    key: str
    uid: str
    node: str
    created_at: float
    # The pod's class and requests: a node with per-class data charges the class's cost.
    workload_class: str = ""
    requests: Requests = Requests()
    # When the pod watch saw the pod leave Pending (None until then): handed over, it waits for
    # a report of the node to count it.
    handed_over_at: float | None = None


class Release(enum.Enum):
    COUNTED = "counted"  # a report of its node counts the pod
    RELEASED = "released"  # the pod ended, was deleted or moved
    # out of Pending, but no report listed it within the hand-over timeout (deleted before it
    # ran, ended at once, or an agent too old to list the pods it counts)
    UNCOUNTED = "uncounted"
    EXPIRED = "expired"  # the TTL passed without news of the pod
    UNDONE = "undone"  # the bind failed


class StaleData(enum.Enum):
    FAIL_OPEN = "fail-open"
    FAIL_CLOSED = "fail-closed"


@dataclass(frozen=True)
class ReserveResult:
    ok: bool
    error: str = ""
    stale: str = ""  # "stale" or "missing" when the data could not be checked
    # What this very call changed, so that ``undo`` gives back that and nothing else: the
    # reservation it made (None when the pod held one there already) and the one of the same
    # name (an older uid) it displaced.
    made: Reservation | None = None
    displaced: Reservation | None = None
    # The room the check saw (pods of the pod's class, or avail − reserved in pod-units) before
    # this unit was taken; None when nothing was checked (stale data, a plan slot, a repeat).
    room: float | None = None
    # The pod's class fit the check used (its cost, the node's free room), when per class.
    fit: Fit | None = None


class Ledger:
    def __init__(
        self,
        table: CapacityTable,
        *,
        ttl: float = 300.0,
        exemptions: ExemptionPolicy = DEFAULT_EXEMPTIONS,
        stale_policy: StaleData = StaleData.FAIL_OPEN,
        handover_timeout: float = HANDOVER_TIMEOUT,
    ) -> None:
        self.table = table
        self.ttl = ttl
        self.handover_timeout = handover_timeout
        self.exemptions = exemptions
        self.stale_policy = stale_policy
        self._by_key: dict[str, Reservation] = {}
        self._by_uid: dict[str, Reservation] = {}
        # Lifetime counts by how reservations ended; the service exports them as metrics.
        self.created = 0
        self.ended: dict[Release, int] = dict.fromkeys(Release, 0)

    # -- queries ---------------------------------------------------------------------------

    def get(self, key: str) -> Reservation | None:
        return self._by_key.get(key)

    def open_count(self) -> int:
        return len(self._by_key)

    def reservations(self) -> list[Reservation]:
        with self.table.lock:
            return list(self._by_key.values())

    # -- bind ------------------------------------------------------------------------------

    def reserve(
        self, facts: PodFacts, node: str, now: float, *, check: bool = True
    ) -> ReserveResult:
        """Hold one pod-unit of ``node`` for the pod, checking capacity first when ``check``.

        Repeating the call for the same pod and node is a no-op; the same pod on another node is
        refused (the API server would refuse the second binding too); a stale reservation under
        the same name but another uid (the pod was recreated) is replaced.
        """
        with self.table.lock:
            current = self._by_key.get(facts.key)
            if current is not None and current.uid == facts.uid:
                if current.node == node:
                    return ReserveResult(True)
                # The API refuses to bind a pod twice; keep the reservation that is real.
                return ReserveResult(
                    False, f"carico: pod {facts.key} is already bound to node {current.node}"
                )
            if not self.table.can_track(node):
                return ReserveResult(False, f"carico: {self.table.full_reason(node)}")
            stale = ""
            room: float | None = None
            fit: Fit | None = None
            if check:
                klass, requests = facts.workload_class, facts.requests
                probing = self.table.fleet_probing(klass)
                # Without a cluster-wide probe, the fit the filter just remembered for the node
                # (the same, unless the node's report or reservations changed since)
                fit = (
                    self.table.class_fits(klass, requests, now)(node)
                    if probing is None and klass
                    else self.table.fit(node, klass, requests, now, probing)
                )
                threshold = self.table.thresholds.threshold
                free = self.table.free.get(node)
                if free is None or not self.table.is_fresh(node, now):
                    stale = "missing" if free is None else "stale"
                    fit = None  # not decided on
                    if self.stale_policy is StaleData.FAIL_CLOSED:
                        return ReserveResult(
                            False, f"carico: no fresh capacity data for node {node}", stale
                        )
                elif fit is not None:
                    room = fit.count
                    if fit.count < threshold:
                        report = self.table.report(node)
                        names = report.classes.feature_names if report and report.classes else ()
                        return ReserveResult(False, fit.reason(names, threshold))
                else:
                    room = free
                    if free < threshold:
                        reserved = self.table.reserved(node)
                        return ReserveResult(
                            False,
                            f"carico: avail {fmt(free + reserved)} - reserved {reserved}"
                            f" < {fmt(threshold)}",
                        )
            if current is not None:
                self._drop(current, Release.RELEASED)
            made = Reservation(
                facts.key, facts.uid, node, now, facts.workload_class, facts.requests
            )
            self._add(made)
            return ReserveResult(
                True, stale=stale, made=made, displaced=current, room=room, fit=fit
            )

    def undo(self, result: ReserveResult) -> bool:
        """After a failed bind, give back what the ``reserve`` that returned ``result`` took.

        Only that call's own reservation goes, and the one it displaced comes back: a bind the
        API refuses (409 when kube-scheduler retries a bind that in fact succeeded, a wrong uid)
        must leave the ledger as it was (docs/architecture.md#reservations). Nothing happens when
        the call made none or a pod event has replaced it since.
        """
        made = result.made
        if made is None:
            return False
        with self.table.lock:
            if self._by_key.get(made.key) is not made:
                return False
            self._drop(made, Release.UNDONE)
            old = result.displaced
            if old is not None:
                # Counted as created again, so that created minus ended stays the open count.
                self._add(
                    Reservation(
                        old.key,
                        old.uid,
                        old.node,
                        old.created_at,
                        old.workload_class,
                        old.requests,
                    )
                )
            return True

    # -- capacity reports ------------------------------------------------------------------

    def ingest(
        self, msg: capacity_pb2.NodeCapacity, stream: Hashable, now: float
    ) -> tuple[Ingest, str]:
        """Take a capacity report into the table; the reservations of the pods it counts end."""
        outcome, why = self.table.ingest(msg, stream, now)
        if outcome is Ingest.ACCEPTED and msg.counted_pods:
            self.counted(msg.node, msg.counted_pods)
        return outcome, why

    def counted(self, node: str, uids: Iterable[str]) -> list[Reservation]:
        """End the reservations on ``node`` of the pods ``uids`` that its report counts."""
        ended: list[Reservation] = []
        with self.table.lock:
            for uid in uids:
                res = self._by_uid.get(uid)
                if res is not None and res.node == node:
                    self._drop(res, Release.COUNTED)
                    ended.append(res)
        return ended

    # -- pod lifecycle ---------------------------------------------------------------------

    def observe(self, pod: PodState, now: float) -> Release | None:
        """Apply one pod event; returns how a reservation ended, if one did.

        A pod that leaves the bound-Pending watch arrives as a deletion carrying its last
        Pending state (the API server sends the object as it was when it still matched), so a
        pod that started cannot be told from one deleted before it ran: both hand the
        reservation over (it waits for a report to count the pod, at most the hand-over
        timeout), as does an event that says Running. Succeeded or Failed, or the pod on another
        node, end it at once.
        """
        key = pod.facts.key
        with self.table.lock:
            current = self._by_key.get(key)
            if pod.deleted or pod.phase != PENDING:
                if current is None or (pod.facts.uid and current.uid != pod.facts.uid):
                    return None  # another pod of the same name (an older uid)
                moved = bool(pod.node) and pod.node != current.node
                if (pod.deleted or pod.phase == RUNNING) and not moved:
                    if current.handed_over_at is None:
                        current.handed_over_at = now
                    return None
                return self._drop(current, Release.RELEASED)
            if not pod.node:
                # Unbound Pending pod: possibly an event older than our bind; nothing to do.
                return None
            if current is not None and current.node == pod.node and current.uid == pod.facts.uid:
                return None
            # Bound and Pending without (or with a different) reservation: bound by someone else,
            # by us before a restart, or recreated under the same name. Track it unconditionally.
            ended = self._drop(current, Release.RELEASED) if current is not None else None
            if self.exemptions.reason(pod.facts) is None:
                self._add(self._of(pod, now))
            return ended

    def reconcile(self, pods: Iterable[PodState], now: float) -> None:
        """Make the ledger match a fresh list of the pods that are bound and Pending.

        A reservation whose pod is no longer listed may be a pod that started while the watch
        was down: it is handed over (kept until a report counts it or the hand-over timeout).
        """
        with self.table.lock:
            wanted = {
                p.facts.key: p
                for p in pods
                if p.phase == PENDING
                and p.node
                and not p.deleted
                and self.exemptions.reason(p.facts) is None
            }
            for key, res in list(self._by_key.items()):
                pod = wanted.get(key)
                if pod is None:
                    if res.handed_over_at is None:
                        res.handed_over_at = now
                elif pod.node != res.node or pod.facts.uid != res.uid:
                    self._drop(res, Release.RELEASED)
            for key, pod in wanted.items():
                if key not in self._by_key:
                    self._add(self._of(pod, now))

    def expire(self, now: float) -> list[Reservation]:
        """End the reservations older than the TTL (the watch missed the pod's fate); returns
        them. Handed-over ones no report counted within the hand-over timeout end too, as
        ``UNCOUNTED``, not returned (an agent too old to list its pods, nothing amiss)."""
        with self.table.lock:
            old = [r for r in self._by_key.values() if now - r.created_at >= self.ttl]
            for res in old:
                self._drop(res, Release.EXPIRED)
            for res in [
                r
                for r in self._by_key.values()
                if r.handed_over_at is not None and now - r.handed_over_at >= self.handover_timeout
            ]:
                self._drop(res, Release.UNCOUNTED)
            return old

    @staticmethod
    def _of(pod: PodState, now: float) -> Reservation:
        f = pod.facts
        return Reservation(f.key, f.uid, pod.node, now, f.workload_class, f.requests)

    def _add(self, res: Reservation) -> None:
        self._by_key[res.key] = res
        if res.uid:
            self._by_uid[res.uid] = res
        self.table.add_reserved(res.node, 1, res.workload_class, res.requests)
        self.created += 1

    def _drop(self, res: Reservation, how: Release) -> Release:
        del self._by_key[res.key]
        if self._by_uid.get(res.uid) is res:
            del self._by_uid[res.uid]
        self.table.add_reserved(res.node, -1, res.workload_class, res.requests)
        self.ended[how] += 1
        return how
