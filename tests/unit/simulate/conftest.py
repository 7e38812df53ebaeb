"""Fixtures for the simulator's unit tests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from carico_app.simulate.cluster import Cluster
from carico_app.simulate.params import ModelParams, NodeParams


@pytest.fixture
def quiet() -> ModelParams:
    """Parameters with the side effects switched off, so maths can be checked by hand:
    no bursts, no background load, no contention overhead, no noise, no memory baseline."""
    node = dataclasses.replace(NodeParams(), base_cpu_threads=0.0, base_memory=0.0)
    return dataclasses.replace(
        ModelParams(),
        node=node,
        burst_cores=0.0,
        contention_overhead=0.0,
        noise_util=0.0,
        noise_psi=0.0,
        noise_mem=0.0,
    )


@pytest.fixture
def make_cluster():  # type: ignore[no-untyped-def]
    def make(params: ModelParams, nodes: int = 1, seed: int = 0) -> Cluster:
        return Cluster(params, nodes, np.random.default_rng(seed))

    return make
