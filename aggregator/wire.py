"""Conversions between the store's views and the ``carico.v1`` messages: pure, no I/O.

Neighbours: ``store`` produces the ``GlobalView``; ``service`` serves the ``GlobalModel`` built here
and ``grpc_client`` forwards the ``LocalModel`` built here to a parent aggregator.
"""

from __future__ import annotations

from aggregator.store import GlobalView
from protos.carico.v1 import aggregator_pb2


def factor_message(view: GlobalView) -> aggregator_pb2.SubspaceFactor:
    d, r = view.u.shape
    return aggregator_pb2.SubspaceFactor(
        d=d,
        r=r,
        u=view.u.ravel().tolist(),
        sigma=view.sigma.tolist(),
        feature_names=list(view.feature_names),
    )


def global_message(
    view: GlobalView | None, version: int, aggregator: str, now: float
) -> aggregator_pb2.GlobalModel:
    """The reply to ``Exchange``; without a view it says ``has_model=false``."""
    reply = aggregator_pb2.GlobalModel(version=version, aggregator=aggregator, timestamp=now)
    if view is None:
        return reply
    reply.has_model = True
    reply.model.CopyFrom(factor_message(view))
    reply.contributing_nodes = view.contributing_nodes
    reply.timestamp = view.computed_at
    if view.median_per_pod_cost is not None:
        reply.priors.has_per_pod_cost = True
        reply.priors.median_per_pod_cost = view.median_per_pod_cost
        reply.priors.nodes_with_cost = view.nodes_with_cost
    return reply


def forward_message(
    view: GlobalView, name: str, sequence: int, now: float
) -> aggregator_pb2.LocalModel:
    """This aggregator's merged model as a child's report to its parent.

    The weight is the number of leaf nodes behind it and every member's per-pod cost travels
    along, so the parent's mean and median equal those of one flat aggregator.
    """
    return aggregator_pb2.LocalModel(
        node=name,
        sequence=sequence,
        timestamp=now,
        model=factor_message(view),
        weight=view.contributing_nodes,
        per_pod_costs=view.all_costs.tolist(),
    )
