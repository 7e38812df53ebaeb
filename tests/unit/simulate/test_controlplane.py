"""The Job controller and its API rate limit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from carico_app.simulate.cluster import Cluster
from carico_app.simulate.controlplane import JobController
from carico_app.simulate.params import BPI_2000, ModelParams
from carico_app.simulate.scheduler import TokenBucket


def test_token_bucket_burst_then_rate() -> None:
    b = TokenBucket(qps=20.0, burst=30.0)
    granted = 0
    for _ in range(10):  # one second in 0.1 s steps
        b.refill(0.1)
        while b.take():
            granted += 1
    assert granted == 30 + 18  # full bucket at start (refill capped), then 2 per step


def test_pod_creation_is_limited_by_the_controller_qps(quiet: ModelParams) -> None:
    c = Cluster(quiet, 2, np.random.default_rng(0))
    jc = JobController(quiet, c)
    jc.submit("bpi", BPI_2000, completions=100, parallelism=100)
    created_by: list[float] = []
    for _ in range(60):
        created_by.extend([c.now] * len(jc.step(c.now)))
        c.step()
    # 30 at once (burst), then 20/s: the 100th create lands at 3.5 s.
    assert len(created_by) == 100
    assert created_by[29] == pytest.approx(0.0)
    assert created_by[-1] == pytest.approx(3.5, abs=0.1)


def test_parallelism_caps_active_pods(quiet: ModelParams) -> None:
    c = Cluster(quiet, 1, np.random.default_rng(0))
    jc = JobController(quiet, c)
    job = jc.submit("bpi", BPI_2000, completions=10, parallelism=3)
    for _ in range(20):
        jc.step(c.now)
        c.step()
    assert job.created == 3


def test_job_completes_only_after_its_finalizers_are_removed(quiet: ModelParams) -> None:
    params = dataclasses.replace(quiet, controller_qps=2.0, controller_burst=1.0)
    c = Cluster(params, 1, np.random.default_rng(0))
    jc = JobController(params, c)
    job = jc.submit("bpi", BPI_2000, completions=4, parallelism=4)
    last_success = 0.0
    for _ in range(600):
        for pod in jc.step(c.now):
            c.bind(pod, 0, startup=0.0)
        for pod in c.step().succeeded:
            jc.pod_succeeded(int(pod))
            last_success = c.now
        if jc.done:
            break
    assert job.complete_at is not None and job.counted == 4
    # At 2 calls/s the 4 finalizer patches and 2 status updates take >= 2.5 s after the
    # last pod reported (tokens are spent one per call).
    assert job.complete_at >= last_success + 2.0
    assert jc.api_calls >= 4 + 4 + 2


def test_rejects_empty_jobs(quiet: ModelParams) -> None:
    jc = JobController(quiet, Cluster(quiet, 1, np.random.default_rng(0)))
    with pytest.raises(ValueError):
        jc.submit("x", BPI_2000, completions=0, parallelism=1)
