"""Real gRPC servers on loopback with recording test servicers, and a scripted telemetry source."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import grpc
import numpy as np

from agent.telemetry import Sample
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc, capacity_pb2, capacity_pb2_grpc


class RecordingAggregator(aggregator_pb2_grpc.AggregatorServicer):
    """Records every LocalModel and answers with ``reply`` (a test servicer, real gRPC)."""

    def __init__(self, reply: aggregator_pb2.GlobalModel) -> None:
        self.reply = reply
        self.received: list[aggregator_pb2.LocalModel] = []

    async def Exchange(
        self, request: aggregator_pb2.LocalModel, context: grpc.aio.ServicerContext
    ) -> aggregator_pb2.GlobalModel:
        self.received.append(request)
        return self.reply


class RecordingIngest(capacity_pb2_grpc.CapacityIngestServicer):
    """Records every NodeCapacity of every stream."""

    def __init__(self) -> None:
        self.received: list[capacity_pb2.NodeCapacity] = []
        self.streams = 0

    async def Report(
        self, request_iterator: object, context: grpc.aio.ServicerContext
    ) -> capacity_pb2.ReportSummary:
        self.streams += 1
        accepted = 0
        async for message in request_iterator:  # type: ignore[attr-defined]
            self.received.append(message)
            accepted += 1
        return capacity_pb2.ReportSummary(accepted=accepted)


class Server:
    """A grpc.aio server that can be stopped and restarted on the same loopback port."""

    def __init__(self, add: Callable[[grpc.aio.Server], None]) -> None:
        self._add = add
        self.port = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server()
        self._add(server)
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ScriptedSource:
    """Constant telemetry plus seeded noise, with an optional pod count (like the simulator)."""

    feature_names = ("cpu", "memory")

    def __init__(self, y: tuple[float, float] = (0.3, 0.2), pods: int | None = None) -> None:
        self.y = np.array(y)
        self.pods = pods
        self.rng = np.random.default_rng(1)
        self.reads = 0

    def read(self, now: float) -> Sample:
        self.reads += 1
        noise = self.rng.normal(0.0, 0.005, size=2)
        return Sample(np.clip(self.y + noise, 0, 1), psi_available=True, pods=self.pods)


async def cancel_all(tasks: list[asyncio.Task[int]]) -> None:
    """Cancel the agents' tasks and wait until each has finished cancelling."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await t


async def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll ``condition``; the generous timeout only bounds a hang on a loaded machine."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def global_model(names: tuple[str, ...] = ("cpu", "memory")) -> aggregator_pb2.GlobalModel:
    return aggregator_pb2.GlobalModel(
        has_model=True,
        model=aggregator_pb2.SubspaceFactor(
            d=2, r=1, u=[0.6, 0.8], sigma=[0.5], feature_names=list(names)
        ),
        contributing_nodes=3,
        priors=aggregator_pb2.FleetPriors(
            has_per_pod_cost=True, median_per_pod_cost=0.05, nodes_with_cost=2
        ),
        version=1,
        aggregator="agg-test",
    )
