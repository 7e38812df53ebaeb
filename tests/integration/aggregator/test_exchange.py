"""Exchange over real gRPC on loopback: merge correctness, latest-per-node, TTL, bad input,
message limits, concurrent clients and metrics."""

import asyncio
import math

import aiohttp
import grpc
import numpy as np
import pytest

from carico.http_ops import start_ops_server
from protos.carico.v1 import aggregator_pb2

# The tests marked so run against one process and against a merger with two worker processes.
WORKERS = pytest.mark.parametrize("workers", [1, 2], ids=["1-process", "2-workers"])

# Sums of a few hundred products of numbers in [0,1] plus one d×d eigendecomposition: float64
# rounding stays around 1e-15; 1e-12 leaves room but catches any real mixing error.
ATOL = 1e-12


def _moment(batch: np.ndarray) -> np.ndarray:
    return batch @ batch.T / batch.shape[1]


@WORKERS
async def test_the_first_reply_is_immediate_and_empty_then_the_mean_arrives(
    start_aggregator, workers, make_local, moment_of, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers)
    stub = agg.stub()
    batch = rng.uniform(size=(2, 10))
    first = await stub.Exchange(make_local("n1", batch), timeout=5)
    # The call answered with the view from before it was folded in: nothing yet.
    assert not first.has_model and first.aggregator == "agg"
    await agg.wait_recomputed(1)
    second = await stub.Exchange(make_local("n1", batch, sequence=2, timestamp=1001), timeout=5)
    assert second.has_model and second.contributing_nodes == 1 and second.version > first.version
    np.testing.assert_allclose(moment_of(second), _moment(batch), atol=ATOL)


@WORKERS
async def test_many_nodes_merge_to_the_numpy_mean(
    start_aggregator, workers, make_local, moment_of, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers)
    stub = agg.stub()
    batches = {f"node-{i}": rng.uniform(size=(2, 10)) * rng.uniform(0.2, 1.0) for i in range(300)}
    costs = {node: float(rng.uniform(0.05, 0.5)) for node in list(batches)[:101]}
    await asyncio.gather(
        *(
            stub.Exchange(make_local(n, b, costs=(costs[n],) if n in costs else ()), timeout=10)
            for n, b in batches.items()
        )
    )
    served = await agg.wait_recomputed(300)
    expected = np.mean([_moment(b) for b in batches.values()], axis=0)
    np.testing.assert_allclose(moment_of(served), expected, atol=ATOL)
    assert served.contributing_nodes == 300
    assert served.priors.has_per_pod_cost and served.priors.nodes_with_cost == 101
    assert served.priors.median_per_pod_cost == pytest.approx(
        float(np.median(list(costs.values())))
    )
    reply = await stub.Exchange(make_local("node-0", batches["node-0"], sequence=2), timeout=5)
    assert reply.model.feature_names == ["cpu", "memory"] and reply.model.d == 2


async def test_a_chatty_node_does_not_outweigh_the_others(
    start_aggregator, make_local, moment_of, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator()
    stub = agg.stub()
    quiet = rng.uniform(size=(2, 10))
    await stub.Exchange(make_local("quiet", quiet), timeout=5)
    heavy = np.full((2, 10), 0.95)
    for seq in range(1, 51):
        await stub.Exchange(
            make_local("chatty", heavy, sequence=seq, timestamp=1000 + seq), timeout=5
        )
    served = await agg.wait_recomputed(2)
    np.testing.assert_allclose(moment_of(served), (_moment(quiet) + _moment(heavy)) / 2, atol=ATOL)
    assert served.contributing_nodes == 2


async def test_nodes_silent_past_the_ttl_drop_out(
    start_aggregator, make_local, moment_of, rng, fake_clock
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(clock=fake_clock, ttl=30.0)
    stub = agg.stub()
    a, b = rng.uniform(size=(2, 5)), rng.uniform(size=(2, 5))
    await stub.Exchange(make_local("a", a), timeout=5)
    fake_clock.now += 20
    await stub.Exchange(make_local("b", b), timeout=5)
    assert (await agg.wait_recomputed(2)).contributing_nodes == 2
    fake_clock.now += 15  # a is 35 s old, b 15 s
    assert agg.service.expire() == ["a"]
    served = agg.service.served()
    assert served.contributing_nodes == 1
    np.testing.assert_allclose(moment_of(served), _moment(b), atol=ATOL)
    fake_clock.now += 30
    assert agg.service.expire() == ["b"]
    assert not agg.service.served().has_model


async def test_the_expiry_task_runs_by_itself(
    start_aggregator, make_local, rng, fake_clock
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(clock=fake_clock, ttl=5.0, expire_interval=0.01)
    await agg.stub().Exchange(make_local("a", rng.uniform(size=(2, 5))), timeout=5)
    await agg.wait_recomputed(1)
    fake_clock.now += 6
    await agg.wait_recomputed(0)
    assert not agg.service.served().has_model


def _bad_messages(make_local, rng) -> list[tuple[str, aggregator_pb2.LocalModel, str]]:  # type: ignore[no-untyped-def]
    def variant(**changes):  # type: ignore[no-untyped-def]
        m = make_local("good-node", rng.uniform(size=(2, 8)), sequence=99, timestamp=5000.0)
        for key, value in changes.items():
            target = m.model if key in {"d", "r", "u", "sigma", "feature_names"} else m
            if isinstance(value, list):
                getattr(target, key)[:] = value
            else:
                setattr(target, key, value)
        return m

    ok = variant()
    u = list(ok.model.u)
    return [
        ("node name", variant(node="Not_A_Node"), "DNS-1123"),
        ("dimensions", variant(d=3), "d=3 but 2 feature names"),
        ("u length", variant(u=u[:3]), "U has 3 values"),
        ("feature names", variant(feature_names=["cpu", "io"]), "differs from this aggregator"),
        ("NaN", variant(u=[math.nan, *u[1:]]), "NaN or inf"),
        ("inf", variant(sigma=[math.inf, 0.1]), "NaN or inf"),
        ("orthonormality", variant(u=[x * 1.1 for x in u]), "not orthonormal"),
        ("sigma order", variant(sigma=list(reversed(ok.model.sigma))), "descending"),
        ("sigma range", variant(sigma=[1.6, 0.1]), "exceeds sqrt"),
        ("weight", variant(weight=10**7), "weight"),
        ("costs", variant(per_pod_costs=[-0.1]), "per-pod cost"),
    ]


@WORKERS
async def test_every_bad_input_class_gets_invalid_argument_and_changes_nothing(
    start_aggregator, workers, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers)
    stub = agg.stub()
    await stub.Exchange(make_local("good-node", rng.uniform(size=(2, 8))), timeout=5)
    await agg.wait_recomputed(1)
    reply_before, entry_before = agg.service.reply, agg.service.store.get("good-node")
    for label, message, reason in _bad_messages(make_local, rng):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Exchange(message, timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, label
        assert reason in (info.value.details() or ""), (label, info.value.details())
    assert agg.service.reply == reply_before
    assert agg.service.store.get("good-node") == entry_before and len(agg.service.store) == 1
    assert not agg.service.store.dirty
    bad = len(_bad_messages(make_local, rng))
    assert (await agg.outcomes(1 + bad)) == {
        "accepted": 1,
        "stale": 0,
        "invalid": bad,
        "over_capacity": 0,
        "too_large": 0,
    }


@WORKERS
async def test_bytes_that_are_not_a_model_are_invalid_argument(start_aggregator, workers) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers)
    async with grpc.aio.insecure_channel(agg.address) as channel:
        raw = channel.unary_unary("/carico.v1.Aggregator/Exchange")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await raw(b"\xff\xff\xff\xff", timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a carico.v1.LocalModel" in (info.value.details() or "")


@WORKERS
async def test_oversized_messages_are_refused_by_the_size_limit(
    start_aggregator, workers, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers, max_message_bytes=4096)
    message = make_local("big", rng.uniform(size=(2, 8)))
    message.per_pod_costs[:] = [0.1] * 1000  # ~8 kB
    for _ in range(3):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await agg.stub().Exchange(message, timeout=5)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(agg.service.store) == 0
    # Counted like every other outcome (no latency: no message was handled).
    await agg.refused_too_large(3)
    await agg.stub().Exchange(make_local("small", rng.uniform(size=(2, 8))), timeout=5)
    assert await agg.outcomes(1) == {
        "accepted": 1,
        "stale": 0,
        "invalid": 0,
        "over_capacity": 0,
        "too_large": 3,
    }


@WORKERS
async def test_new_senders_beyond_the_limit_are_refused(
    start_aggregator, workers, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers, max_senders=2)
    stub = agg.stub()
    for node in ("a", "b"):
        await stub.Exchange(make_local(node, rng.uniform(size=(2, 4))), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Exchange(make_local("c", rng.uniform(size=(2, 4))), timeout=5)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Known senders still get through.
    await stub.Exchange(make_local("a", rng.uniform(size=(2, 4)), sequence=2), timeout=5)
    assert sorted(e.node for e in agg.service.store.entries()) == ["a", "b"]


@WORKERS
async def test_concurrent_clients_each_keep_their_latest(
    start_aggregator, workers, make_local, moment_of, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers)
    n_clients, rounds = 16, 20
    batches = rng.uniform(size=(n_clients, rounds, 2, 6))

    async def client(i: int) -> None:
        stub = agg.stub()
        for k in range(rounds):
            reply = await stub.Exchange(
                make_local(f"c{i}", batches[i, k], sequence=k + 1, timestamp=1000 + k), timeout=10
            )
            assert reply.aggregator == "agg"

    await asyncio.gather(*(client(i) for i in range(n_clients)))
    # All calls counted: with workers, every model has reached the merger by then.
    assert (await agg.outcomes(n_clients * rounds))["accepted"] == n_clients * rounds
    served = await agg.wait_recomputed(n_clients)
    expected = np.mean([_moment(batches[i, rounds - 1]) for i in range(n_clients)], axis=0)
    np.testing.assert_allclose(moment_of(served), expected, atol=ATOL)


@WORKERS
async def test_metrics_and_health_on_the_ops_endpoint(
    start_aggregator, workers, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers)
    stub = agg.stub()
    for node in ("a", "b", "c"):
        await stub.Exchange(make_local(node, rng.uniform(size=(2, 4))), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Exchange(make_local("Bad", rng.uniform(size=(2, 4))), timeout=5)
    await agg.wait_recomputed(3)
    await agg.outcomes(4)  # workers report their counts every few tens of milliseconds
    ops = await start_ops_server("127.0.0.1", 0, agg.service.metrics.registry)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{ops.port}/metrics") as resp:
                text = await resp.text()
            async with http.get(f"http://127.0.0.1:{ops.port}/healthz") as resp:
                assert resp.status == 200
    finally:
        await ops.close()
    assert "carico_aggregator_nodes_contributing 3.0" in text
    assert 'carico_aggregator_exchanges_total{outcome="accepted"} 3.0' in text
    assert 'carico_aggregator_exchanges_total{outcome="invalid"} 1.0' in text
    assert "carico_aggregator_exchange_latency_seconds_count 4.0" in text
    if workers > 1:  # the counts above are sums over the worker processes
        assert f"carico_aggregator_workers {float(workers)}" in text
    age = next(
        line
        for line in text.splitlines()
        if line.startswith("carico_aggregator_global_model_age_seconds")
    )
    assert 0.0 <= float(age.split()[-1]) < 3600


@WORKERS
async def test_a_configured_feature_set_refuses_others_even_when_empty(
    start_aggregator, workers, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers, feature_names=("cpu", "memory"))
    stub = agg.stub()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Exchange(
            make_local("n1", rng.uniform(size=(2, 4)), features=("cpu", "io")), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "['cpu', 'io'] differs from this aggregator's ['cpu', 'memory']" in (
        info.value.details() or ""
    )
    await stub.Exchange(make_local("n2", rng.uniform(size=(2, 4))), timeout=5)
    await agg.wait_recomputed(1)
    assert [e.node for e in agg.service.store.entries()] == ["n2"]
