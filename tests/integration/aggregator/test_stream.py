"""``ExchangeStream`` on real servers (one process, and worker processes) with real clients: the
same global model as unary ``Exchange``, exactly one reply per message, a refused model ends the
stream with the unary call's status and leaves the state alone, the metrics count every message,
the size and concurrency limits hold, ``carico_aggregator_streams`` tells the streams open, and
stopping the server ends the streams with UNAVAILABLE."""

import asyncio
import math

import grpc
import numpy as np
import pytest

from aggregator.grpc_server import OpenStreams, start_grpc_server, stop_grpc_server
from aggregator.metrics import AggregatorMetrics
from aggregator.service import AggregatorConfig, AggregatorService
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc

NODES = 24
# Separate connections, so that with worker processes (SO_REUSEPORT spreads connections, not
# streams) both workers serve streams: all 24 landing on one of 2 workers has probability 2^-23.
CONNECTIONS = 24
STREAM_METHOD = "/carico.v1.Aggregator/ExchangeStream"


def _channels(address: str, n: int = CONNECTIONS) -> list[grpc.aio.Channel]:
    # A local subchannel pool per channel: a connection of its own, not one shared by all.
    return [
        grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(n)
    ]


async def _close(channels: list[grpc.aio.Channel]) -> None:
    for channel in channels:
        await channel.close()


async def _status(call: grpc.aio.Call) -> tuple[grpc.StatusCode, str]:
    return await call.code(), await call.details()


def _open_streams(service: AggregatorService) -> float | None:
    """``carico_aggregator_streams`` as scraped."""
    return service.metrics.registry.get_sample_value("carico_aggregator_streams")


async def _until_open_streams(service: AggregatorService, n: int) -> None:
    # Workers report their counts every 20 ms; the bound only guards against a hang.
    deadline = asyncio.get_running_loop().time() + 10.0
    while _open_streams(service) != n:
        assert asyncio.get_running_loop().time() < deadline, _open_streams(service)
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("workers", [1, 2])
async def test_streams_give_the_same_global_model_as_unary_calls(
    start_aggregator, make_local, moment_of, rng, workers
) -> None:  # type: ignore[no-untyped-def]
    batches = rng.uniform(size=(NODES, 2, 6))
    costs = rng.uniform(0.01, 0.2, size=NODES)
    models = [
        make_local(f"n{i}", batches[i], costs=(float(costs[i]),), timestamp=1000.0)
        for i in range(NODES)
    ]
    unary = await start_aggregator(name="agg", workers=workers)
    streamed = await start_aggregator(name="agg", workers=workers)
    stub = unary.stub()
    for model in models:
        await stub.Exchange(model, timeout=5)
    channels = _channels(streamed.address)
    try:
        calls = [
            aggregator_pb2_grpc.AggregatorStub(channels[i % CONNECTIONS]).ExchangeStream()
            for i in range(NODES)
        ]
        for call, model in zip(calls, models, strict=True):
            await call.write(model)
            reply = await call.read()
            assert isinstance(reply, aggregator_pb2.GlobalModel) and reply.aggregator == "agg"
        by_unary = await unary.wait_recomputed(NODES)
        by_stream = await streamed.wait_recomputed(NODES)
        # The next round on the open streams is answered with that model.
        for i, call in enumerate(calls):
            newer = make_local(f"n{i}", batches[i], costs=(float(costs[i]),), timestamp=1001.0)
            await call.write(newer)
            reply = await call.read()
            assert isinstance(reply, aggregator_pb2.GlobalModel)
            assert reply.contributing_nodes == NODES
            np.testing.assert_allclose(moment_of(reply), moment_of(by_unary), atol=1e-12)
        for call in calls:
            await call.done_writing()
            assert await call.read() == grpc.aio.EOF  # the client closed its side: ends OK
            assert await call.code() == grpc.StatusCode.OK
    finally:
        await _close(channels)
    assert by_stream.contributing_nodes == by_unary.contributing_nodes == NODES
    np.testing.assert_allclose(moment_of(by_stream), moment_of(by_unary), atol=1e-12)
    mean = np.mean([b @ b.T / b.shape[1] for b in batches], axis=0)
    np.testing.assert_allclose(moment_of(by_stream), mean, atol=1e-12)
    assert by_stream.priors.median_per_pod_cost == pytest.approx(float(np.median(costs)))
    assert by_stream.priors == by_unary.priors
    if workers > 1:
        assert streamed.merger is not None
        served = streamed.service.metrics.worker_totals.calls()
        assert len(served) == 2 and min(served.values()) > 0, served  # both workers streamed


@pytest.mark.parametrize("workers", [1, 2])
async def test_every_message_gets_exactly_one_reply_and_is_counted(
    start_aggregator, make_local, rng, workers
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers, feature_names=("cpu", "memory"))
    sent = 20
    batches = rng.uniform(size=(sent, 2, 5))
    call = agg.stub().ExchangeStream()
    # All written before any is read: the replies still come one per message, in order.
    for k in range(sent):
        await call.write(make_local("node-a", batches[k], sequence=k + 1, timestamp=1000.0 + k))
    await call.done_writing()
    replies = []
    while (reply := await call.read()) != grpc.aio.EOF:
        replies.append(reply)
    assert await call.code() == grpc.StatusCode.OK
    assert len(replies) == sent
    versions = [r.version for r in replies]
    assert versions == sorted(versions)  # answered in the order sent
    outcomes = await agg.outcomes(sent)  # one latency observation per message, no more
    assert outcomes == {
        "accepted": sent,
        "stale": 0,
        "invalid": 0,
        "over_capacity": 0,
        "too_large": 0,
    }
    await agg.wait_recomputed(1)
    assert agg.service.store.get("node-a").sequence == sent


def _bad_inputs(make_local, rng):  # type: ignore[no-untyped-def]
    nan = make_local("node-a", rng.uniform(size=(2, 5)), sequence=5, timestamp=2000.0)
    nan.model.u[0] = math.nan
    other = make_local("node-a", rng.uniform(size=(2, 5)), sequence=5, timestamp=2000.0)
    other.model.feature_names[:] = ["cpu", "io"]
    return [
        (nan.SerializeToString(), "node-a: U contains NaN or inf"),
        (other.SerializeToString(), "feature"),
        (b"\xff\xff\xff", "not a carico.v1.LocalModel"),
    ]


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_bad_model_ends_the_stream_with_invalid_argument_and_changes_nothing(
    start_aggregator, make_local, rng, workers
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers, feature_names=("cpu", "memory"))
    good = make_local("node-a", rng.uniform(size=(2, 5)), sequence=1, timestamp=1000.0)
    channels = _channels(agg.address, 1)
    # Raw bytes in and out, so that bytes that are no LocalModel at all can be sent too.
    stream = channels[0].stream_stream(STREAM_METHOD)
    bad = _bad_inputs(make_local, rng)
    try:
        for raw, problem in bad:
            call = stream()
            await call.write(good.SerializeToString())
            first = aggregator_pb2.GlobalModel.FromString(await call.read())
            await agg.wait_recomputed(1)
            before = agg.service.served()
            await call.write(raw)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call.read()
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert problem in info.value.details()
            assert first.aggregator == "agg"
            # The state is the one before the bad model: the good model of the same node stays.
            assert agg.service.store.get("node-a").sequence == 1
            assert agg.service.served() == before
    finally:
        await _close(channels)
    # Each bad message counted once as invalid, each good one once (the first accepted, the
    # repeats stale: not newer than the one held).
    outcomes = await agg.outcomes(2 * len(bad))
    assert outcomes == {
        "accepted": 1,
        "stale": len(bad) - 1,
        "invalid": len(bad),
        "over_capacity": 0,
        "too_large": 0,
    }


async def test_an_oversized_message_ends_the_stream_with_resource_exhausted(
    start_aggregator, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(max_message_bytes=300)
    call = agg.stub().ExchangeStream()
    await call.write(make_local("node-a", rng.uniform(size=(2, 5))))
    assert isinstance(await call.read(), aggregator_pb2.GlobalModel)
    big = make_local("node-a", rng.uniform(size=(2, 5)), sequence=2, timestamp=1001.0)
    big.per_pod_costs.extend([0.1] * 100)  # 800 bytes more than the limit allows
    await call.write(big)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert agg.service.store.get("node-a").sequence == 1


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_stream_whose_first_message_is_too_large_is_counted(
    start_aggregator, make_local, rng, workers
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(max_message_bytes=300, workers=workers)
    big = make_local("node-a", rng.uniform(size=(2, 5)))
    big.per_pod_costs.extend([0.1] * 100)
    call = agg.stub().ExchangeStream()
    await call.write(big)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await agg.refused_too_large(1)
    assert len(agg.service.store) == 0


async def test_max_concurrent_rpcs_counts_open_streams(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    service = AggregatorService(AggregatorConfig(name="agg"), AggregatorMetrics())
    await service.start()
    server, port = await start_grpc_server(service, "127.0.0.1:0", max_concurrent_rpcs=1)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = aggregator_pb2_grpc.AggregatorStub(channel)
            first = stub.ExchangeStream()
            await first.write(make_local("node-a", rng.uniform(size=(2, 5))))
            assert isinstance(await first.read(), aggregator_pb2.GlobalModel)
            # The open stream holds the one slot: another stream, or a call, is refused at once.
            # The refusal answers the stream's opening, so nothing is written on it: a message
            # that crosses the refusal on the wire can make gRPC end the stream INTERNAL instead
            # (1 run in 300 did; none in 1800 without the write). An agent counts either as a
            # failed exchange and backs off.
            second = stub.ExchangeStream()
            # (a stream that was let in would wait for more: the timeout makes that fail fast)
            code = await asyncio.wait_for(second.code(), 10)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Exchange(make_local("node-c", rng.uniform(size=(2, 5))), timeout=5)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # Once the stream is closed the slot is free again.
            await first.done_writing()
            assert await first.read() == grpc.aio.EOF
            await stub.Exchange(make_local("node-c", rng.uniform(size=(2, 5))), timeout=5)
    finally:
        await server.stop(None)
        await service.stop()
    assert sorted(e.node for e in service.store.entries()) == ["node-a", "node-c"]


async def test_stopping_the_server_ends_open_streams_with_unavailable(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    service = AggregatorService(AggregatorConfig(name="agg"), AggregatorMetrics())
    await service.start()
    streams = OpenStreams()
    server, port = await start_grpc_server(service, "127.0.0.1:0", streams=streams)
    channels = _channels(f"127.0.0.1:{port}", 3)
    try:
        calls = [aggregator_pb2_grpc.AggregatorStub(c).ExchangeStream() for c in channels]
        for i, call in enumerate(calls):
            await call.write(make_local(f"n{i}", rng.uniform(size=(2, 5))))
            assert isinstance(await call.read(), aggregator_pb2.GlobalModel)
        assert _open_streams(service) == 3
        # A grace far longer than the test may take: the idle streams must end at once, not
        # when it runs out (the bound below only guards against a hang).
        await asyncio.wait_for(stop_grpc_server(server, streams, 600.0), 60.0)
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call.read()
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert info.value.details() == "the aggregator is stopping"
        assert _open_streams(service) == 0
    finally:
        await _close(channels)
        await service.stop()
    assert len(service.store) == 3  # what was sent before the stop was kept


async def test_stopping_the_workers_ends_open_streams_with_unavailable(
    start_aggregator, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=2)
    assert agg.merger is not None
    channels = _channels(agg.address)
    try:
        calls = [aggregator_pb2_grpc.AggregatorStub(c).ExchangeStream() for c in channels]
        for i, call in enumerate(calls):
            await call.write(make_local(f"n{i}", rng.uniform(size=(2, 5))))
            assert isinstance(await call.read(), aggregator_pb2.GlobalModel)
        await _until_open_streams(agg.service, CONNECTIONS)  # the sum over both workers
        await agg.merger.stop()
        for call in calls:
            assert await _status(call) == (
                grpc.StatusCode.UNAVAILABLE,
                "the aggregator is stopping",
            )
    finally:
        await _close(channels)
    assert len(agg.service.store) == CONNECTIONS  # every model reached the store before the end
    assert _open_streams(agg.service) == 0  # the workers' last reports: no stream left open
