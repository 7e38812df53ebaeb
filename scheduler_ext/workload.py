"""The global model's expected-workload vector, as the agents pass it on with their reports.

The extender takes no decision from it (its decisions use avail: docs/architecture.md#decisions); it
keeps it per node so that the dashboard can show the typical workload the fleet's k counts in
(docs/architecture.md#capacity-signal). This module validates the ``GlobalWorkload`` part of a
``NodeCapacity`` and builds the ``/api/v1/model`` view: the freshest model any node reports, marked
stale when the node that carries it is stale or no longer merges it. Pure: the clock is passed in.
Neighbours: ``capacity`` (stores it in each ``NodeReport``), ``http_server`` (serves the view).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from carico.names import subdomain_problem
from carico.subspace import MAX_DIMS as MAX_FEATURES
from protos.carico.v1 import capacity_pb2

MAX_FEATURE_NAME = 63  # as the aggregator allows


@dataclass(frozen=True, slots=True)
class GlobalWorkload:
    """One node's copy of the global model summary (None in a report while the node has none)."""

    expected_workload: tuple[float, ...]
    feature_names: tuple[str, ...]
    version: int
    computed_at: float
    age_seconds: float  # at the agent, when it sent the report
    contributing_nodes: int
    aggregator: str

    @classmethod
    def from_message(cls, msg: capacity_pb2.GlobalWorkload) -> GlobalWorkload | None:
        if not msg.has_model:
            return None
        return cls(
            expected_workload=tuple(msg.expected_workload),
            feature_names=tuple(msg.feature_names),
            version=msg.version,
            computed_at=msg.computed_at,
            age_seconds=msg.age_seconds,
            contributing_nodes=msg.contributing_nodes,
            aggregator=msg.aggregator,
        )


def validate_workload(msg: capacity_pb2.GlobalWorkload) -> str | None:
    """Why a report's global workload is unacceptable, or None."""
    if not msg.has_model:
        return None
    w, names = msg.expected_workload, msg.feature_names
    if not 1 <= len(w) <= MAX_FEATURES:
        return f"global_workload has {len(w)} values (1 to {MAX_FEATURES} expected)"
    if len(names) != len(w):
        return "global_workload: expected_workload and feature_names differ in length"
    if len(set(names)) != len(names) or not all(names):
        return "global_workload: feature names must be unique and non-empty"
    # Kept per node for the dashboard: bounded, so that a report cannot weigh megabytes.
    if any(len(name) > MAX_FEATURE_NAME for name in names):
        return f"global_workload: a feature name is longer than {MAX_FEATURE_NAME} characters"
    if msg.aggregator and subdomain_problem(msg.aggregator, "aggregator"):
        return f"global_workload: {subdomain_problem(msg.aggregator, 'aggregator')}"
    # Telemetry lies in [0,1]^d, so σ₁² ≤ E|y|² ≤ d and every w_j = σ₁·u₁_j ≤ √d.
    bound = math.sqrt(len(w)) * (1 + 1e-9)
    for name, value in zip(names, w, strict=True):
        if not (math.isfinite(value) and 0.0 <= value <= bound):
            return f"global_workload: {name} = {value} is outside [0, √d = {bound:.3g}]"
    for name, value in (("age_seconds", msg.age_seconds), ("computed_at", msg.computed_at)):
        if not (math.isfinite(value) and value >= 0):
            return f"global_workload: {name} is {value}"
    return None


class WorkloadCarrier(Protocol):
    """What the view reads of a node's report (``capacity.NodeReport`` has it)."""

    @property
    def node(self) -> str: ...
    @property
    def received_at(self) -> float: ...
    @property
    def global_model(self) -> bool: ...
    @property
    def global_workload(self) -> GlobalWorkload | None: ...


def model_view(
    reports: Iterable[WorkloadCarrier], now: float, is_fresh: Callable[[str, float], bool]
) -> dict[str, Any]:
    """The freshest global model the nodes report, and which version each node holds.

    A model's age is its age at the agent plus the time since that report arrived; the youngest
    wins (versions of different aggregators are not comparable). It is ``stale`` when the node
    carrying it is stale or reports that it no longer merges it (past the agent's global TTL).
    """
    nodes: dict[str, Any] = {}
    best: tuple[float, WorkloadCarrier, GlobalWorkload] | None = None
    for r in reports:
        g = r.global_workload
        if g is None:
            nodes[r.node] = None
            continue
        age = g.age_seconds + max(0.0, now - r.received_at)
        nodes[r.node] = {"version": g.version, "age_seconds": round(age, 3)}
        if best is None or (age, r.node) < (best[0], best[1].node):
            best = (age, r, g)
    if best is None:
        return {"available": False, "nodes": nodes}
    age, r, g = best
    return {
        "available": True,
        "feature_names": list(g.feature_names),
        "expected_workload": list(g.expected_workload),
        "version": g.version,
        "computed_at": g.computed_at,
        "age_seconds": round(age, 3),
        "contributing_nodes": g.contributing_nodes,
        "aggregator": g.aggregator,
        "reported_by": r.node,
        "stale": not (is_fresh(r.node, now) and r.global_model),
        "nodes": nodes,
    }
