"""Real aggregators on 127.0.0.1 (port 0) and real gRPC clients for the integration tests.

``start_aggregator(workers=N)`` with N above 1 starts the multi-process layout (a merger in the
test's process, N spawned worker processes serving the port), as ``--workers N`` does."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import pytest

from aggregator.grpc_server import start_grpc_server
from aggregator.merger import Merger
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from aggregator.worker import WorkerConfig
from carico.model import SubspaceModel
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc

FEATURES = ("cpu", "memory")


class FakeClock:
    """A settable clock for TTL tests (the server takes any ``() -> float``)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Running:
    service: AggregatorService
    server: grpc.aio.Server | None
    port: int
    merger: Merger | None = None
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stub(
        self, credentials: grpc.ChannelCredentials | None = None
    ) -> aggregator_pb2_grpc.AggregatorStub:
        channel = (
            grpc.aio.insecure_channel(self.address)
            if credentials is None
            else grpc.aio.secure_channel(self.address, credentials)
        )
        self.channels.append(channel)
        return aggregator_pb2_grpc.AggregatorStub(channel)

    async def wait_recomputed(
        self, senders: int, timeout: float = 10.0
    ) -> aggregator_pb2.GlobalModel:
        """Wait (without asserting on time) until the background recompute has seen ``senders``
        and, with workers, until every worker serves the result."""
        deadline = asyncio.get_running_loop().time() + timeout
        while (
            len(self.service.store) != senders
            or self.service.store.dirty
            or self.service._wake.is_set()
            or (self.merger is not None and not self.merger.in_sync())
        ):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"store never reached {senders} senders")
            await asyncio.sleep(0.005)
        return self.service.served()

    async def outcomes(self, calls: int, timeout: float = 10.0) -> dict[str, float]:
        """Exchange outcomes as scraped, once ``calls`` calls are counted (workers report their
        counts every few tens of milliseconds)."""
        registry = self.service.metrics.registry
        deadline = asyncio.get_running_loop().time() + timeout
        while registry.get_sample_value("carico_aggregator_exchange_latency_seconds_count") != (
            calls
        ):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"never counted {calls} calls")
            await asyncio.sleep(0.01)
        return {
            outcome: registry.get_sample_value(
                "carico_aggregator_exchanges_total", {"outcome": outcome}
            )
            or 0.0
            for outcome in ("accepted", "stale", "invalid", "over_capacity", "too_large")
        }

    async def refused_too_large(self, n: int, timeout: float = 10.0) -> None:
        """Wait until ``n`` messages refused for their size are counted (workers report their
        counts every few tens of milliseconds; the bound only guards against a hang)."""
        registry = self.service.metrics.registry
        deadline = asyncio.get_running_loop().time() + timeout
        while (
            registry.get_sample_value("carico_aggregator_exchanges_total", {"outcome": "too_large"})
            != n
        ):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"never counted {n} messages refused for their size")
            await asyncio.sleep(0.01)


Start = Callable[..., Awaitable[Running]]


@pytest.fixture
async def start_aggregator() -> AsyncIterator[Start]:
    running: list[Running] = []

    async def start(
        name: str = "agg",
        clock: Callable[[], float] | None = None,
        tls: Any = None,
        max_message_bytes: int = 1 << 20,
        workers: int = 1,
        **config: Any,
    ) -> Running:
        service = AggregatorService(
            AggregatorConfig(name=name, **config),
            AggregatorMetrics(),
            **({"clock": clock} if clock is not None else {}),
        )
        await service.start()
        if workers > 1:
            merger = Merger(
                service,
                "127.0.0.1:0",
                workers,
                WorkerConfig(
                    tls=tls,
                    max_message_bytes=max_message_bytes,
                    report_interval=0.02,
                    event_loop="uvloop",  # the command's default
                    policy=service.config.policy,
                ),
            )
            result = Running(service, None, await merger.start(), merger)
        else:
            server, port = await start_grpc_server(
                service, "127.0.0.1:0", tls=tls, max_message_bytes=max_message_bytes
            )
            result = Running(service, server, port)
        running.append(result)
        return result

    yield start
    for r in running:
        for channel in r.channels:
            await channel.close()
        if r.server is not None:
            await r.server.stop(None)
        if r.merger is not None:
            await r.merger.stop()
        await r.service.stop()


def local_model(
    node: str,
    batch: np.ndarray,
    *,
    sequence: int = 1,
    timestamp: float = 1000.0,
    costs: tuple[float, ...] = (),
    features: tuple[str, ...] = FEATURES,
) -> aggregator_pb2.LocalModel:
    model = SubspaceModel.from_batch(batch)
    u, sigma = model.to_arrays()
    return aggregator_pb2.LocalModel(
        node=node,
        sequence=sequence,
        timestamp=timestamp,
        weight=1,
        per_pod_costs=list(costs),
        model=aggregator_pb2.SubspaceFactor(
            d=u.shape[0],
            r=u.shape[1],
            u=u.ravel().tolist(),
            sigma=sigma.tolist(),
            feature_names=list(features),
        ),
    )


def second_moment(reply: aggregator_pb2.GlobalModel) -> np.ndarray:
    f = reply.model
    u = np.array(f.u).reshape(f.d, f.r) * np.array(f.sigma)
    return u @ u.T


@pytest.fixture
def make_local() -> Callable[..., aggregator_pb2.LocalModel]:
    return local_model


@pytest.fixture
def moment_of() -> Callable[[aggregator_pb2.GlobalModel], np.ndarray]:
    return second_moment


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()
