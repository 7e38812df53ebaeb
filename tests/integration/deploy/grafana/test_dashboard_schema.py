"""The shipped Grafana dashboard is well formed: what Grafana needs to import and render it, the
PromQL parses, the variables it uses are defined, and the grafana-dashboard overlay ships it as
the ConfigMap the Grafana sidecar looks for."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from .grafana_queries import DASHBOARD, DASHBOARD_OVERLAY, load, metric_names, panels, queries
from .grafana_queries import variables_used as used

PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "table", "bargauge"}
GRID_COLUMNS = 24  # Grafana's grid is 24 columns wide


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load()


def test_top_level_fields(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "carico-overview" and len(dashboard["uid"]) <= 40
    assert dashboard["title"] == "Carico"
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["time"] == {"from": "now-1h", "to": "now"}
    assert isinstance(dashboard["panels"], list) and dashboard["panels"]
    # The ConfigMap is applied as-is: no import-time inputs left to fill in.
    assert dashboard.get("__inputs", []) == []


def test_panels_have_unique_ids_a_place_and_queries(dashboard: dict[str, Any]) -> None:
    ids: list[int] = []
    for panel in panels(dashboard):
        title = panel.get("title")
        assert isinstance(title, str) and title, panel
        assert panel["type"] in PANEL_TYPES, title
        assert isinstance(panel["id"], int), title
        ids.append(panel["id"])
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("x", "y", "w", "h")), title
        assert grid["x"] >= 0 and grid["w"] >= 1 and grid["x"] + grid["w"] <= GRID_COLUMNS, title
        if panel["type"] == "row":
            assert "targets" not in panel, title
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
        targets = panel["targets"]
        assert targets, f"{title}: no query"
        ref_ids = [t["refId"] for t in targets]
        assert len(set(ref_ids)) == len(ref_ids), f"{title}: duplicate refId"
        for t in targets:
            assert t["datasource"] == panel["datasource"], title
            assert t["expr"].strip(), title
    assert len(set(ids)) == len(ids), "panel ids must be unique"


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard):
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_variables_are_defined_and_used(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    node = variables["node"]
    assert node["type"] == "query" and node["includeAll"] and node["multi"]
    assert node["allValue"] == ".*"
    assert metric_names(node["definition"].replace("label_values(", "").split(",")[0]) == {
        "carico_extender_node_avail"
    }
    referenced: set[str] = set()
    for panel in panels(dashboard):
        texts = [str(panel.get("datasource", ""))]
        texts += [t["expr"] for t in panel.get("targets", [])]
        texts += [str(t.get("datasource", "")) for t in panel.get("targets", [])]
        for text in texts:
            referenced |= used(text)
    referenced |= used(str(node["datasource"]))
    builtin = {n for n in referenced if n.startswith("__")}
    assert builtin <= {"__rate_interval", "__interval", "__range"}
    assert referenced - builtin == set(variables), "every variable defined and every one used"


def test_every_query_parses_and_names_its_metrics(dashboard: dict[str, Any]) -> None:
    seen = 0
    for title, expr in queries(dashboard):
        names = metric_names(expr)  # raises on a PromQL syntax error
        assert names and all(n.startswith("carico_") for n in names), (title, expr)
        seen += 1
    assert seen >= 30


def test_the_overlay_ships_it_for_the_grafana_sidecar() -> None:
    (config_map,) = [
        o for o in yaml.safe_load_all(DASHBOARD_OVERLAY.read_text()) if o["kind"] == "ConfigMap"
    ]
    meta = config_map["metadata"]
    assert (meta["name"], meta["namespace"]) == ("carico-grafana-dashboard", "carico-system")
    assert meta["labels"]["grafana_dashboard"] == "1"
    # The chart embeds the file as it is, so the sidecar loads exactly the tested dashboard.
    assert json.loads(config_map["data"]["carico-dashboard.json"]) == json.loads(
        DASHBOARD.read_text()
    )
