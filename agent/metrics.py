"""Prometheus metrics of the agent (``carico_agent_*``), read from the service at scrape time.

A custom collector instead of gauges updated in the sampling loop: the loop stays free of metric
bookkeeping (it runs at 10 Hz) and the values are always those of the latest report.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from agent.service import AgentService


def _gauge(name: str, doc: str, value: float, node: str) -> GaugeMetricFamily:
    g = GaugeMetricFamily(f"carico_agent_{name}", doc, labels=["node"])
    g.add_metric([node], value if math.isfinite(value) else math.nan)
    return g


class AgentCollector(Collector):
    def __init__(self, service: AgentService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        svc = self.service
        node = svc.config.node
        report = svc.last_report
        if report is not None:
            features = GaugeMetricFamily(
                "carico_agent_feature",
                "Smoothed telemetry y in [0,1] (0 = empty, 1 = full)",
                labels=["node", "feature"],
            )
            for name, value in zip(svc.source.feature_names, report.features, strict=True):
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
        counters = (
            ("samples", "Telemetry samples taken", svc.pipeline.samples),
            ("samples_missing", "Samples missing or malformed", svc.pipeline.samples_missing),
            ("reports", "Capacity reports produced", svc.reports),
            (
                "ticks_skipped",
                "Sampling ticks skipped because the loop fell behind",
                svc.ticks_skipped,
            ),
            ("global_model_refused", "Global models refused as invalid", svc.global_refused),
        )
        for name, doc, value in counters:
            c = CounterMetricFamily(f"carico_agent_{name}", doc, labels=["node"])
            c.add_metric([node], value)
            yield c
        for prefix, total, client, what in (
            ("exchange", "exchanges", svc.exchange, "Model exchanges with the aggregator"),
            ("report", "reports_sent", svc.reporter, "Capacity reports sent to the extender"),
        ):
            if client is None:
                continue
            ok = client.exchanges if prefix == "exchange" else client.sent
            c = CounterMetricFamily(f"carico_agent_{total}", what, labels=["node"])
            c.add_metric([node], ok)
            yield c
            c = CounterMetricFamily(
                f"carico_agent_{prefix}_errors", f"{what}: failures", labels=["node"]
            )
            c.add_metric([node], client.errors)
            yield c
            yield _gauge(
                f"{prefix}_connected", f"{what}: 1 while connected", float(client.connected), node
            )
        if svc.churn_hint is not None:
            c = CounterMetricFamily(
                "carico_agent_churn_hints", "Pod cgroups created or removed", labels=["node"]
            )
            c.add_metric([node], svc.churn_hint.events)
            yield c
        if svc.watcher is not None:
            c = CounterMetricFamily(
                "carico_agent_pod_watch_errors", "Pod watch failures", labels=["node"]
            )
            c.add_metric([node], svc.watcher.errors)
            yield c
