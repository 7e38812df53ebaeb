"""The dashboard over real HTTP: the page and its assets are served locally, and the history
endpoint records what the sweep sees (the clock is the fixture's settable clock, so staleness
comes from moving it, not from sleeping)."""

from __future__ import annotations

import re

from .conftest import Extender


async def test_the_page_and_its_assets_are_served_locally(extender: Extender) -> None:
    status, page = await extender.get("/")
    assert status == 200
    assert "<title>Carico" in page
    assets = re.findall(r'(?:src|href)="(static/[^"]+)"', page)
    assert sorted(assets) == ["static/dashboard.css", "static/dashboard.js"]
    assert not re.search(r"https?://", page)  # nothing fetched from elsewhere
    for asset in assets:
        status, body = await extender.get(f"/{asset}")
        assert status == 200 and len(body) > 100, asset


async def test_history_records_each_sweep_and_marks_stale_nodes(extender: Extender) -> None:
    extender.feed("node-a", 4.0)
    extender.feed("node-b", 2.0)
    extender.service.sweep()
    extender.clock.advance(11.0)  # past the default stale_after of 10 s
    extender.feed("node-b", 1.5, sequence=2, timestamp=1.7e9 + 11)
    extender.service.sweep()
    status, body = await extender.get("/api/v1/history")
    assert status == 200
    assert body["stale_policy"] == "fail-open" and body["stale_after_seconds"] == 10.0
    a, b = body["nodes"]["node-a"], body["nodes"]["node-b"]
    assert [p[1:] for p in a] == [[4.0, 0, False], [4.0, 0, True]]
    assert [p[1:] for p in b] == [[2.0, 0, False], [1.5, 0, False]]
    assert a[1][0] - a[0][0] == 11.0  # wall times of the two sweeps


async def test_no_repack_plans_endpoint_until_a_repacker_exists(extender: Extender) -> None:
    # The dashboard shows "repacker not connected" on this 404 rather than inventing plans.
    status, _ = await extender.get("/api/v1/repack/plans")
    assert status == 404
