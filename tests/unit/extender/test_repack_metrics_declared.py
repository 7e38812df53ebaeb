"""The repack metric families are in /metrics before any repack has run (dashboards query them)."""

from __future__ import annotations

from prometheus_client import generate_latest

from scheduler_ext.capacity import CapacityTable
from scheduler_ext.ledger import Ledger
from scheduler_ext.metrics import ExtenderMetrics


def test_repack_families_are_exposed_from_the_first_scrape() -> None:
    table = CapacityTable()
    metrics = ExtenderMetrics(table, Ledger(table), clock=lambda: 0.0)
    text = generate_latest(metrics.registry).decode()
    for family in (
        "carico_repack_runs_total",
        "carico_repack_solve_seconds",
        "carico_repack_executions_total",
        "carico_repack_plan_slots_open",
        "carico_repack_unschedulable_pods",
    ):
        assert f"# TYPE {family} " in text, family
    for kind in ("move", "placement", "eviction"):
        assert f'carico_repack_plan_actions{{kind="{kind}"}} 0.0' in text
