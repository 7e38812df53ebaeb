"""Prometheus metrics of the aggregator (``carico_aggregator_*``), in a registry of their own so
that several aggregators (in tests, a tree in one process) never collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

OUTCOMES = ("accepted", "stale", "invalid", "over_capacity", "error")


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
        exchanges = Counter(
            "carico_aggregator_exchanges",
            "Exchange calls by outcome",
            ["outcome"],
            registry=self.registry,
        )
        # Children resolved once: labels() on every call would cost a dict lookup and a lock.
        self.exchanges = {outcome: exchanges.labels(outcome) for outcome in OUTCOMES}
        self.exchange_latency = Histogram(
            "carico_aggregator_exchange_latency_seconds",
            "Time spent handling an Exchange call inside the server",
            buckets=(5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1),
            registry=self.registry,
        )
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
