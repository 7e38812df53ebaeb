"""Prometheus metrics of the aggregator (``carico_aggregator_*``), in a registry of their own so
that several aggregators (in tests, a tree in one process) never collide.

The two metrics touched on every ``Exchange`` (the outcome counter and the latency histogram) are
plain Python counters exported by a custom collector at scrape time: prometheus_client's own
``inc``/``observe`` take a lock each and cost several microseconds, which at thousands of calls a
second is a measurable share of the call. Everything runs on the event loop, so no lock is needed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = ("accepted", "stale", "invalid", "over_capacity")
LATENCY_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1)


class LatencyHistogram:
    """A cumulative-bucket histogram without locking (single-threaded use)."""

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le is inclusive
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        total, result = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            result.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return result


class _HotPathCollector(Collector):
    def __init__(self, counts: dict[str, int], latency: LatencyHistogram) -> None:
        self._counts = counts
        self._latency = latency

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        exchanges = CounterMetricFamily(
            "carico_aggregator_exchanges", "Exchange calls by outcome", labels=["outcome"]
        )
        for outcome, value in self._counts.items():
            exchanges.add_metric([outcome], float(value))
        yield exchanges
        yield HistogramMetricFamily(
            "carico_aggregator_exchange_latency_seconds",
            "Time spent handling an Exchange call inside the server",
            buckets=self._latency.cumulative(),
            sum_value=self._latency.sum,
        )


class AggregatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.nodes_contributing = Gauge(
            "carico_aggregator_nodes_contributing",
            "Leaf nodes represented in the global model (a child aggregator counts its nodes)",
            registry=self.registry,
        )
        self.senders = Gauge(
            "carico_aggregator_senders",
            "Agents and child aggregators with a live entry",
            registry=self.registry,
        )
        self.exchanges: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.exchange_latency = LatencyHistogram()
        self.registry.register(_HotPathCollector(self.exchanges, self.exchange_latency))
        self.global_model_age = Gauge(
            "carico_aggregator_global_model_age_seconds",
            "Seconds since the served global model was computed (NaN before the first one)",
            registry=self.registry,
        )
        self.global_model_age.set(float("nan"))
        self.recomputes = Counter(
            "carico_aggregator_recomputes",
            "Recomputations of the global model",
            registry=self.registry,
        )
        self.expired = Counter(
            "carico_aggregator_expired_nodes",
            "Entries dropped after their TTL",
            registry=self.registry,
        )
        self.checkpoints = Counter(
            "carico_aggregator_checkpoints",
            "Checkpoint writes by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.parent_exchanges = Counter(
            "carico_aggregator_parent_exchanges",
            "Exchanges with the parent aggregator by outcome",
            ["outcome"],
            registry=self.registry,
        )
