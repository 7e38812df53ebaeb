"""Conversions between the store's views and the ``carico.v1`` messages: pure, no I/O.

Neighbours: ``store`` produces the ``GlobalView``; ``service`` serves the ``GlobalModel`` built here
and ``grpc_client`` forwards the ``LocalModel`` built here to a parent aggregator.
"""

from __future__ import annotations

from aggregator.store import GlobalView
from aggregator.validate import LEARNED
from carico.pods import Requests
from protos.carico.v1 import aggregator_pb2, capacity_pb2

NO_REQUESTS = Requests()


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
    reply.priors.MergeFrom(_class_priors(view))
    return reply


# The per-class part of the priors of the last view: the summary changes at most once a second,
# the reply up to every recompute, and building 1,024 class messages costs seven times more than
# merging them in from this copy.
_memo: list[tuple[object, object, aggregator_pb2.FleetPriors]] = []


def _class_priors(view: GlobalView) -> aggregator_pb2.FleetPriors:
    if _memo and _memo[0][0] is view.fleet and _memo[0][1] is view.class_requests:
        return _memo[0][2]
    fleet = view.fleet
    priors = aggregator_pb2.FleetPriors(
        class_medians=class_messages(view, "fleet"),
        cpu_request_ratio=fleet.cpu_ratio or 0.0,
        memory_request_ratio=fleet.memory_ratio or 0.0,
    )
    _memo[:] = [(fleet, view.class_requests, priors)]
    return priors


def class_messages(view: GlobalView, source: str) -> list[capacity_pb2.ClassFootprint]:
    """The fleet's per-class medians, each with its class's requests, as ``source``."""
    requests = view.class_requests
    result = []
    for name, footprint in view.fleet.classes.items():
        wanted = requests.get(name, NO_REQUESTS)
        result.append(
            capacity_pb2.ClassFootprint(
                workload_class=name,
                cpu_cores=footprint.cpu,
                memory_bytes=footprint.memory,
                source=source,
                request_cpu_cores=wanted.cpu,
                request_memory_bytes=wanted.memory,
            )
        )
    return result


def forward_message(
    view: GlobalView, name: str, sequence: int, now: float
) -> aggregator_pb2.LocalModel:
    """This aggregator's merged model as a child's report to its parent.

    The weight is the number of leaf nodes behind it and every member's per-pod cost travels
    along, so the parent's mean and median equal those of one flat aggregator. The classes are
    this aggregator's own per-class medians, one per class, as if learned by one sender: the
    parent cannot count the nodes behind each (docs/architecture.md#aggregation).
    """
    return aggregator_pb2.LocalModel(
        node=name,
        sequence=sequence,
        timestamp=now,
        model=factor_message(view),
        weight=view.contributing_nodes,
        per_pod_costs=view.all_costs.tolist(),
        class_footprints=class_messages(view, LEARNED),
    )
