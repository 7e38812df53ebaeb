"""The simulator's ``carico`` scheduler runs the real agent pipeline, aggregator store and extender.

A small cluster (3 nodes, 60 bpi pods) keeps each run well under a second of pipeline work.
"""

from __future__ import annotations

import math

import numpy as np

from agent.pipeline import AgentPipeline, PipelineConfig
from aggregator.store import ModelStore
from carico_app.simulate.carico_wiring import CaricoScheduler
from carico_app.simulate.engine import CaseResult, run_case
from carico_app.simulate.params import BPI_2000, ModelParams
from carico_app.simulate.scenarios import Case, JobSpec, Scenario
from carico_app.simulate.schedulers import make_scheduler, parse_spec
from scheduler_ext.decisions import Decider
from scheduler_ext.ledger import Ledger, Release

NODES = 3
SCENARIO = Scenario(
    "small",
    "60 bpi pods on 3 nodes",
    (Case("60 pods", (JobSpec("bpi", BPI_2000, 60),)),),
    (),
    NODES,
)
CASE = SCENARIO.cases[0]


def _run(seed: int, prior: float = 1.0) -> tuple[CaseResult, CaricoScheduler]:
    params = ModelParams()
    # A per-pod cost prior of 1 (k drops by about one per bpi pod on a 4-core node) makes the
    # capacity filter bind within the job, so the test sees refusals as well as passes.
    sched = CaricoScheduler(
        params,
        NODES,
        np.random.default_rng(seed),
        pipeline=PipelineConfig(sample_hz=1.0 / params.dt, prior_per_pod_cost=prior),
    )
    result = run_case(SCENARIO, CASE, parse_spec("carico"), params, seed, scheduler=sched)
    return result, sched


def test_make_scheduler_builds_the_wired_carico() -> None:
    sched = make_scheduler(parse_spec("carico"), ModelParams(), NODES, np.random.default_rng(0))
    assert isinstance(sched, CaricoScheduler)
    assert isinstance(sched.ext.decider, Decider)
    assert isinstance(sched.ext.ledger, Ledger)
    assert isinstance(sched.store, ModelStore)


def test_binds_only_where_the_extender_sees_room_and_releases_every_reservation() -> None:
    result, sched = _run(seed=3)
    ext = sched.ext
    assert result.finished
    assert ext.binds == 60
    assert len(ext.decisions) == 60
    # Every agent ran the real pipeline and reported into the extender's table.
    assert sched.agents is not None
    for agent in sched.agents:
        assert isinstance(agent.pipeline, AgentPipeline)
        assert agent.reports > 0
        assert ext.table.report(agent.name) is not None
    # The aggregator's store held every node's model and the agents merged the global model.
    assert len(sched.store) == NODES
    assert all(a.pipeline.global_view is not None for a in sched.agents)
    # Jobs start after the lead, when every node reports: no bind was decided on missing or
    # stale data, and at every one a pod of the class fitted (the threshold, 1) at decision time.
    for _now, _node, free, fresh in ext.decisions:
        assert fresh
        assert free >= 1.0
    # The capacity filter did narrow the candidates at some point (60 pods on 3 small nodes).
    assert sched.failed_attempts > 0 or ext.bind_refusals > 0
    # Every reservation ended because a report of its node counted the pod (the simulated
    # agents list the pods they began to count), none by the hand-over timeout, TTL or undo.
    assert ext.ledger.open_count() == 0
    assert ext.ledger.ended[Release.COUNTED] == 60
    assert sum(ext.ledger.ended.values()) == 60
    assert ext.table.reserved_counts() == {}
    assert len(ext.cluster.bindings) == 60


def test_same_seed_same_run() -> None:
    a, sa = _run(seed=5)
    b, sb = _run(seed=5)
    assert a.job_completion_s == b.job_completion_s
    assert a.jobs[0].pod_completion == b.jobs[0].pod_completion
    assert sa.ext.decisions == sb.ext.decisions
    assert math.isfinite(a.job_completion_s)


def test_default_prior_runs_end_to_end() -> None:
    # With the agent's shipped prior (0.1) the run completes too; it binds through the ledger.
    result, sched = _run(seed=2, prior=PipelineConfig().prior_per_pod_cost)
    assert result.finished
    assert sched.ext.ledger.ended[Release.COUNTED] == 60
