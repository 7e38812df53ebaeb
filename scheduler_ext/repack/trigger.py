"""When the extender repacks on its own: pods stuck Unschedulable, debounced, rate-limited (§4.3).

kube-scheduler marks a pod it cannot place with the condition ``PodScheduled=False`` and reason
``Unschedulable``, and retries it from time to time. A repack is worth a solve only when such pods
stay stuck: the ``Trigger`` remembers since when each pod of the managed schedulers has been
Unschedulable (as first seen by the pod watch, on the caller's clock) and reports the pods stuck
longer than ``debounce``. Two rules keep it from becoming a solve loop: after any run (automatic
or on demand) nothing runs again for ``cooldown`` seconds, and a cluster state that was already
solved (same fingerprint: same nodes, pods, placements and pending set) is not solved again.

Pure logic: no I/O, the clock is a parameter. Neighbours: ``service`` (feeds it from the pod watch
and acts on it), ``kube`` of the extender (the watch of Pending pods).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from carico.pods import DEFAULT_SCHEDULER


@dataclass(frozen=True, slots=True)
class Unscheduled:
    """An unbound pod as the trigger sees it. ``gone``: it left the unbound-Pending set (bound,
    deleted or finished), so it no longer counts."""

    key: str
    scheduler: str
    unschedulable: bool
    gone: bool = False


def unscheduled(
    key: str,
    scheduler: str | None,
    conditions: Iterable[tuple[str, str, str]],
    *,
    node: str | None = None,
    deleting: bool = False,
    phase: str | None = None,
    deleted: bool = False,
) -> Unscheduled:
    """The trigger's view of a pod from its facts: ``conditions`` as (type, status, reason);
    ``deleting``: it has a deletionTimestamp; ``deleted``: a watch said DELETED."""
    stuck = any(
        kind == "PodScheduled" and status == "False" and reason == "Unschedulable"
        for kind, status, reason in conditions
    )
    gone = deleted or bool(node) or deleting or (phase or "Pending") != "Pending"
    return Unscheduled(key, scheduler or DEFAULT_SCHEDULER, stuck, gone)


def unscheduled_from_object(obj: Mapping[str, Any], *, deleted: bool = False) -> Unscheduled:
    """An ``Unscheduled`` from a raw API pod object (a list item or a watch event's object)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return unscheduled(
        f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}",
        str(spec.get("schedulerName") or ""),
        ((c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ()),
        node=spec.get("nodeName"),
        deleting=bool(meta.get("deletionTimestamp")),
        phase=status.get("phase"),
        deleted=deleted,
    )


class Trigger:
    """Tracks Unschedulable pods and decides when an automatic repack is due.

    ``managed_schedulers`` empty means the pods of every scheduler count.
    """

    def __init__(
        self, debounce: float, cooldown: float, managed_schedulers: Iterable[str] = ()
    ) -> None:
        if not debounce >= 0 or not cooldown >= 0:
            raise ValueError("debounce and cooldown must be >= 0 seconds")
        self.debounce = debounce
        self.cooldown = cooldown
        self.managed = frozenset(managed_schedulers)
        self._since: dict[str, float] = {}
        self._last_run: float | None = None
        self._last_fingerprint: str | None = None

    def _counts(self, pod: Unscheduled) -> bool:
        return (
            pod.unschedulable
            and not pod.gone
            and (not self.managed or pod.scheduler in self.managed)
        )

    def observe(self, pod: Unscheduled, now: float) -> None:
        """A watch event: start, keep or end the pod's Unschedulable period."""
        if self._counts(pod):
            self._since.setdefault(pod.key, now)
        else:
            self._since.pop(pod.key, None)

    def relist(self, pods: Iterable[Unscheduled], now: float) -> None:
        """A full list (at start, after a broken watch): keep the periods of pods still stuck."""
        since = {p.key: self._since.get(p.key, now) for p in pods if self._counts(p)}
        self._since = since

    @property
    def unschedulable(self) -> int:
        """Pods of the managed schedulers Unschedulable right now."""
        return len(self._since)

    def stuck(self, now: float) -> list[str]:
        """Pods Unschedulable for at least ``debounce`` seconds, sorted."""
        return sorted(k for k, t in self._since.items() if now - t >= self.debounce)

    def due(self, now: float) -> list[str]:
        """The stuck pods when an automatic run may start now (cooldown over), else []."""
        if self._last_run is not None and now - self._last_run < self.cooldown:
            return []
        return self.stuck(now)

    @property
    def last_fingerprint(self) -> str | None:
        """The cluster state the last run solved: solving it again would repeat that plan."""
        return self._last_fingerprint

    def ran(self, now: float, fingerprint: str | None = None) -> None:
        """A run started (or was skipped as unchanged) at ``now``: the cooldown starts.

        ``fingerprint``: the state it solved (None when it never got that far, e.g. the API
        could not be listed; such a state is tried again after the cooldown)."""
        self._last_run = now
        if fingerprint is not None:
            self._last_fingerprint = fingerprint
