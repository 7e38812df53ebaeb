"""Reading the shipped Grafana dashboard: its panels, its PromQL and the metric names it queries.

PromQL is parsed with ``promql-parser`` (a real PromQL grammar), not with regular expressions, so a
label name or a function name is never mistaken for a metric and a syntax error fails the test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser

ROOT = Path(__file__).resolve().parents[4]
DASHBOARD = ROOT / "deploy" / "helm" / "carico" / "files" / "carico-dashboard.json"
# The overlay generated from the chart with grafanaDashboard.enabled=true (carico_app.manifests).
DASHBOARD_OVERLAY = ROOT / "deploy" / "overlays" / "grafana-dashboard" / "resources.yaml"

# Grafana's own variables, with values of the kind Grafana substitutes.
BUILTIN = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def variables_used(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in VARIABLE.finditer(text)}


def expand(expr: str, values: dict[str, str]) -> str:
    """``expr`` with each ``$var`` replaced as Grafana would (``values`` for the dashboard's)."""

    def sub(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        return {**BUILTIN, **values}[name]

    return VARIABLE.sub(sub, expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects; ValueError for a nameless selector."""
    names: set[str] = set()
    nameless: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            else:
                nameless.append(str(node))

    promql_parser.walk(promql_parser.parse(expr), visit)
    if nameless:
        raise ValueError(f"selectors without a metric name in {expr!r}: {nameless}")
    return names


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, expression) of every panel target, with the variables expanded."""
    for title, expr, _ in targets(dashboard):
        yield title, expr


LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def label_uses(expr: str, legend: str = "") -> Iterator[tuple[frozenset[str], str, str]]:
    """(metrics, label, how) for every label an expression or its legend relies on: label
    matchers, ``by (...)`` groupings and the legend's ``{{label}}`` placeholders. The label must
    exist on at least one of ``metrics`` or the panel shows nothing (or one unlabelled line)."""
    tree = promql_parser.parse(expr)
    uses: list[tuple[frozenset[str], str, str]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            for matcher in node.matchers.matchers:
                if matcher.name != "__name__":
                    uses.append((frozenset({node.name}), matcher.name, "matcher"))
        grouped = isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None
        if grouped and node.modifier.type == promql_parser.AggModifierType.By:
            below = frozenset(metric_names(str(node.expr)))
            uses.extend((below, label, "by") for label in node.modifier.labels)

    promql_parser.walk(tree, visit)
    everything = frozenset(metric_names(expr))
    uses.extend((everything, label, "legend") for label in LEGEND_LABEL.findall(legend))
    yield from uses


def targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(panel title, expression, legend) of every panel target, with the variables expanded."""
    values = {"node": ".*", "datasource": "prometheus"}
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel["title"], expand(target["expr"], values), target.get("legendFormat", "")
