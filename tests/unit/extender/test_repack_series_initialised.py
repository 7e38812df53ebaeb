"""The repack counters have a zero series for every known label value from the first scrape, so
``rate()``/``increase()`` have a starting point and the dashboard's panels are not empty."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler_ext.capacity import CapacityTable
from scheduler_ext.ledger import Ledger
from scheduler_ext.metrics import (
    REPACK_EXECUTION_OUTCOMES,
    REPACK_STATUSES,
    REPACK_TRIGGERS,
    ExtenderMetrics,
)


def _samples(metrics: ExtenderMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_every_trigger_status_and_outcome_starts_at_zero() -> None:
    table = CapacityTable()
    metrics = ExtenderMetrics(table, Ledger(table), clock=lambda: 0.0)
    runs = _samples(metrics, "carico_repack_runs_total")
    assert len(runs) == len(REPACK_TRIGGERS) * len(REPACK_STATUSES) == 10
    assert set(runs.values()) == {0.0}
    assert (("status", "NO_IMPROVEMENT"), ("trigger", "unschedulable")) in runs
    executions = _samples(metrics, "carico_repack_executions_total")
    assert executions == {(("outcome", o),): 0.0 for o in REPACK_EXECUTION_OUTCOMES}
    # A run counted later adds to its own series only.
    metrics.repack_runs.labels("http", "OPTIMAL").inc()
    after = _samples(metrics, "carico_repack_runs_total")
    assert after[(("status", "OPTIMAL"), ("trigger", "http"))] == 1.0
    assert sum(after.values()) == 1.0
