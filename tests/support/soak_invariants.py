"""The chaos soak's invariants, checked over what the harness recorded.

Pure: every function takes observations (parsed log lines, samples with their times) and returns
what broke; nothing here reads a clock or a socket. The harness (tests/e2e/soak_bed.py) records;
the soak's report (soak_report.py) prints.

* binds: every accepted bind names the room the extender's check saw (the extender's decision line,
  docs/architecture.md#observability); room below the threshold is an overcommit unless the
  stale-data policy, a repack plan slot or an exemption decided it (counted and listed apart). A
  pod the API shows bound to a node with no decision line for that pod and node is a bind that
  bypassed the check, also a violation. Independently of the extender's own numbers, the
  reservations it held at each decision must cover the pods the API showed bound and Pending there;
* pending: no pod waits unbound longer than a bound while some node had room for it throughout;
* ttl: no reservation is seen older than its TTL (plus the sweep's period and the sampling gap);
  no repack plan slot stays open longer than its TTL;
* capacity: no node's requested total ever exceeds its allocatable (repack apply moves pods);
* budgets: a PodDisruptionBudget's protected pods never fall below its minAvailable once reached;
* workloads: every Job completes and every Deployment reaches its replicas;
* recoveries: each restart is back to ready within the stated bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BindDecision:
    """One of the extender's ``bind`` decision lines (JSON log format)."""

    at: float  # unix seconds
    pod: str  # namespace/name
    uid: str
    node: str
    room: float | None
    threshold: float
    reserved: int | None = None  # the node's reservations right after this one was taken
    stale: str = ""  # "stale" / "missing": the stale-data policy decided
    slot: str = ""  # the repack plan whose slot the pod took
    exempt: str = ""

    @property
    def basis(self) -> str:
        """What decided: ``checked``, ``stale-policy``, ``plan-slot``, ``exempt`` or ``repeat``."""
        if self.exempt:
            return "exempt"
        if self.slot:
            return "plan-slot"
        if self.stale:
            return "stale-policy"
        return "repeat" if self.room is None else "checked"


def parse_decision(line: str) -> BindDecision | None:
    """A bind decision from one JSON log line; None for any other line (or a torn last line of a
    killed process)."""
    if '"decision"' not in line:
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("decision") != "bind":
        return None
    room = entry.get("room")
    return BindDecision(
        at=float(entry["ts"]),
        pod=str(entry["pod"]),
        uid=str(entry.get("uid", "")),
        node=str(entry["node"]),
        room=None if room is None else float(room),
        threshold=float(entry["threshold"]),
        reserved=None if entry.get("reserved") is None else int(entry["reserved"]),
        stale=str(entry.get("stale", "")),
        slot=str(entry.get("slot", "")),
        exempt=str(entry.get("exempt", "")),
    )


@dataclass(frozen=True)
class Binding:
    """A pod the API showed bound to a node (first seen at ``at``)."""

    at: float
    pod: str
    uid: str
    node: str


@dataclass
class BindCheck:
    decisions: int
    by_basis: dict[str, int]
    overcommits: list[BindDecision]
    stale_policy: list[BindDecision]
    unexplained: list[Binding]

    @property
    def violations(self) -> list[str]:
        out = [
            f"{d.pod} bound to {d.node} with room {d.room:.2f} < threshold {d.threshold:g}"
            for d in self.overcommits
            if d.room is not None
        ]
        out += [
            f"{b.pod} bound to {b.node} with no decision of the extender" for b in self.unexplained
        ]
        return out


def check_binds(decisions: Iterable[BindDecision], bindings: Iterable[Binding]) -> BindCheck:
    decided = list(decisions)
    by_basis: dict[str, int] = {}
    for d in decided:
        by_basis[d.basis] = by_basis.get(d.basis, 0) + 1
    overcommits = [
        d for d in decided if d.basis == "checked" and d.room is not None and d.room < d.threshold
    ]
    seen = {(d.uid, d.node) for d in decided} | {(d.pod, d.node) for d in decided if not d.uid}
    unexplained = [
        b for b in bindings if (b.uid, b.node) not in seen and (b.pod, b.node) not in seen
    ]
    return BindCheck(
        decisions=len(decided),
        by_basis=by_basis,
        overcommits=overcommits,
        stale_policy=[d for d in decided if d.basis == "stale-policy"],
        unexplained=unexplained,
    )


@dataclass(frozen=True)
class PodSpan:
    """A pod bound to ``node`` and still Pending from ``bound_at`` until ``left_at`` (wall
    seconds, as the harness's pod watch first saw each; None: never seen leaving)."""

    pod: str
    uid: str
    node: str
    bound_at: float
    left_at: float | None


def check_reserved(
    decisions: Iterable[BindDecision], spans: Sequence[PodSpan], ttl_s: float, lag_s: float
) -> list[str]:
    """Checked binds where the extender held fewer reservations on the node than other pods the
    API showed bound there and still Pending: its room then counted pods twice (a ledger that lost
    pods, e.g. across a restart). A pod only counts when the harness saw it bound before the
    decision, still Pending ``lag_s`` after it (the extender's watch may see a pod start before
    the harness's does) and younger than the reservation TTL (older ones expire by design)."""
    by_node: dict[str, list[PodSpan]] = {}
    for span in spans:
        by_node.setdefault(span.node, []).append(span)
    out = []
    for d in decisions:
        if d.basis != "checked" or d.reserved is None:
            continue
        others = [
            s.pod
            for s in by_node.get(d.node, ())
            if s.uid != d.uid
            and s.bound_at <= d.at
            and (s.left_at is None or s.left_at - lag_s > d.at)
            and d.at - s.bound_at < ttl_s - lag_s
        ]
        if d.reserved - 1 < len(others):
            out.append(
                f"{d.pod} bound to {d.node} with {d.reserved - 1} other reservation(s) held "
                f"while {len(others)} pod(s) were bound there and Pending: {', '.join(others)}"
            )
    return out


@dataclass(frozen=True)
class PendingSample:
    """At ``at``: how long each unbound pod has waited, the room each node with fresh data had
    left (pods of the threshold's unit, after reservations), and the nodes whose unrequested
    allocatable fits each waiting pod's requests (kube-scheduler's own filter)."""

    at: float
    waiting: Mapping[str, float]  # pod -> seconds since created
    room: Mapping[str, float]  # node -> room − reserved (fresh nodes only)
    fits: Mapping[str, frozenset[str]] = field(default_factory=dict)  # pod -> nodes; absent: all

    def roomy(self, pod: str, threshold: float) -> list[str]:
        """Nodes where ``pod`` had room by both Carico's measure and its requests."""
        fits = self.fits.get(pod)
        return [n for n, r in self.room.items() if r >= threshold and (fits is None or n in fits)]


def check_pending(
    samples: Sequence[PendingSample], bound_s: float, threshold: float = 1.0
) -> list[str]:
    """Pods seen waiting longer than ``bound_s`` at a sample where every sample of the last
    ``bound_s`` showed some node with room for that pod: a pod starved beside free room.
    A pod is reported once."""
    ordered = sorted(samples, key=lambda s: s.at)
    out: list[str] = []
    reported: set[str] = set()
    for i, s in enumerate(ordered):
        late = [p for p, w in s.waiting.items() if w > bound_s and p not in reported]
        if not late:
            continue
        window = [o for o in ordered[: i + 1] if o.at >= s.at - bound_s]
        if not window or window[0].at > s.at - 0.9 * bound_s:
            continue  # too few samples to cover the bound
        for pod in late:
            if all(o.roomy(pod, threshold) for o in window):
                reported.add(pod)
                best = max(s.roomy(pod, threshold), key=lambda n: s.room[n])
                out.append(
                    f"{pod} pending {s.waiting[pod]:.0f}s while {best} had room {s.room[best]:.2f}"
                )
    return out


@dataclass(frozen=True)
class ReservationSample:
    at: float
    ages: Mapping[str, float]  # pod -> age_seconds of its reservation


def check_reservation_ttl(
    samples: Iterable[ReservationSample], ttl_s: float, slack_s: float
) -> list[str]:
    """Reservations seen older than ``ttl_s + slack_s`` (each pod reported once)."""
    out: list[str] = []
    seen: set[str] = set()
    for s in samples:
        for pod, age in s.ages.items():
            if age > ttl_s + slack_s and pod not in seen:
                seen.add(pod)
                out.append(f"reservation of {pod} seen {age:.1f}s old (ttl {ttl_s:g}s)")
    return out


def open_spans(samples: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, end) of each run of samples whose value is above zero (times of its first and
    last such sample)."""
    spans: list[tuple[float, float]] = []
    start = last = None
    for at, value in sorted(samples):
        if value > 0:
            if start is None:
                start = at
            last = at
        elif start is not None and last is not None:
            spans.append((start, last))
            start = last = None
    if start is not None and last is not None:
        spans.append((start, last))
    return spans


def check_slot_ttl(samples: Iterable[tuple[float, float]], ttl_s: float) -> list[str]:
    """Plan slots open without a break for longer than their TTL (``samples``: time, slots open).
    Plans run one at a time, so an unbroken span is one plan's slots."""
    return [
        f"plan slots open for {end - start:.0f}s without a break (ttl {ttl_s:g}s)"
        for start, end in open_spans(samples)
        if end - start > ttl_s
    ]


@dataclass(frozen=True)
class LoadSample:
    at: float
    requested: Mapping[str, Mapping[str, int]]  # node -> resource -> requested (milli / bytes)


def check_capacity(
    samples: Iterable[LoadSample], allocatable: Mapping[str, Mapping[str, int]]
) -> list[str]:
    """Every moment a node's requested total exceeded its allocatable (once per node and
    resource)."""
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    for s in samples:
        for node, per in s.requested.items():
            for resource, value in per.items():
                limit = allocatable.get(node, {}).get(resource)
                if limit is not None and value > limit and (node, resource) not in seen:
                    seen.add((node, resource))
                    out.append(f"{node}: {resource} requested {value} > allocatable {limit}")
    return out


def check_budget(samples: Iterable[tuple[float, int]], min_available: int, name: str) -> list[str]:
    """The budget's healthy pods (time, count) below ``min_available`` after first reaching it."""
    reached = False
    out: list[str] = []
    for at, healthy in sorted(samples):
        if healthy >= min_available:
            reached = True
        elif reached:
            out.append(f"{name}: {healthy} healthy < minAvailable {min_available} at {at:.1f}")
    return out


def check_workloads(
    jobs: Mapping[str, bool], deployments: Mapping[str, tuple[int, int]]
) -> list[str]:
    """Jobs that did not complete; Deployments whose ready replicas (ready, wanted) fall short."""
    out = [f"job {name} did not complete" for name, done in sorted(jobs.items()) if not done]
    out += [
        f"deployment {name}: {ready}/{wanted} ready"
        for name, (ready, wanted) in sorted(deployments.items())
        if ready < wanted
    ]
    return out


@dataclass(frozen=True)
class Recovery:
    kind: str
    target: str
    seconds: float | None  # None: never recovered within the harness's limit


def check_recoveries(recoveries: Iterable[Recovery], bound_s: float) -> list[str]:
    out = []
    for r in recoveries:
        what = f"{r.kind} {r.target}".strip()
        if r.seconds is None:
            out.append(f"{what}: not ready again")
        elif r.seconds > bound_s:
            out.append(f"{what}: ready again after {r.seconds:.1f}s > {bound_s:g}s")
    return out


def recovery_summary(recoveries: Iterable[Recovery]) -> dict[str, dict[str, float]]:
    """Per kind: count, median and max seconds to recover (recovered ones)."""
    by_kind: dict[str, list[float]] = {}
    for r in recoveries:
        if r.seconds is not None:
            by_kind.setdefault(r.kind, []).append(r.seconds)
    out = {}
    for kind, secs in sorted(by_kind.items()):
        secs.sort()
        mid = len(secs) // 2
        median = secs[mid] if len(secs) % 2 else (secs[mid - 1] + secs[mid]) / 2
        out[kind] = {"count": float(len(secs)), "median": median, "max": secs[-1]}
    return out
