"""Builders for the pure extender modules: capacity reports and pods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from protos.carico.v1 import capacity_pb2

MakeReport = Callable[..., capacity_pb2.NodeCapacity]


def _report(
    node: str, avail: float, *, sequence: int = 1, timestamp: float = 1.7e9, **fields: Any
) -> capacity_pb2.NodeCapacity:
    values: dict[str, Any] = {
        "k": 0.5,
        "capacity": 2.0,
        "per_pod_cost": 0.1,
        "pods": 4,
        "mode": capacity_pb2.CAPACITY_MODE_LIVE,
    }
    values.update(fields)
    return capacity_pb2.NodeCapacity(
        node=node, avail=avail, sequence=sequence, timestamp=timestamp, **values
    )


@pytest.fixture
def make_report() -> MakeReport:
    return _report
