"""The dashboard's repack panel in a real headless browser: the plans of a real extender's repacker.

The browser is the one the dashboard's own browser test drives (Debian's Chromium via Selenium,
installed by ``make browser``); it runs in a thread while the extender serves on this event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from typing import Any

import pytest

from scheduler_ext.cluster import InMemoryCluster
from tests.integration.demo.test_dashboard_browser import _wait, browser  # noqa: F401

from .conftest import MakeRepacker, fragmented_cluster, unscheduled_now
from .test_balance_http import mixed_cluster

pytestmark = pytest.mark.slow

PANEL_JS = """
const rows = [...document.querySelectorAll('#repack-plans tbody tr')].map((tr) => {
  const cells = {};
  for (const td of tr.querySelectorAll('td')) cells[td.className] = td.textContent;
  return cells;
});
const state = document.getElementById('repack-state');
const steps = [...document.querySelectorAll('#repack .steps li')].map((li) => li.textContent);
const trend = document.getElementById('goal-trend');
return {rows, state: state ? state.textContent : null, steps,
        trend: trend ? trend.textContent : null};
"""


async def test_the_panel_shows_the_last_plans(
    make_repacker: MakeRepacker,
    browser: Any,  # noqa: F811
) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects(fragmented_cluster())
    r = await make_repacker(cluster=cluster)
    r.repack.on_unscheduled_list(await unscheduled_now(cluster))
    status, first = await r.post()
    assert status == 200 and first["status"] == "OPTIMAL"

    def panel() -> dict[str, Any] | None:
        seen: dict[str, Any] = browser.execute_script(PANEL_JS)
        return seen if seen["rows"] else None

    await asyncio.to_thread(browser.get, f"{r.url}/")
    seen = await asyncio.to_thread(_wait, "the repack panel's plan row", panel)
    [row] = seen["rows"]
    assert row["trigger"] == "http" and row["status"] == "OPTIMAL" and row["goal"] == "place"
    assert (row["moves"], row["placements"], row["evictions"]) == ("1", "1", "0")
    assert row["execution"] == "not executed (dry-run)"
    assert "mode dry-run" in seen["state"] and "1 pod(s) unschedulable" in seen["state"]
    assert len(seen["steps"]) == 2
    assert seen["steps"][1] == "place default/pending: (pending) → node-a"
    browser.save_screenshot(os.path.join(tempfile.gettempdir(), "carico-repack-panel.png"))


async def test_the_panel_shows_each_balancing_plan_and_the_measure_over_time(
    make_repacker: MakeRepacker,
    browser: Any,  # noqa: F811
) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects(mixed_cluster())
    r = await make_repacker(cluster=cluster)
    status, first = await r.post(json.dumps({"mode": "balance"}).encode())
    assert status == 200 and first["plan"]["moves"], first
    goal = first["plan"]["goal"]

    def panel() -> dict[str, Any] | None:
        seen: dict[str, Any] = browser.execute_script(PANEL_JS)
        return seen if seen["rows"] and seen["trend"] else None

    await asyncio.to_thread(browser.get, f"{r.url}/")
    seen = await asyncio.to_thread(_wait, "the balancing plan in the repack panel", panel)
    [row] = seen["rows"]
    assert row["goal"] == f"balance {goal['before']:.3f} → {goal['after']:.3f}"
    assert row["moves"] == "2" and row["placements"] == "0"
    assert seen["trend"] == f"balancing measure over time: balance {goal['before']:.3f}"
    assert len(seen["steps"]) == 2 and all(s.startswith("move ") for s in seen["steps"])
