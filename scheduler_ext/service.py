"""The extender service: decodes extender v1 requests, decides, reserves, binds and records why.

One object holds the capacity table, the ledger, the decider, the explain log, the metrics and the
cluster interface (Kubernetes or in-memory) — the same object whatever the transport, so the demo
and the simulator run exactly the production decisions. Each verb takes the raw request body and
returns the encoded reply; a ``BadRequest`` means the body was unusable and nothing reached the
state. Neighbours: ``http_server`` (HTTP), ``grpc_server`` (capacity reports), ``cli``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import msgspec
import numpy as np

from carico.names import label_problem, subdomain_problem, subdomains_problem, uid_problem
from carico.pods import DEFAULT_EXCLUDED_NAMESPACES, DEFAULT_MANAGED_SCHEDULERS
from protos.carico.v1 import capacity_pb2
from scheduler_ext import wire
from scheduler_ext.capacity import (
    DEFAULT_MAX_NODES,
    DEFAULT_THRESHOLD,
    CapacityTable,
    Ingest,
    NodeReport,
    Thresholds,
    fmt,
)
from scheduler_ext.class_fit import Fit
from scheduler_ext.cluster import BindError, Cluster, OnEvent, OnList
from scheduler_ext.decisions import Candidates, Decider, FilterDecision, PrioritizeDecision
from scheduler_ext.explain import ExplainLog
from scheduler_ext.history import NodeHistory
from scheduler_ext.in_flight import InFlight
from scheduler_ext.ledger import PENDING, Ledger, PodState, ReserveResult, StaleData
from scheduler_ext.metrics import ExtenderMetrics
from scheduler_ext.pods import ExemptionPolicy, PodFacts, facts_from_wire, facts_problem
from scheduler_ext.shape import ScoreShape
from scheduler_ext.slots import Slot, SlotKind, SlotTable
from scheduler_ext.waiting import WAKE_ANNOTATION, WaitingPods
from scheduler_ext.wire import Body

log = logging.getLogger(__name__)

# A pod watch: list, then watch bound Pending pods into these callbacks until cancelled.
PodWatch = Callable[[OnList, OnEvent], Coroutine[Any, Any, None]]

RECENT_PODS = 10_000  # pods remembered from filter calls, so bind knows whether one is exempt
# The facts of the pods last seen in filter and prioritize requests, by the Pod's JSON: the facts
# are a function of those bytes, and kube-scheduler sends the same Pod to both verbs (and again
# when it retries), so the second call skips deriving its class and requests. At most this many
# pods and this many bytes of their JSON; a larger Pod is not kept.
POD_FACTS_KEPT = 256
POD_FACTS_BYTES = 16 << 20


class BadRequest(Exception):
    """The request body cannot be used; the message says what is wrong."""


@dataclass(frozen=True)
class Settings:
    threshold: float = DEFAULT_THRESHOLD
    stale_after: float = 10.0
    stale_policy: StaleData = StaleData.FAIL_OPEN
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES
    # Empty: every scheduler profile's pods are managed.
    managed_schedulers: frozenset[str] = DEFAULT_MANAGED_SCHEDULERS
    reservation_ttl: float = 300.0
    forget_after: float = 3600.0  # nodes silent this long are dropped (deleted nodes)
    explain_pods: int = 1024
    explain_bytes: int = 64 << 20
    max_nodes: int = DEFAULT_MAX_NODES
    # Prioritize by this shape of measured utilisation (None: spread on room, the default).
    score_shape: ScoreShape | None = None


def _decode(decoder: Callable[[Body], object], body: Body, what: str = "") -> object:
    """``decoder(body)``, every way it can fail on a client's bytes turned into a BadRequest.

    msgspec decodes ignored fields too, recursively, so any nesting deeper than Python's
    recursion limit allows raises RecursionError, and a string that is not UTF-8 raises
    UnicodeDecodeError; both are the client's fault (docs/architecture.md#extender-protocol).
    """
    try:
        return decoder(body)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"request does not match the extender v1 types: {what}{exc}") from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"malformed JSON: {what}{exc}") from exc
    except RecursionError:
        raise BadRequest(f"malformed JSON: {what}nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise BadRequest(
            f"malformed JSON: {what}a string is not valid UTF-8 ({exc.reason})"
        ) from None


def _check_pod(facts: PodFacts) -> None:
    problem = facts_problem(facts)
    if problem is not None:
        raise BadRequest(problem)


# What one node of a per-class filter's explanation is reckoned to hold until it is asked for:
# its Fit (shared with the table's remembered fits) and its name in the decision's snapshot; its
# JSON is about 100 bytes.
CLASS_SUMMARY_NODE_BYTES = 150


def _class_summary(facts: PodFacts, fits: Mapping[str, Fit]) -> bytes:
    """What /api/v1/explain shows of a per-class filter: the class and its cost on each node."""
    nodes = {
        name: {
            "fits": fit.count,
            "room": round(fit.room, 3),
            "cpu_cores": round(fit.cost.footprint.cpu, 4),
            "memory_bytes": round(fit.cost.footprint.memory),
            "source": fit.cost.source,
        }
        for name, fit in fits.items()
    }
    return msgspec.json.encode(
        {
            "class": facts.workload_class,
            "requests": {"cpu_cores": facts.requests.cpu, "memory_bytes": facts.requests.memory},
            "nodes": nodes,
        }
    )


def _shape_summary(shape: ScoreShape, d: PrioritizeDecision) -> bytes:
    """What /api/v1/explain shows of a shaped prioritize: per node its utilisation per feature
    (%) once the pod runs and its shape score."""
    scores = {h.Host: h.Score for h in d.scores}
    nodes = {
        name: {"utilisation": used, "score": scores[name]}
        for name, used in (d.utilisation or {}).items()
    }
    return msgspec.json.encode(
        {"shape": shape.text, "weights": dict(shape.weights), "nodes": nodes}
    )


def _fit_fields(fit: Fit | None, report: NodeReport | None) -> dict[str, Any]:
    """What a per-class bind check charged the pod: its class's footprint and where it came
    from, and per feature one pod's share of the node and the node's free room (empty when the
    node was decided in pod-units)."""
    if fit is None:
        return {}
    names = report.classes.feature_names if report is not None and report.classes else ()
    cost = fit.cost
    return {
        "cost": {
            "cpu_cores": cost.footprint.cpu,
            "memory_bytes": cost.footprint.memory,
            "source": cost.source,
        },
        "need": dict(zip(names, fit.need, strict=False)),
        "free": dict(zip(names, fit.free, strict=False)),
    }


def _facts(pod: wire.Pod) -> PodFacts:
    try:
        return facts_from_wire(pod)
    except ValueError as exc:
        raise BadRequest(f"Pod: {exc}") from exc


@dataclass
class Readiness:
    ledger_rebuilt: bool = False
    capacity_listening: bool = False
    watch_lists: int = field(default=0)

    def reason(self) -> str | None:
        missing = [
            what
            for what, ok in (
                ("reservation ledger not rebuilt from the API yet", self.ledger_rebuilt),
                ("capacity stream not listening yet", self.capacity_listening),
            )
            if not ok
        ]
        return "; ".join(missing) or None


class ExtenderService:
    def __init__(
        self,
        cluster: Cluster,
        settings: Settings = Settings(),
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        self.clock = clock
        self.wall = wall
        self.started = clock()
        self.table = CapacityTable(
            Thresholds(settings.threshold, settings.stale_after), settings.max_nodes
        )
        exemptions = ExemptionPolicy(settings.excluded_namespaces, settings.managed_schedulers)
        self.ledger = Ledger(
            self.table,
            ttl=settings.reservation_ttl,
            exemptions=exemptions,
            stale_policy=settings.stale_policy,
        )
        self.decider = Decider(
            self.table, exemptions, settings.stale_policy, shape=settings.score_shape
        )
        self.explain = ExplainLog(settings.explain_pods, settings.explain_bytes)
        self.metrics = ExtenderMetrics(self.table, self.ledger, clock)
        self.history = NodeHistory()
        self.readiness = Readiness()
        # Repack plan slots (apply mode): pods a plan moves or places are steered by them.
        self.slots = SlotTable(self.table)
        # Pods the filter turned away, woken once there is room
        # (docs/architecture.md#waking-turned-away-pods).
        self.waiting = WaitingPods()
        self.metrics.waiting.set_function(lambda: float(len(self.waiting)))
        # Pods that passed a filter and are not bound yet (docs/architecture.md#pods-in-flight).
        self.in_flight = InFlight()
        self._holds_event: asyncio.Event | None = None
        self.metrics.in_flight.set_function(lambda: float(len(self.in_flight)))
        self._wakes: set[asyncio.Task[None]] = set()
        self.metrics.repack_slots_open.set_function(lambda: float(self.slots.open_count()))
        self._recent: OrderedDict[str, PodFacts] = OrderedDict()
        self._pod_facts: OrderedDict[bytes, PodFacts] = OrderedDict()
        self._pod_facts_bytes = 0
        self._policy = settings.stale_policy.value
        m = self.metrics
        self._count = {
            (verb, outcome): m.requests.labels(verb, outcome)
            for verb in ("filter", "prioritize", "bind", "preempt")
            for outcome in ("ok", "exempt", "bad_request", "too_large", "error", "warming_up")
        }
        self._report_count = {outcome: m.reports.labels(outcome.value) for outcome in Ingest}
        self._node_count = {
            (verb, outcome): m.node_decisions.labels(verb, outcome)
            for verb, outcome in (
                ("filter", "pass"),
                ("filter", "fail"),
                ("filter", "unresolvable"),
                ("prioritize", "scored"),
                ("preempt", "kept"),
                ("preempt", "dropped"),
                ("bind", "reserved"),
                ("bind", "refused"),
                ("bind", "bound"),
                ("bind", "failed"),
            )
        }

    # -- helpers ---------------------------------------------------------------------------

    def count_request(self, verb: str, outcome: str) -> None:
        self._count[verb, outcome].inc()

    def _stale(self, verb: str, stale: int, missing: int) -> None:
        if stale:
            self.metrics.stale.labels(verb, "stale", self._policy).inc(stale)
        if missing:
            self.metrics.stale.labels(verb, "missing", self._policy).inc(missing)

    def _remember(self, facts: PodFacts) -> None:
        recent = self._recent
        recent[facts.key] = facts
        recent.move_to_end(facts.key)
        if len(recent) > RECENT_PODS:
            recent.popitem(last=False)

    @staticmethod
    def _names(raw: bytes) -> list[str]:
        names = _decode(wire.decode_names, raw, "NodeNames: ")
        assert isinstance(names, list)
        return names

    def _check_nodes(self, names: Iterable[str]) -> None:
        # Names with a report passed the same rule at ingest: a lookup instead of the pattern.
        problem = subdomains_problem(names, "node name", self.table.free)
        if problem is not None:
            raise BadRequest(problem)

    def _facts_of(self, raw: bytes) -> PodFacts:
        """The checked facts of the Pod whose JSON is ``raw`` (remembered, or derived)."""
        cache = self._pod_facts
        found = cache.get(raw)
        if found is not None:
            cache.move_to_end(raw)
            return found
        pod = _decode(wire.decode_pod, raw, "Pod: ")
        if pod is None:
            raise BadRequest("missing Pod: the body must be an ExtenderArgs object with a Pod")
        assert isinstance(pod, wire.Pod)
        facts = _facts(pod)
        if not facts.name:
            raise BadRequest("Pod has no metadata.name")
        _check_pod(facts)
        if len(raw) <= POD_FACTS_BYTES // 4:
            cache[raw] = facts
            self._pod_facts_bytes += len(raw)
            while len(cache) > POD_FACTS_KEPT or self._pod_facts_bytes > POD_FACTS_BYTES:
                self._pod_facts_bytes -= len(cache.popitem(last=False)[0])
        return facts

    def _args(self, body: Body) -> tuple[PodFacts, Candidates, bool]:
        args = _decode(wire.decode_args_raw_names, body)
        assert isinstance(args, wire.ExtenderArgsRawNames)
        facts = self._facts_of(bytes(args.Pod))
        raw = bytes(args.NodeNames)
        if raw != b"null":
            return facts, self.decider.candidates(raw, self._names, self._check_nodes), True
        if args.Nodes is not None:
            names = [item.metadata.name if item.metadata else "" for item in args.Nodes.items or ()]
            self._check_nodes(names)
            return facts, Candidates(names), False
        raise BadRequest("neither Nodes nor NodeNames is set")

    # -- verbs -----------------------------------------------------------------------------

    def filter(self, body: Body) -> bytes | Coroutine[Any, Any, bytes]:
        """The filter's reply; a coroutine making it when the pod must first wait for pods in
        flight (docs/architecture.md#pods-in-flight)."""
        facts, cands, cache_capable = self._args(body)
        self._remember(facts)
        now = self.clock()
        in_flight = self.in_flight
        in_flight.expire(now)
        if in_flight.release(facts.key):  # tried again: its last attempt was not bound
            self._holds_changed()
        d, holds = self._filter_decision(facts, cands, body, now)
        if holds:
            room = self._little_room(d)
            conflicts = self._in_flight_conflicts(facts, room)
            if conflicts:
                return self._filter_after_in_flight(facts, cands, body, cache_capable, conflicts)
            self._hold(facts, room, now)
        return self._filter_reply(facts, cands, body, cache_capable, d, now)

    def _filter_decision(
        self, facts: PodFacts, cands: Candidates, body: Body, now: float
    ) -> tuple[FilterDecision, bool]:
        """The decision, and whether it is one that holds room for pods in flight (not an
        exempt pod's, nor one steered by a repack plan's slots)."""
        d = self._slot_filter(facts, body, cands.names) if self.slots else None
        if d is not None:
            return d, False
        d = self.decider.filter(facts, cands, now)
        return d, d.exempt is None and bool(d.passed)

    def _in_flight_conflicts(
        self, facts: PodFacts, room: list[tuple[str, float]]
    ) -> dict[str, frozenset[str]]:
        """Of the nodes with little ``room`` the pod passed, those held by other pods in flight
        that it passes only without counting them."""
        return self.in_flight.conflicts(facts.key, room, self.table.thresholds.threshold)

    def _hold(self, facts: PodFacts, room: list[tuple[str, float]], now: float) -> None:
        threshold = self.table.thresholds.threshold
        if self.in_flight.hold(facts.key, room, threshold, now):
            self.metrics.in_flight_holds.inc()

    def _little_room(self, d: FilterDecision) -> list[tuple[str, float]]:
        """The passed nodes with room for fewer than the hold margin's pods beyond the
        threshold, with their counts. Only these can be held, or conflict (a node is held by at
        most about the margin's pods). Computed once per decision: the filter's hot path."""
        return self.decider.little_room(d, self.table.thresholds.threshold + self.in_flight.margin)

    def _holds_changed(self) -> None:
        """Wake the filters waiting for pods in flight."""
        event = self._holds_event
        if event is not None:
            event.set()
            self._holds_event = None

    async def _filter_after_in_flight(
        self,
        facts: PodFacts,
        cands: Candidates,
        body: Body,
        cache_capable: bool,
        conflicts: dict[str, frozenset[str]],
    ) -> bytes:
        """Wait until the pods holding the nodes this pod passed only without them are bound,
        seen gone or past their hold's TTL, then decide again. A node still held after the
        longest wait (new holders kept coming) fails, with the pods that hold it."""
        waited = "bound"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.in_flight.ttl  # by the loop's clock, which the wait runs on
        while True:
            until = self.in_flight.next_expiry(set().union(*conflicts.values()))
            if until is not None:
                timeout = min(until - self.clock(), deadline - loop.time())
                if self._holds_event is None:
                    self._holds_event = asyncio.Event()
                try:
                    await asyncio.wait_for(self._holds_event.wait(), max(timeout, 0.0))
                except TimeoutError:
                    waited = "expired"
            now = self.clock()
            self.in_flight.expire(now)
            d, holds = self._filter_decision(facts, cands, body, now)
            room = self._little_room(d) if holds else []
            conflicts = self._in_flight_conflicts(facts, room) if holds else {}
            if not conflicts or until is None or waited == "expired":
                break
        self.metrics.in_flight_waits.labels(waited if not conflicts else "refused").inc()
        if conflicts:
            d.fail(
                {
                    node: f"carico: room held for pods being bound: {', '.join(sorted(pods))}"
                    for node, pods in conflicts.items()
                }
            )
        if holds:  # not the nodes it failed just now: they are held by others
            self._hold(facts, [(n, c) for n, c in room if n not in conflicts], now)
        return self._filter_reply(facts, cands, body, cache_capable, d, now)

    def _filter_reply(
        self,
        facts: PodFacts,
        cands: Candidates,
        body: Body,
        cache_capable: bool,
        d: FilterDecision,
        now: float,
    ) -> bytes:
        names = cands.names
        if self._warming_up(d, len(names), now):
            # Fail-closed with no report at all yet, just after a (re)start: the gap is transient.
            # An error makes kube-scheduler retry the pod with backoff (seconds); marking every
            # node unresolvable would park it as unschedulable for up to five minutes.
            error = (
                "carico: no capacity report received yet since the extender started "
                f"{now - self.started:.0f}s ago (fail-closed); retry"
            )
            reply = wire.encode(wire.FilterResultNames([], {}, {}, Error=error))
            self.explain.record(facts.key, "filter", self.wall(), reply, d.exempt)
            self.count_request("filter", "warming_up")
            self._stale("filter", d.stale, d.missing)
            return reply
        if cache_capable:
            reply = wire.encode(wire.FilterResultNames(d.passed, d.failed, d.unresolvable))
            summary = reply
            if d.passed and len(d.passed) < len(names):  # all passed: the request's list
                self.decider.expect(wire.encode(d.passed), d)
        else:
            raw_list: wire.RawNodeList | msgspec.Raw
            if len(d.passed) == len(names):
                whole = _decode(wire.decode_nodes_whole, body)
                assert isinstance(whole, wire.NodesWhole)
                raw_list = whole.Nodes
            else:
                raws = _decode(wire.decode_nodes_raw, body)
                assert isinstance(raws, wire.NodesRawOnly) and raws.Nodes is not None
                keep = set(d.passed)
                raw_list = wire.RawNodeList(
                    [
                        raw
                        for name, raw in zip(names, raws.Nodes.items or (), strict=True)
                        if name in keep
                    ]
                )
            reply = wire.encode(wire.FilterResultNodes(raw_list, d.failed, d.unresolvable))
            summary = wire.encode(wire.FilterResultNames(d.passed, d.failed, d.unresolvable))
        self.explain.record(facts.key, "filter", self.wall(), summary, d.exempt)
        if d.exempt is None:
            if d.passed:
                self.waiting.passed(facts.key)
            elif d.failed or d.unresolvable:  # fail-closed stale data waits for reports too
                self.waiting.refused(facts, names, now)
        if d.fits is not None:
            # Encoding the class's cost on some hundred nodes took as long as the filter itself:
            # done only if someone asks.
            fits = d.fits
            self.explain.record_deferred(
                facts.key,
                "class",
                self.wall(),
                lambda: _class_summary(facts, fits()),
                CLASS_SUMMARY_NODE_BYTES * len(cands.names),
            )
        self.count_request("filter", "exempt" if d.exempt else "ok")
        if d.exempt is None:
            nc = self._node_count
            nc["filter", "pass"].inc(len(d.passed))
            if d.failed:
                nc["filter", "fail"].inc(len(d.failed))
            if d.unresolvable:
                nc["filter", "unresolvable"].inc(len(d.unresolvable))
            if d.stale or d.missing:
                self._stale("filter", d.stale, d.missing)
        return reply

    def _slot_filter(self, facts: PodFacts, body: Body, names: list[str]) -> FilterDecision | None:
        """A pod held by repack plan slots passes only their nodes (None: the pod has none)."""
        maybe = self.slots.candidates(facts)
        if not maybe:
            return None
        sig = None
        if any(s.kind is not SlotKind.PENDING for s in maybe):
            from scheduler_ext.repack.recheck import request_signature  # only when a slot may match

            sig = request_signature(body)
        slots = self.slots.matching(facts, sig)
        if not slots:
            return None
        nodes = {s.node for s in slots}
        reason = self.slots.filter_reason(slots)
        return FilterDecision(
            [n for n in names if n in nodes], {n: reason for n in names if n not in nodes}, {}
        )

    def _warming_up(self, d: FilterDecision, candidates: int, now: float) -> bool:
        """Fail-closed, every candidate unreported, and younger than one staleness window."""
        return (
            d.exempt is None
            and self.settings.stale_policy is StaleData.FAIL_CLOSED
            and candidates > 0
            and d.missing == candidates
            and now - self.started < self.table.thresholds.stale_after
        )

    def prioritize(self, body: Body) -> bytes:
        facts, cands, _ = self._args(body)
        names = cands.names
        self._remember(facts)
        d = self.decider.prioritize(facts, cands, self.clock())
        reply = wire.encode(d.scores)
        self.explain.record(facts.key, "prioritize", self.wall(), reply, d.exempt)
        shape = self.settings.score_shape
        if shape is not None:
            self.explain.record(facts.key, "shape", self.wall(), _shape_summary(shape, d), None)
        self.count_request("prioritize", "exempt" if d.exempt else "ok")
        if d.exempt is None:
            self._node_count["prioritize", "scored"].inc(len(names))
            if d.stale or d.missing:
                self._stale("prioritize", d.stale, d.missing)
        return reply

    def preempt(self, body: Body) -> bytes:
        args = _decode(wire.decode_preemption, body)
        assert isinstance(args, wire.ExtenderPreemptionArgs)
        if args.Pod is None:
            raise BadRequest("missing Pod: the body must be an ExtenderPreemptionArgs with a Pod")
        facts = _facts(args.Pod)
        _check_pod(facts)
        self._check_nodes(args.NodeNameToMetaVictims or args.NodeNameToVictims or ())
        victims: dict[str, wire.MetaVictims] = {}
        if args.NodeNameToMetaVictims is not None:
            victims = {
                node: v if v is not None else wire.MetaVictims([])
                for node, v in args.NodeNameToMetaVictims.items()
            }
        elif args.NodeNameToVictims is not None:
            for node, full in args.NodeNameToVictims.items():
                full = full or wire.Victims()
                victims[node] = wire.MetaVictims(
                    [
                        wire.MetaPod(p.metadata.uid if p is not None and p.metadata else "")
                        for p in full.Pods or ()
                    ],
                    full.NumPDBViolations,
                )
        d = self.decider.preempt(facts, victims, self.clock())
        self.count_request("preempt", "exempt" if d.exempt else "ok")
        if d.exempt is None:
            self._node_count["preempt", "kept"].inc(len(d.kept))
            self._node_count["preempt", "dropped"].inc(len(d.dropped))
            self._stale("preempt", d.stale, d.missing)
        return wire.encode(wire.PreemptionResult(d.kept))

    async def bind(self, body: Body) -> bytes:
        args = _decode(wire.decode_binding, body)
        assert isinstance(args, wire.ExtenderBindingArgs)
        missing = [k for k in ("PodName", "PodNamespace", "Node") if not getattr(args, k)]
        if missing:
            raise BadRequest(f"binding args lack {', '.join(missing)}")
        problem = (
            subdomain_problem(args.PodName, "PodName")
            or label_problem(args.PodNamespace, "PodNamespace")
            or uid_problem(args.PodUID, "PodUID")
            or subdomain_problem(args.Node, "Node")
        )
        if problem is not None:
            raise BadRequest(problem)
        key = f"{args.PodNamespace}/{args.PodName}"
        known = self._recent.get(key)
        facts = (
            known
            if known is not None and (not args.PodUID or known.uid == args.PodUID)
            else PodFacts(args.PodNamespace, args.PodName, args.PodUID)
        )
        exempt = self.ledger.exemptions.reason(facts)
        nc = self._node_count
        release = self.in_flight.release(facts.key)
        # A pod bound into a plan slot takes over the slot's unit: no second capacity check.
        slot = self.slots.claim(facts, args.Node) if self.slots else None
        result: ReserveResult | None = None
        if exempt is None:
            result = self.ledger.reserve(facts, args.Node, self.clock(), check=slot is None)
            if result.stale:
                self._stale("bind", int(result.stale == "stale"), int(result.stale == "missing"))
        if release:  # its reservation (or exemption) stands in for its hold, or it was refused
            self._holds_changed()
        if result is not None:
            if not result.ok:
                if slot is not None:
                    self.slots.unclaim(slot)
                nc["bind", "refused"].inc()
                self.count_request("bind", "ok")
                return wire.encode(wire.BindingResult(result.error))
            nc["bind", "reserved"].inc()
        self._log_bind(facts, args.Node, exempt, slot, result)
        try:
            await self.cluster.bind(facts, args.Node)
        except Exception as exc:
            # Any failure, expected or not, must give back what this call took (and only that:
            # a refused duplicate must not free the first bind's unit) and reach the scheduler.
            if result is not None:
                self.ledger.undo(result)
            if slot is not None:
                self.slots.unclaim(slot)
            if not isinstance(exc, BindError):
                log.exception("binding %s to %s failed unexpectedly", key, args.Node)
            nc["bind", "failed"].inc()
            self.count_request("bind", "error")
            return wire.encode(wire.BindingResult(str(exc) or type(exc).__name__))
        nc["bind", "bound"].inc()
        self.waiting.passed(key)
        self.count_request("bind", "exempt" if exempt else "ok")
        return wire.encode(wire.BindingResult(""))

    def _log_bind(
        self,
        facts: PodFacts,
        node: str,
        exempt: str | None,
        slot: Slot | None,
        result: ReserveResult | None,
    ) -> None:
        """One line per accepted bind with what it was decided on, written before the binding
        is created so that a crash right after still leaves it (docs/architecture.md#observability):
        the room the check saw and the node's reservations, or why nothing was checked (exempt
        pod, plan slot, stale data)."""
        if not log.isEnabledFor(logging.INFO):
            return
        threshold = self.table.thresholds.threshold
        room = result.room if result is not None else None
        stale = result.stale if result is not None else ""
        if exempt is not None:
            basis = f"exempt ({exempt})"
        elif slot is not None:
            basis = f"plan {slot.plan} slot"
        elif stale:
            basis = f"{stale} capacity data ({self._policy})"
        elif room is None:
            basis = "already reserved there"
        else:
            basis = f"room {fmt(room)} >= threshold {fmt(threshold)}"
        log.info(
            "bind %s to %s: %s",
            facts.key,
            node,
            basis,
            extra={
                "decision": "bind",
                "pod": facts.key,
                "uid": facts.uid,
                "node": node,
                "room": room,
                "threshold": threshold,
                # reservations on the node now, this pod's included
                "reserved": self.table.reserved(node),
                "stale": stale,
                "slot": slot.plan if slot is not None else "",
                "exempt": exempt or "",
                **_fit_fields(result.fit if result is not None else None, self.table.report(node)),
            },
        )

    # -- capacity reports and pod events ---------------------------------------------------

    def ingest(self, msg: capacity_pb2.NodeCapacity, stream: Hashable) -> tuple[Ingest, str]:
        outcome, why = self.ledger.ingest(msg, stream, self.clock())
        self._report_count[outcome].inc()
        return outcome, why

    def on_pod_list(self, pods: list[PodState]) -> None:
        self.ledger.reconcile(pods, self.clock())
        self.readiness.ledger_rebuilt = True
        self.readiness.watch_lists += 1

    def on_pod_event(self, pod: PodState) -> None:
        self.ledger.observe(pod, self.clock())
        if pod.node or pod.deleted or pod.phase != PENDING:
            self.waiting.passed(pod.facts.key)
            # bound by another binder (kube-scheduler's, when this extender does not bind), or
            # gone: the ledger counts it from this event on
            if self.in_flight.release(pod.facts.key):
                self._holds_changed()

    def sweep(self) -> None:
        now = self.clock()
        expired = self.ledger.expire(now)
        for res in expired:
            log.warning("reservation of %s on %s expired", res.key, res.node)
        for slot in self.slots.expire(now):
            log.warning("plan %s: slot for %s on %s expired", slot.plan, slot.for_pod, slot.node)
        self.table.forget_older_than(now, self.settings.forget_after)
        self.record_history(now)

    def wake_waiting(self) -> None:
        """Annotate the turned-away pods that one of their candidates now has room for: the
        pod update sends each back to kube-scheduler's active queue, which no capacity report
        would (docs/architecture.md#waking-turned-away-pods)."""
        if not len(self.waiting):
            return
        now = self.clock()

        def has_room(facts: PodFacts, names: list[str]) -> bool:
            return bool(self.decider.filter(facts, names, now).passed)

        due = self.waiting.due(now, has_room)
        if not due:
            return
        stamp = f"{self.wall():.3f}"
        for facts in due:
            task = asyncio.get_running_loop().create_task(self._wake(facts, stamp))
            self._wakes.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._wakes.discard)

    async def _wake(self, facts: PodFacts, stamp: str) -> None:
        try:
            await self.cluster.annotate(facts, WAKE_ANNOTATION, stamp)
        except Exception as exc:  # gone meanwhile, or the API is down: the next refusal retries
            self.metrics.woken.labels("failed").inc()
            self.waiting.passed(facts.key)
            log.info("could not wake %s: %s", facts.key, exc)
            return
        self.metrics.woken.labels("annotated").inc()
        log.info("woke %s: a node it was turned away from has room now", facts.key)

    def record_history(self, now: float) -> None:
        """One point per node for the dashboard's chart (at each sweep), by columns."""
        reserved = self.table.reserved_counts()
        reports = self.table.reports()
        names = [r.node for r in reports]
        names += list(reserved.keys() - set(names))  # reserved, without a report
        avail = np.full(len(names), np.nan)  # NaN: no report
        avail[: len(reports)] = [r.avail for r in reports]
        received = np.full(len(names), -np.inf)
        received[: len(reports)] = [r.received_at for r in reports]
        held = np.fromiter(map(reserved.get, names, repeat(0)), np.float64, len(names))
        stale = now - received >= self.table.thresholds.stale_after
        self.history.record_columns(self.wall(), names, avail, held, stale)

    async def run_background(
        self, sweep_every: float = 1.0, pod_watch: PodWatch | None = None
    ) -> None:
        """The pod watch and the periodic sweep; runs until cancelled. ``pod_watch``: a watch
        that feeds others too (``kube.KubernetesCluster.run_pending_watch``) instead of the
        cluster's own ``run_pod_watch``."""
        run = pod_watch if pod_watch is not None else self.cluster.run_pod_watch
        watch = asyncio.create_task(run(self.on_pod_list, self.on_pod_event), name="pod-watch")
        try:
            while True:
                await asyncio.sleep(sweep_every)
                self.sweep()
                try:
                    self.wake_waiting()
                except Exception:  # a wake is an optimisation: never let it stop the sweeps
                    log.exception("waking turned-away pods failed")
                if watch.done():
                    watch.result()  # re-raise a crashed watch instead of serving blind
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
