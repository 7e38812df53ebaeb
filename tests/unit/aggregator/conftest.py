"""Helpers for the aggregator's unit tests: real factors built from random telemetry batches."""

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from carico.model import SubspaceModel
from protos.carico.v1 import aggregator_pb2, capacity_pb2

FEATURES = ("cpu", "memory")

MakeLocal = Callable[..., aggregator_pb2.LocalModel]


def local_model(
    node: str,
    batch: np.ndarray,
    *,
    sequence: int = 1,
    timestamp: float = 1000.0,
    weight: int = 1,
    costs: tuple[float, ...] = (),
    features: tuple[str, ...] | None = None,
    classes: Sequence[capacity_pb2.ClassFootprint] = (),
) -> aggregator_pb2.LocalModel:
    """The message an agent would send for the model of ``batch`` (d×b, values in [0,1])."""
    model = SubspaceModel.from_batch(batch)
    u, sigma = model.to_arrays()
    d, r = u.shape
    names = (
        features
        if features is not None
        else (FEATURES if d == 2 else tuple(f"f{i}" for i in range(d)))
    )
    return aggregator_pb2.LocalModel(
        node=node,
        sequence=sequence,
        timestamp=timestamp,
        weight=weight,
        per_pod_costs=list(costs),
        class_footprints=list(classes),
        model=aggregator_pb2.SubspaceFactor(
            d=d, r=r, u=u.ravel().tolist(), sigma=sigma.tolist(), feature_names=list(names)
        ),
    )


def learned(
    name: str,
    cpu: float,
    memory: float,
    request_cpu: float = 0.0,
    request_memory: float = 0.0,
    source: str = "learned",
) -> capacity_pb2.ClassFootprint:
    """A class footprint as an agent reports one it learned."""
    return capacity_pb2.ClassFootprint(
        workload_class=name,
        cpu_cores=cpu,
        memory_bytes=memory,
        source=source,
        samples=12,
        request_cpu_cores=request_cpu,
        request_memory_bytes=request_memory,
    )


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)


@pytest.fixture
def make_local() -> MakeLocal:
    return local_model
