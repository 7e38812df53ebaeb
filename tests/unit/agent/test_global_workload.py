"""The agent's report as the extender gets it: the global model's expected-workload vector passed
on, and an avail capped where the extender would refuse the report.

The reference w is computed independently of ``SubspaceModel.top``: the square root of the largest
eigenvalue of the second moment times its (non-negative) eigenvector, by numpy's ``eigh``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agent.pipeline import PipelineConfig
from agent.service import AgentService, ServiceConfig
from agent.wire import factor_to_wire, node_capacity_message
from carico.model import SubspaceModel
from carico.pods import MAX_AVAIL
from protos.carico.v1 import aggregator_pb2
from scheduler_ext.capacity import validate

from .test_service import Clock, ConstantSource


def _service() -> tuple[AgentService, Clock]:
    clock = Clock()
    svc = AgentService(
        ServiceConfig(node="n1", pipeline=PipelineConfig()),
        ConstantSource(),
        monotonic=clock,
        wall=lambda: 1.7e9 + clock.now,
    )
    return svc, clock


def _reply(
    names: tuple[str, ...] = ("cpu", "memory"),
) -> tuple[aggregator_pb2.GlobalModel, np.ndarray]:
    rng = np.random.default_rng(7)
    batch = rng.uniform(0.0, 1.0, size=(2, 40)) * np.array([[0.9], [0.3]])
    model = SubspaceModel.from_batch(batch)
    moment = batch @ batch.T / batch.shape[1]
    values, vectors = np.linalg.eigh(moment)
    top = vectors[:, -1] * np.sign(vectors[:, -1].sum())
    reply = aggregator_pb2.GlobalModel(
        has_model=True,
        model=factor_to_wire(model, names),
        contributing_nodes=4,
        version=17,
        timestamp=1.7e9 + 490.0,
        aggregator="agg-a",
    )
    return reply, np.sqrt(values[-1]) * top


def _report(svc: AgentService, clock: Clock) -> None:
    for _ in range(10):  # one batch
        svc.tick()
        clock.now += 0.1
    assert svc.last_report is not None


def test_without_a_global_model_the_report_says_so() -> None:
    svc, clock = _service()
    _report(svc, clock)
    assert svc.last_report is not None
    msg = node_capacity_message("n1", svc.last_report, ("cpu", "memory"), 1.7e9, None)
    assert msg.HasField("global_workload") and not msg.global_workload.has_model
    assert list(msg.global_workload.expected_workload) == []


def test_an_accepted_global_model_is_reported_with_its_age() -> None:
    svc, clock = _service()
    reply, w_ref = _reply()
    svc.apply_global(reply)
    received = clock.now
    _report(svc, clock)
    report = svc.last_report
    assert report is not None and report.global_model
    msg = node_capacity_message("n1", report, ("cpu", "memory"), 1.7e9, svc.global_workload)
    g = msg.global_workload
    assert g.has_model and list(g.feature_names) == ["cpu", "memory"]
    # float64 eigen-solvers agree to ~1e-15 relative on a 2x2; 1e-9 leaves ample room.
    np.testing.assert_allclose(g.expected_workload, w_ref, rtol=1e-9, atol=1e-12)
    assert (g.version, g.contributing_nodes, g.aggregator) == (17, 4, "agg-a")
    assert g.computed_at == reply.timestamp
    assert g.age_seconds == pytest.approx(report.now - received)
    assert g.age_seconds > 0.5  # the batch took ~1 s after the model arrived


def test_a_refused_global_model_leaves_the_previous_one() -> None:
    svc, _ = _service()
    good, w_ref = _reply()
    svc.apply_global(good)
    bad, _ = _reply(names=("cpu", "io_pressure"))
    bad.version = 18
    with pytest.raises(ValueError, match="differ"):
        svc.apply_global(bad)
    assert svc.global_refused == 1
    assert svc.global_workload is not None and svc.global_workload.version == 17
    np.testing.assert_allclose(svc.global_workload.expected_workload, w_ref, rtol=1e-9)


def test_a_reply_without_a_model_sets_nothing() -> None:
    svc, _ = _service()
    svc.apply_global(aggregator_pb2.GlobalModel(has_model=False, version=3))
    assert svc.global_workload is None


def test_a_runaway_avail_is_capped_where_the_extender_would_refuse_the_report() -> None:
    # The one-cost avail runs away when the per-pod cost sits near its floor (1.19e6 pods was
    # seen on a real node); sent as it is, the extender refused every report, per-class data
    # included, and decided the node as one without data.
    svc, clock = _service()
    _report(svc, clock)
    assert svc.last_report is not None
    runaway = replace(svc.last_report, avail=1187009.37, per_pod_cost=1e-6)
    msg = node_capacity_message("n1", runaway, ("cpu", "memory"), 1.7e9, None)
    assert msg.avail == MAX_AVAIL
    assert validate(msg) is None
    sane = node_capacity_message("n1", svc.last_report, ("cpu", "memory"), 1.7e9, None)
    assert sane.avail == pytest.approx(svc.last_report.avail)
