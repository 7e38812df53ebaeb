"""Prometheus metrics of the aggregator (``carico_aggregator_*``), in a registry of their own so
that several aggregators (in tests, a tree in one process) never collide.

The two metrics touched on every exchanged model (the outcome counter and the latency histogram),
and the count of open exchange streams, are plain Python counters exported by a custom collector
at scrape time: prometheus_client's own
``inc``/``observe`` take a lock each and cost several microseconds, which at thousands of calls a
second is a measurable share of the call. Everything runs on the event loop, so no lock is needed.

In a multi-process aggregator each worker counts its own calls and sends the totals to the merger
every fraction of a second (``WorkerTotals``); the merger's scrape adds them to its own counts.
That was chosen over prometheus_client's multiprocess mode, which works through files per process
and per-call locks and would bring back exactly the per-call cost the plain counters avoid.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# too_large: gRPC refused the message (over --max-message-bytes) before it reached any handler.
OUTCOMES = ("accepted", "stale", "invalid", "over_capacity", "too_large")
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

    def add(self, counts: list[int], total: float) -> None:
        """Add another histogram's bucket counts and sum (same bounds) to this one."""
        self.counts = [a + b for a, b in zip(self.counts, counts, strict=True)]
        self.sum += total

    def cumulative(self) -> list[tuple[str, float]]:
        total, result = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            result.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return result


# What a worker reports: its outcome counts, latency bucket counts and latency sum, all totals
# since the worker started, and the exchange streams open on it now.
WorkerReport = tuple[dict[str, int], list[int], float, int]


class WorkerTotals:
    """The latest totals of every worker process, plus those of workers that have exited.

    A restarted worker starts counting from zero again; folding the last report of the old one
    into ``retired`` keeps the sums monotonic, as Prometheus counters must be.
    """

    def __init__(self) -> None:
        self._live: dict[int, WorkerReport] = {}
        self._retired: WorkerReport = (
            dict.fromkeys(OUTCOMES, 0),
            [0] * (len(LATENCY_BUCKETS) + 1),
            0.0,
            0,
        )

    def report(self, worker: int, report: WorkerReport) -> None:
        self._live[worker] = report

    def retire(self, worker: int) -> None:
        """Keep the last totals of ``worker``, which has exited."""
        gone = self._live.pop(worker, None)
        if gone is not None:
            counts, buckets, total, _ = gone  # its streams ended with it
            self._retired = _sum_reports((self._retired, (counts, buckets, total, 0)))

    def calls(self) -> dict[int, int]:
        """Calls each live worker has reported so far (its latency observations)."""
        return {worker: sum(report[1]) for worker, report in self._live.items()}

    def total(self) -> WorkerReport:
        return _sum_reports((self._retired, *self._live.values()))


def _sum_reports(reports: tuple[WorkerReport, ...]) -> WorkerReport:
    counts = dict.fromkeys(OUTCOMES, 0)
    latency = LatencyHistogram()
    streams = 0
    for outcome_counts, buckets, total, open_streams in reports:
        for outcome, n in outcome_counts.items():
            counts[outcome] = counts.get(outcome, 0) + n
        latency.add(buckets, total)
        streams += open_streams
    return counts, latency.counts, latency.sum, streams


class _HotPathCollector(Collector):
    def __init__(self, metrics: AggregatorMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        own = self._metrics
        counts, buckets, total, streams = _sum_reports(
            (own.own_report(), own.worker_totals.total())
        )
        latency = LatencyHistogram(own.exchange_latency.bounds)
        latency.add(buckets, total)
        exchanges = CounterMetricFamily(
            "carico_aggregator_exchanges",
            "Exchanged models (unary calls and stream messages) by outcome",
            labels=["outcome"],
        )
        for outcome, value in counts.items():
            exchanges.add_metric([outcome], float(value))
        yield exchanges
        yield HistogramMetricFamily(
            "carico_aggregator_exchange_latency_seconds",
            "Time spent handling an exchanged model inside the server",
            buckets=latency.cumulative(),
            sum_value=latency.sum,
        )
        yield GaugeMetricFamily(
            "carico_aggregator_streams",
            "Exchange streams open now (agents connected over a stream)",
            value=float(streams),
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
        self.streams = 0  # exchange streams open in this process
        self.worker_totals = WorkerTotals()
        self.registry.register(_HotPathCollector(self))
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
        self.workers = Gauge(
            "carico_aggregator_workers",
            "Worker processes serving Exchange (1 in single-process mode)",
            registry=self.registry,
        )
        self.worker_restarts = Counter(
            "carico_aggregator_worker_restarts",
            "Worker processes restarted after they exited unexpectedly",
            registry=self.registry,
        )
        self.parent_exchanges = Counter(
            "carico_aggregator_parent_exchanges",
            "Exchanges with the parent aggregator by outcome",
            ["outcome"],
            registry=self.registry,
        )

    def own_report(self) -> WorkerReport:
        """This process's own hot-path totals (copies), in the shape a worker reports them."""
        latency = self.exchange_latency
        return dict(self.exchanges), list(latency.counts), latency.sum, self.streams
