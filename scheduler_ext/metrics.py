"""Prometheus metrics of the extender, all named ``carico_extender_*``.

Design: docs/architecture.md#observability.

Counters and histograms are updated on the request path once per request (never once per node);
per-node values and the reservation ledger are read at scrape time by a collector, so a node that
disappears also disappears from ``/metrics`` and the hot path pays nothing for them.
Neighbours: ``service`` (updates), ``http_server`` (serves ``/metrics`` via carico.http_ops).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from scheduler_ext.capacity import CapacityTable
from scheduler_ext.ledger import Ledger

VERBS = ("filter", "prioritize", "bind", "preempt")
# Extender calls are sub-millisecond to tens of milliseconds; kube-scheduler gives up at 5 s.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
REPACK_TRIGGERS = ("unschedulable", "http")
REPACK_STATUSES = ("OPTIMAL", "FEASIBLE", "NO_IMPROVEMENT", "INFEASIBLE", "ERROR")
REPACK_EXECUTION_OUTCOMES = ("completed", "aborted")
# Repack solves run under a time budget of about a second to a minute.
REPACK_SOLVE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class _StateCollector(Collector):
    def __init__(self, table: CapacityTable, ledger: Ledger, clock: Callable[[], float]) -> None:
        self.table, self.ledger, self.clock = table, ledger, clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now = self.clock()
        reports = self.table.reports()
        reserved = self.table.reserved_counts()
        per_node = {
            "avail": ("avail reported by the node's agent, in pods", lambda r: r.avail),
            "k": ("capacity signal k: typical workloads that still fit", lambda r: r.k),
            "capacity": ("estimated signal of the empty node (c-hat)", lambda r: r.capacity),
            "per_pod_cost": ("estimated signal one pod costs (p-hat)", lambda r: r.per_pod_cost),
            "pods": ("workload pods the agent counts on the node", lambda r: r.pods),
            "data_age_seconds": (
                "seconds since the node's last accepted report",
                lambda r: max(0.0, now - r.received_at),
            ),
        }
        for name, (doc, value) in per_node.items():
            family = GaugeMetricFamily(f"carico_extender_node_{name}", doc, labels=["node"])
            for r in reports:
                family.add_metric([r.node], float(value(r)))
            yield family
        res = GaugeMetricFamily(
            "carico_extender_node_reserved", "pod-units reserved on the node", labels=["node"]
        )
        for node in sorted(set(reserved) | {r.node for r in reports}):
            res.add_metric([node], float(reserved.get(node, 0)))
        yield res
        yield GaugeMetricFamily(
            "carico_extender_reservations_open",
            "reservations held (bound pods not yet counted by their node's reports)",
            value=float(self.ledger.open_count()),
        )
        ended = CounterMetricFamily(
            "carico_extender_reservations",
            "reservations by how they came and went: created, counted, released, uncounted,"
            " expired, undone",
            labels=["event"],
        )
        ended.add_metric(["created"], float(self.ledger.created))
        for how, count in self.ledger.ended.items():
            ended.add_metric([how.value], float(count))
        yield ended


class ExtenderMetrics:
    def __init__(
        self,
        table: CapacityTable,
        ledger: Ledger,
        clock: Callable[[], float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "carico_extender_requests",
            "extender requests by verb and outcome (ok, exempt, bad_request, too_large, error, "
            "warming_up)",
            ["verb", "outcome"],
            registry=r,
        )
        self.node_decisions = Counter(
            "carico_extender_decisions",
            "per-node decisions by verb and outcome (filter: pass/fail/unresolvable; "
            "prioritize: scored; preempt: kept/dropped; bind: reserved/refused/bound/failed)",
            ["verb", "outcome"],
            registry=r,
        )
        self.stale = Counter(
            "carico_extender_stale_data_decisions",
            "node decisions made by the stale-data policy, by verb, reason (stale, missing) "
            "and policy",
            ["verb", "reason", "policy"],
            registry=r,
        )
        self.latency = Histogram(
            "carico_extender_request_duration_seconds",
            "time to answer an extender request, by verb",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.reports = Counter(
            "carico_extender_reports",
            "capacity reports by outcome (accepted, duplicate, out_of_order, invalid)",
            ["outcome"],
            registry=r,
        )
        self.streams = Gauge(
            "carico_extender_capacity_streams", "open agent report streams", registry=r
        )
        self.woken = Counter(
            "carico_extender_pods_woken",
            "pods the filter turned away, annotated once there was room so that kube-scheduler "
            "tries them again, by outcome (annotated, failed)",
            ["outcome"],
            registry=r,
        )
        self.waiting = Gauge(
            "carico_extender_pods_turned_away",
            "pods whose last filter turned every candidate away, not yet passed, bound or gone",
            registry=r,
        )
        # Pods in flight (docs/architecture.md#pods-in-flight)
        self.in_flight = Gauge(
            "carico_extender_pods_in_flight",
            "pods that passed a filter holding nodes with little room, not yet bound",
            registry=r,
        )
        self.in_flight_holds = Counter(
            "carico_extender_in_flight_holds",
            "filters whose pod held nodes with little room until its bind",
            registry=r,
        )
        self.in_flight_waits = Counter(
            "carico_extender_in_flight_waits",
            "filters that waited for pods in flight, by how the wait ended (bound: the holders "
            "were bound or gone; expired: a hold ended by its TTL; refused: nodes still held "
            "failed)",
            ["outcome"],
            registry=r,
        )
        # Repacking (docs/architecture.md#repack-execution); declared here so every name the shipped
        # dashboards query exists from the first scrape, before any repack has run.
        self.repack_runs = Counter(
            "carico_repack_runs",
            "repack runs by trigger (unschedulable, http) and plan status (OPTIMAL, FEASIBLE, "
            "NO_IMPROVEMENT, INFEASIBLE, ERROR)",
            ["trigger", "status"],
            registry=r,
        )
        self.repack_solve = Histogram(
            "carico_repack_solve_seconds",
            "wall time of one repack solve",
            buckets=REPACK_SOLVE_BUCKETS,
            registry=r,
        )
        self.repack_plan_actions = Gauge(
            "carico_repack_plan_actions",
            "actions in the last computed plan, by kind (move, placement, eviction)",
            ["kind"],
            registry=r,
        )
        self.repack_goal_measure = Gauge(
            "carico_repack_goal_measure",
            "the balancing goal's measure at its last run, by goal: balance the imbalance, "
            "defragment the largest free block (share of the largest node), consolidate the "
            "nodes that could go (docs/architecture.md#balancing)",
            ["goal"],
            registry=r,
        )
        self.repack_executions = Counter(
            "carico_repack_executions",
            "plans executed in apply mode, by outcome (completed, aborted)",
            ["outcome"],
            registry=r,
        )
        self.repack_slots_open = Gauge(
            "carico_repack_plan_slots_open",
            "plan slots held for replacement and formerly pending pods",
            registry=r,
        )
        self.repack_unschedulable = Gauge(
            "carico_repack_unschedulable_pods",
            "pods of the managed schedulers pending as Unschedulable, as the repack trigger "
            "sees them",
            registry=r,
        )
        for kind in ("move", "placement", "eviction"):
            self.repack_plan_actions.labels(kind).set(0)
        # Every known label value from the start, so rate() and increase() have a zero to count
        # from and the dashboard's queries find the series before the first repack.
        for trigger in REPACK_TRIGGERS:
            for status in REPACK_STATUSES:
                self.repack_runs.labels(trigger, status)
        for outcome in REPACK_EXECUTION_OUTCOMES:
            self.repack_executions.labels(outcome)
        r.register(_StateCollector(table, ledger, clock))
        # Children bound once: labels() costs a lock and a dict lookup per call.
        self.latency_of = {v: self.latency.labels(v) for v in VERBS}
