"""Conversions between the agent's values and the wire messages (protos/carico/v1). Pure.

The global model is validated here (dimensions, feature names, finite values, orthonormal factor
via :class:`carico.model.SubspaceModel`) before it can reach the pipeline: a bad reply from the
aggregator is refused and the agent goes on with its local model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agent.pipeline import CapacityReport
from carico.footprint import ClassFootprint, FleetSummary, Footprint
from carico.model import SubspaceModel, expected_workload
from carico.pods import MAX_AVAIL
from protos.carico.v1 import aggregator_pb2, capacity_pb2

MODES = {
    "live": capacity_pb2.CAPACITY_MODE_LIVE,
    "estimate": capacity_pb2.CAPACITY_MODE_ESTIMATE,
}


def factor_to_wire(
    model: SubspaceModel, feature_names: tuple[str, ...]
) -> aggregator_pb2.SubspaceFactor:
    u, sigma = model.to_arrays()
    return aggregator_pb2.SubspaceFactor(
        d=model.d,
        r=model.r,
        u=u.reshape(-1).tolist(),  # row-major
        sigma=sigma.tolist(),
        feature_names=list(feature_names),
    )


def factor_from_wire(
    factor: aggregator_pb2.SubspaceFactor, feature_names: tuple[str, ...]
) -> SubspaceModel:
    """The model in ``factor``; ValueError when it does not match this agent's features."""
    names = tuple(factor.feature_names)
    if names != feature_names:
        raise ValueError(f"global model features {names} differ from this agent's {feature_names}")
    if factor.d != len(feature_names) or len(factor.u) != factor.d * factor.r:
        raise ValueError(
            f"global model shape d={factor.d} r={factor.r} u={len(factor.u)} is inconsistent"
        )
    if len(factor.sigma) != factor.r or factor.r < 1:
        raise ValueError(
            f"global model has {len(factor.sigma)} singular values for rank {factor.r}"
        )
    u = np.asarray(factor.u, dtype=np.float64).reshape(factor.d, factor.r)
    return SubspaceModel.from_arrays(u, np.asarray(factor.sigma, dtype=np.float64))


@dataclass(frozen=True)
class GlobalWorkload:
    """The latest accepted global model as the agent passes it on to the extender for display."""

    expected_workload: tuple[float, ...]  # w = σ₁·u₁ of the global model
    version: int
    computed_at: float  # the aggregator's wall clock
    contributing_nodes: int
    aggregator: str
    received_at: float  # the agent's monotonic clock


def global_workload_of(
    reply: aggregator_pb2.GlobalModel, model: SubspaceModel, received_at: float
) -> GlobalWorkload:
    """What the agent keeps of an accepted GlobalModel ``reply`` whose model is ``model``."""
    return GlobalWorkload(
        expected_workload=tuple(float(x) for x in expected_workload(model)),
        version=reply.version,
        computed_at=reply.timestamp,
        contributing_nodes=reply.contributing_nodes,
        aggregator=reply.aggregator,
        received_at=received_at,
    )


def global_workload_message(
    workload: GlobalWorkload | None, feature_names: tuple[str, ...], now: float
) -> capacity_pb2.GlobalWorkload:
    """The wire form at monotonic time ``now``; ``has_model`` false while there is none."""
    if workload is None:
        return capacity_pb2.GlobalWorkload(has_model=False)
    return capacity_pb2.GlobalWorkload(
        has_model=True,
        expected_workload=list(workload.expected_workload),
        feature_names=list(feature_names),
        version=workload.version,
        computed_at=workload.computed_at,
        age_seconds=max(0.0, now - workload.received_at),
        contributing_nodes=workload.contributing_nodes,
        aggregator=workload.aggregator,
    )


def local_model_message(
    node: str,
    sequence: int,
    timestamp: float,
    model: SubspaceModel,
    feature_names: tuple[str, ...],
    learned_per_pod_cost: float | None,
    learned_classes: Sequence[ClassFootprint] = (),
) -> aggregator_pb2.LocalModel:
    costs = [learned_per_pod_cost] if learned_per_pod_cost is not None else []
    return aggregator_pb2.LocalModel(
        node=node,
        sequence=sequence,
        timestamp=timestamp,
        model=factor_to_wire(model, feature_names),
        weight=1,
        per_pod_costs=costs,
        class_footprints=[class_footprint_message(c) for c in learned_classes],
    )


def class_footprint_message(c: ClassFootprint, pods: int = 0) -> capacity_pb2.ClassFootprint:
    return capacity_pb2.ClassFootprint(
        workload_class=c.name,
        cpu_cores=_finite(c.footprint.cpu),
        memory_bytes=_finite(c.footprint.memory),
        source=c.source,
        pods=pods,
        samples=c.samples,
        request_cpu_cores=_finite(c.requests.cpu),
        request_memory_bytes=_finite(c.requests.memory),
    )


def fleet_from_wire(priors: aggregator_pb2.FleetPriors) -> FleetSummary:
    """The aggregator's per-class medians and request ratios, as the pipeline's fleet view."""
    classes = {
        m.workload_class: Footprint(m.cpu_cores, m.memory_bytes) for m in priors.class_medians
    }
    return FleetSummary.of(
        classes, priors.cpu_request_ratio or None, priors.memory_request_ratio or None
    )


def _finite(value: float, default: float = 0.0) -> float:
    return value if math.isfinite(value) else default


def node_capacity_message(
    node: str,
    report: CapacityReport,
    feature_names: tuple[str, ...],
    timestamp: float,
    global_workload: GlobalWorkload | None = None,
) -> capacity_pb2.NodeCapacity:
    """The report as sent to the extender; the sequence number is set by the sender.

    ``global_workload`` is the latest global model the agent accepted (None: none yet); its age
    is taken at the report's own (monotonic) time.
    """
    msg = capacity_pb2.NodeCapacity(
        node=node,
        # Capped at the extender's bound, which refused a larger avail before it clamped one: an
        # older extender must not refuse the rest (the per-class data) and count the node stale.
        avail=min(_finite(report.avail), MAX_AVAIL),
        k=_finite(report.k),
        capacity=_finite(report.capacity),  # 0 until the first usable observation
        per_pod_cost=_finite(report.per_pod_cost),
        pods=report.pods,
        mode=MODES[report.mode],
        health=capacity_pb2.HealthFlags(
            psi_available=report.psi_available,
            churn_hold=report.churn,
            model_age_seconds=report.model_age_s,
            global_model=report.global_model,
            samples_missing=report.samples_missing,
        ),
        timestamp=timestamp,
        features=list(report.features),
        feature_names=list(feature_names),
        global_workload=global_workload_message(global_workload, feature_names, report.now),
        counted_pods=report.counted_pods,
    )
    view = report.classes
    if view is not None:
        msg.headroom.extend(view.headroom)
        msg.scale.extend(capacity_pb2.FeatureScale(per_core=c, per_byte=b) for c, b in view.scale)
        msg.classes.extend(class_footprint_message(c.footprint, c.pods) for c in view.classes)
        msg.full_level = view.full_level
        msg.cpu_cores = _finite(view.cores)
        msg.memory_bytes = _finite(view.memory_bytes)
        msg.default_footprint.CopyFrom(class_footprint_message(view.default))
    return msg
