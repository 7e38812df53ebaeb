"""Prometheus metrics of the agent (``carico_agent_*``), read at scrape time from a status record.

A custom collector instead of gauges updated in the sampling loop: the loop stays free of metric
bookkeeping (it runs at 10 Hz) and the values are always those of the latest report. The collector
reads an :class:`AgentStatus` the service makes on demand, so this module knows nothing of the
service (``agent.service`` imports it, never the other way round).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.pipeline import CapacityReport
from carico.footprint import ClassFootprint


@dataclass(frozen=True)
class ClientStatus:
    """A network client's counters: exchanges (or reports) that went through, failures, link."""

    ok: int
    errors: int
    connected: bool


@dataclass(frozen=True)
class AgentStatus:
    """What the metrics show of a running agent at one moment."""

    node: str
    feature_names: tuple[str, ...]
    last_report: CapacityReport | None
    samples: int
    samples_missing: int
    reports: int
    ticks_skipped: int
    global_refused: int
    exchange: ClientStatus | None = None  # None: no aggregator configured
    reporter: ClientStatus | None = None  # None: no extender configured
    churn_hints: int | None = None  # None: no churn hint configured
    pod_watch_errors: int | None = None  # None: no pod watch
    learned_classes: tuple[ClassFootprint, ...] = ()  # the footprints this node measured
    pod_usage: tuple[int, int] | None = None  # pods read last time, readings skipped; None: off


def _gauge(name: str, doc: str, value: float, node: str) -> GaugeMetricFamily:
    g = GaugeMetricFamily(f"carico_agent_{name}", doc, labels=["node"])
    g.add_metric([node], value if math.isfinite(value) else math.nan)
    return g


class AgentCollector(Collector):
    def __init__(self, status: Callable[[], AgentStatus]) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        st = self.status()
        node = st.node
        report = st.last_report
        if report is not None:
            features = GaugeMetricFamily(
                "carico_agent_feature",
                "Smoothed telemetry y in [0,1] (0 = empty, 1 = full)",
                labels=["node", "feature"],
            )
            for name, value in zip(st.feature_names, report.features, strict=True):
                features.add_metric([node, name], value)
            yield features
            yield _gauge("k", "Capacity signal k: typical workloads that still fit", report.k, node)
            yield _gauge("avail", "Available capacity in pods", report.avail, node)
            yield _gauge("capacity", "Estimated signal of the empty node", report.capacity, node)
            yield _gauge(
                "per_pod_cost", "Estimated signal one pod costs", report.per_pod_cost, node
            )
            yield _gauge("pods", "Workload pods running on the node", report.pods, node)
            mode = GaugeMetricFamily(
                "carico_agent_mode", "1 for the current avail mode", labels=["node", "mode"]
            )
            for name in ("live", "estimate"):
                mode.add_metric([node, name], 1.0 if report.mode == name else 0.0)
            yield mode
            yield _gauge("churn_hold", "1 while estimation halts for pod churn", report.churn, node)
            yield _gauge(
                "psi_available",
                "1 when pressure stall information is read",
                report.psi_available,
                node,
            )
            yield _gauge(
                "model_age_seconds", "Age of the global model used", report.model_age_s, node
            )
            if report.classes is not None:
                headroom = GaugeMetricFamily(
                    "carico_agent_headroom",
                    "Room left below the full level, per feature (per-class decisions)",
                    labels=["node", "feature"],
                )
                for name, value in zip(st.feature_names, report.classes.headroom, strict=True):
                    headroom.add_metric([node, name], value)
                yield headroom
        if st.learned_classes:
            cpu = GaugeMetricFamily(
                "carico_agent_class_cpu_cores",
                "CPU demand of one pod of the class, measured on this node (cores)",
                labels=["node", "class"],
            )
            memory = GaugeMetricFamily(
                "carico_agent_class_memory_bytes",
                "Memory of one pod of the class, measured on this node (bytes)",
                labels=["node", "class"],
            )
            for learned in st.learned_classes:
                cpu.add_metric([node, learned.name], learned.footprint.cpu)
                memory.add_metric([node, learned.name], learned.footprint.memory)
            yield cpu
            yield memory
        if st.pod_usage is not None:
            yield _gauge(
                "pod_usage_pods",
                "Pods whose cgroup usage was read last time",
                st.pod_usage[0],
                node,
            )
            c = CounterMetricFamily(
                "carico_agent_pod_usage_skipped",
                "Pod cgroup readings skipped: a file missing, unreadable or malformed",
                labels=["node"],
            )
            c.add_metric([node], st.pod_usage[1])
            yield c
        counters = (
            ("samples", "Telemetry samples taken", st.samples),
            ("samples_missing", "Samples missing or malformed", st.samples_missing),
            ("reports", "Capacity reports produced", st.reports),
            (
                "ticks_skipped",
                "Sampling ticks skipped because the loop fell behind",
                st.ticks_skipped,
            ),
            ("global_model_refused", "Global models refused as invalid", st.global_refused),
        )
        for name, doc, value in counters:
            c = CounterMetricFamily(f"carico_agent_{name}", doc, labels=["node"])
            c.add_metric([node], value)
            yield c
        for prefix, total, client, what in (
            ("exchange", "exchanges", st.exchange, "Model exchanges with the aggregator"),
            ("report", "reports_sent", st.reporter, "Capacity reports sent to the extender"),
        ):
            if client is None:
                continue
            c = CounterMetricFamily(f"carico_agent_{total}", what, labels=["node"])
            c.add_metric([node], client.ok)
            yield c
            c = CounterMetricFamily(
                f"carico_agent_{prefix}_errors", f"{what}: failures", labels=["node"]
            )
            c.add_metric([node], client.errors)
            yield c
            yield _gauge(
                f"{prefix}_connected", f"{what}: 1 while connected", float(client.connected), node
            )
        if st.churn_hints is not None:
            c = CounterMetricFamily(
                "carico_agent_churn_hints", "Pod cgroups created or removed", labels=["node"]
            )
            c.add_metric([node], st.churn_hints)
            yield c
        if st.pod_watch_errors is not None:
            c = CounterMetricFamily(
                "carico_agent_pod_watch_errors", "Pod watch failures", labels=["node"]
            )
            c.add_metric([node], st.pod_watch_errors)
            yield c
