"""The agent's model exchange against the real aggregator on loopback: one long-lived
``ExchangeStream``, unary ``Exchange`` against an aggregator without it (and the stream again once
the aggregator has it), and a new stream after the aggregator stopped and came back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc
import numpy as np

from agent.backoff import Backoff
from agent.grpc_client import ExchangeClient, open_channel
from aggregator.grpc_server import (
    SERVICE_NAME,
    OpenStreams,
    exchange_handler,
    start_grpc_server,
    stop_grpc_server,
)
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from carico.model import SubspaceModel
from protos.carico.v1 import aggregator_pb2

from .conftest import free_port, wait_for

FEATURES = ["cpu", "memory"]


class Agent:
    """An ``ExchangeClient`` with a real model of its own and a record of the replies."""

    def __init__(self, target: str, clock: ManualClock | None = None) -> None:
        self.sequence = 0
        self.replies: list[aggregator_pb2.GlobalModel] = []
        u, sigma = SubspaceModel.from_batch(
            np.random.default_rng(3).uniform(size=(2, 8))
        ).to_arrays()
        self.factor = aggregator_pb2.SubspaceFactor(
            d=2, r=2, u=u.ravel().tolist(), sigma=sigma.tolist(), feature_names=FEATURES
        )
        self.client = ExchangeClient(
            target,
            self.build,
            self.replies.append,
            interval=0.05,
            timeout=2.0,
            backoff=Backoff(initial=0.05, maximum=0.2),
            stream_retry=60.0,
            **({"clock": clock} if clock is not None else {}),
        )

    def build(self) -> aggregator_pb2.LocalModel:
        self.sequence += 1
        return aggregator_pb2.LocalModel(
            node="node-a",
            sequence=self.sequence,
            timestamp=time.time(),
            weight=1,
            model=self.factor,
        )


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def aggregator(
    port: int = 0, *, stream: bool = True
) -> AsyncIterator[tuple[AggregatorService, int, grpc.aio.Server, OpenStreams]]:
    """A real aggregator; ``stream=False`` serves only ``Exchange``, as an older version did."""
    service = AggregatorService(AggregatorConfig(name="agg"), AggregatorMetrics())
    await service.start()
    streams = OpenStreams()
    if stream:
        server, port = await start_grpc_server(service, f"127.0.0.1:{port}", streams=streams)
    else:
        server = grpc.aio.server()
        handlers = {"Exchange": exchange_handler(service)}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),)
        )
        port = server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
    try:
        yield service, port, server, streams
    finally:
        await stop_grpc_server(server, streams, None)
        await service.stop()


def exchanges_counted(service: AggregatorService) -> float:
    registry = service.metrics.registry
    return registry.get_sample_value("carico_aggregator_exchange_latency_seconds_count") or 0.0


@contextlib.asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[None]:
    task = asyncio.create_task(agent.client.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def exchange(agent: Agent, port: int, rounds: int) -> None:
    """``rounds`` exchanges one after the other on one channel, each expected to succeed."""
    channel = open_channel(f"127.0.0.1:{port}", None, 1.0)
    try:
        for _ in range(rounds):
            assert await agent.client.exchange_once(channel)
    finally:
        agent.client.drop_stream()
        await channel.close()


async def test_the_agent_exchanges_over_one_stream() -> None:
    async with aggregator() as (service, port, _, streams):
        agent = Agent(f"127.0.0.1:{port}")
        await exchange(agent, port, 3)
        await wait_for(lambda: not service._wake.is_set() and len(service.store) == 1)
        await exchange(agent, port, 3)
    client = agent.client
    assert client.streams == 2 and client.streaming and client.errors == 0  # one per channel
    # Every exchange counted by the aggregator once, and answered by exactly one reply.
    assert exchanges_counted(service) == client.exchanges == len(agent.replies) == 6
    assert all(r.aggregator == "agg" for r in agent.replies)
    assert not agent.replies[0].has_model and agent.replies[-1].contributing_nodes == 1
    assert service.store.get("node-a").sequence == agent.sequence == 6


async def test_an_aggregator_without_the_stream_gets_unary_calls_until_it_has_one() -> None:
    clock = ManualClock()
    port = free_port()
    async with aggregator(port, stream=False) as (old, _, _, _):
        agent = Agent(f"127.0.0.1:{port}", clock)
        await exchange(agent, port, 4)
        # UNIMPLEMENTED is no error: the same round went over a unary call instead.
        assert not agent.client.streaming and agent.client.errors == 0
        assert agent.client.streams == 1  # the one attempt, not one per round
        assert exchanges_counted(old) == agent.client.exchanges == len(agent.replies) == 4
        assert old.store.get("node-a").sequence == 4
    # The aggregator is upgraded; once stream_retry has passed the agent streams again.
    async with aggregator(port) as (new, _, _, streams):
        await exchange(agent, port, 1)
        assert not agent.client.streaming  # not yet: the retry is 60 s away
        clock.now += 61.0
        await exchange(agent, port, 2)
        assert agent.client.streaming and agent.client.streams == 2
    assert exchanges_counted(new) == 3 and agent.client.errors == 0
    assert new.store.get("node-a").sequence == 7


async def test_a_stopping_aggregator_ends_the_stream_and_the_agent_reconnects() -> None:
    port = free_port()
    agent = Agent(f"127.0.0.1:{port}")
    async with running(agent):
        async with aggregator(port) as (first, _, server, streams):
            await wait_for(lambda: agent.client.exchanges >= 2)
            await stop_grpc_server(server, streams, 5.0)
            assert first.metrics.streams == 0  # ended by the stop, not left to the grace period
            sent = agent.sequence
        async with aggregator(port) as (second, _, _, _):
            await wait_for(lambda: second.store.get("node-a") is not None)
            await wait_for(lambda: exchanges_counted(second) >= 3)
            assert agent.client.streams >= 2 and agent.client.streaming
    assert first.store.get("node-a").sequence <= sent < second.store.get("node-a").sequence
