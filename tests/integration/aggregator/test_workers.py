"""The multi-process aggregator (a merger and worker processes on one port): a node whose calls
land on different workers is one node, every worker validates, metrics add up over the workers,
a crashed worker is replaced or fails the service, and stopping leaves no process behind."""

import asyncio
import json
import math
import os
import signal
from pathlib import Path

import grpc
import numpy as np
import pytest

from aggregator.merger import Merger
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from aggregator.worker import WorkerConfig
from protos.carico.v1 import aggregator_pb2_grpc

# SO_REUSEPORT spreads connections over the workers by a hash of their addresses: with 24
# connections and 2 workers, all landing on one worker has probability 2^-23.
CONNECTIONS = 24


def _separate_stubs(
    address: str,
) -> tuple[list[grpc.aio.Channel], list[aggregator_pb2_grpc.AggregatorStub]]:
    # A local subchannel pool per channel: a connection of its own, not one shared by all.
    channels = [
        grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(CONNECTIONS)
    ]
    return channels, [aggregator_pb2_grpc.AggregatorStub(c) for c in channels]


def _moment(batch: np.ndarray) -> np.ndarray:
    return batch @ batch.T / batch.shape[1]


async def test_a_node_switching_workers_is_one_node_and_metrics_sum_over_workers(
    start_aggregator, make_local, moment_of, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=2, feature_names=("cpu", "memory"))
    assert agg.merger is not None
    channels, stubs = _separate_stubs(agg.address)
    try:
        batches = rng.uniform(size=(CONNECTIONS, 2, 6))
        for k, stub in enumerate(stubs):  # one node, a new connection for every report
            await stub.Exchange(
                make_local("roamer", batches[k], sequence=k + 1, timestamp=1000.0 + k), timeout=5
            )
        # Every call counted means every model has reached the merger (a worker sends its
        # models before the counts that include them); then the recompute of them all.
        outcomes = await agg.outcomes(CONNECTIONS)
        served = await agg.wait_recomputed(1)
    finally:
        for channel in channels:
            await channel.close()
    calls = agg.service.metrics.worker_totals.calls()
    assert sorted(calls) == [0, 1] and min(calls.values()) > 0, calls  # both workers served
    assert sum(calls.values()) == CONNECTIONS
    # Exactly one node, holding its latest report, whichever worker each report came through
    # (a report overtaken by a later one through the other worker is stale, not a second node).
    assert served.contributing_nodes == 1 and len(agg.service.store) == 1
    assert agg.service.store.get("roamer").sequence == CONNECTIONS
    np.testing.assert_allclose(moment_of(served), _moment(batches[-1]), atol=1e-12)
    assert outcomes["accepted"] + outcomes["stale"] == CONNECTIONS and outcomes["accepted"] >= 1
    assert outcomes["invalid"] == outcomes["over_capacity"] == 0


async def test_a_bad_model_through_any_worker_gets_invalid_argument(
    start_aggregator, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    # A configured feature set: the workers decide on their own (no question to the merger).
    agg = await start_aggregator(workers=2, feature_names=("cpu", "memory"))
    reply_before = agg.service.reply
    channels, stubs = _separate_stubs(agg.address)
    try:
        for k, stub in enumerate(stubs):
            bad = make_local(f"n{k}", rng.uniform(size=(2, 6)))
            bad.model.u[0] = math.nan
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Exchange(bad, timeout=5)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"n{k}: U contains NaN or inf" == info.value.details()
        outcomes = await agg.outcomes(CONNECTIONS)
    finally:
        for channel in channels:
            await channel.close()
    calls = agg.service.metrics.worker_totals.calls()
    assert min(calls.values()) > 0 and len(calls) == 2, calls
    assert outcomes == {
        "accepted": 0,
        "stale": 0,
        "invalid": CONNECTIONS,
        "over_capacity": 0,
        "too_large": 0,
    }
    assert len(agg.service.store) == 0 and agg.service.reply == reply_before


def _merger(service: AggregatorService, workers: int = 2, **kwargs: float) -> Merger:
    return Merger(service, "127.0.0.1:0", workers, WorkerConfig(report_interval=0.02), **kwargs)  # type: ignore[arg-type]


async def test_stopping_ends_every_worker_and_writes_the_checkpoint(
    tmp_path: Path, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "ckpt.json"
    service = AggregatorService(
        AggregatorConfig(name="agg", checkpoint_path=path), AggregatorMetrics()
    )
    await service.start()
    merger = _merger(service)
    port = await merger.start()
    processes = merger.processes()
    assert len(processes) == 2 and all(p.is_alive() for p in processes)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        for node in ("a", "b", "c"):
            await stub.Exchange(make_local(node, rng.uniform(size=(2, 4))), timeout=5)
    await merger.stop()
    await service.stop()
    assert [p.exitcode for p in processes] == [0, 0]  # stopped, not killed
    assert not any(p.is_alive() for p in processes)
    saved = json.loads(path.read_text())
    assert sorted(e["node"] for e in saved["entries"]) == ["a", "b", "c"]


@pytest.mark.slow
async def test_a_crashed_worker_is_replaced_and_health_says_so_meanwhile(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    service = AggregatorService(AggregatorConfig(name="agg"), AggregatorMetrics())
    await service.start()
    merger = _merger(service)
    try:
        port = await merger.start()
        assert merger.health() is None
        victim = merger.processes()[0]
        os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]

        async def dead() -> None:
            while victim.is_alive():
                await asyncio.sleep(0.01)

        async def healthy_again() -> None:
            while merger.health() is not None:
                assert not merger.failed.is_set()
                await asyncio.sleep(0.02)

        # Generous deadlines (a worker restarts in well under a second): they turn a hang into a
        # failure that says which step did not happen.
        await asyncio.wait_for(dead(), 10)
        assert merger.health() is not None  # down, or its replacement not serving yet
        await asyncio.wait_for(healthy_again(), 30)
        assert merger.processes()[0].pid != victim.pid
        assert service.metrics.worker_restarts._value.get() == 1
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = aggregator_pb2_grpc.AggregatorStub(channel)
            await stub.Exchange(make_local("after", rng.uniform(size=(2, 4))), timeout=5)
    finally:
        await merger.stop()
        await service.stop()
    assert "after" in service.store


async def test_workers_that_keep_crashing_fail_the_service() -> None:
    service = AggregatorService(AggregatorConfig(name="agg"), AggregatorMetrics())
    await service.start()
    merger = _merger(service, workers=1, max_restarts=0)
    try:
        await merger.start()
        os.kill(merger.processes()[0].pid, signal.SIGKILL)  # type: ignore[arg-type]
        await asyncio.wait_for(merger.failed.wait(), 30)
        assert merger.health() == "worker processes keep failing"
    finally:
        await merger.stop()
        await service.stop()
    assert not merger.processes()[0].is_alive()
