"""What one sender can do to the fleet's model and priors, over real gRPC (one process and two
worker processes): a node is one node, a child aggregator stands for at most the nodes it may,
and costs absurd for the fleet are refused. Without these, one message moved the published median
per-pod cost from 0.1 to 1,000,000."""

import grpc
import numpy as np
import pytest

WORKERS = pytest.mark.parametrize("workers", [1, 2], ids=["1-process", "2-workers"])
FLEET = 20  # honest nodes, each with a per-pod cost near 0.1


async def _fleet(agg, make_local, rng) -> None:  # type: ignore[no-untyped-def]
    stub = agg.stub()
    for i in range(FLEET):
        cost = 0.1 * (1 + 0.01 * i)
        await stub.Exchange(make_local(f"n{i}", rng.uniform(size=(2, 6)), costs=(cost,)), timeout=5)
    served = await agg.wait_recomputed(FLEET)
    assert served.priors.nodes_with_cost == FLEET
    assert served.priors.median_per_pod_cost == pytest.approx(0.1095)


async def _refused(agg, message) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await agg.stub().Exchange(message, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return info.value.details() or ""


@WORKERS
async def test_a_sender_that_is_no_child_aggregator_is_one_node(
    start_aggregator, workers, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers, max_message_bytes=2 << 20)
    await _fleet(agg, make_local, rng)
    before = agg.service.served()
    # The message of the probe: valid in every other way, standing for a million nodes.
    flood = make_local("intruder", rng.uniform(size=(2, 6)), costs=(1e6,) * 100_000)
    flood.weight = 1_000_000
    assert "a node is one node" in await _refused(agg, flood)
    lone = make_local("intruder", rng.uniform(size=(2, 6)))
    lone.weight = 2
    assert "not a child aggregator" in await _refused(agg, lone)
    # One node's absurd cost is refused too: a million times the fleet's median.
    absurd = make_local("n0", rng.uniform(size=(2, 6)), sequence=2, timestamp=1001, costs=(1e5,))
    assert "absurd for this fleet" in await _refused(agg, absurd)
    tiny = make_local("n0", rng.uniform(size=(2, 6)), sequence=2, timestamp=1001, costs=(1e-6,))
    assert "absurd for this fleet" in await _refused(agg, tiny)
    served = await agg.wait_recomputed(FLEET)
    assert served.priors.median_per_pod_cost == before.priors.median_per_pod_cost
    assert served.contributing_nodes == FLEET
    # An honest change within the band is taken.
    moved = make_local("n0", rng.uniform(size=(2, 6)), sequence=3, timestamp=1002, costs=(3.0,))
    await agg.stub().Exchange(moved, timeout=5)
    assert (await agg.outcomes(FLEET + 5))["accepted"] == FLEET + 1


@WORKERS
async def test_a_child_aggregator_stands_for_at_most_its_bound(
    start_aggregator, workers, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    from aggregator.validate import SenderPolicy

    policy = SenderPolicy(frozenset({"child-a"}), max_child_weight=50)
    agg = await start_aggregator(workers=workers, policy=policy)
    await _fleet(agg, make_local, rng)
    too_many = make_local("child-a", rng.uniform(size=(2, 6)), costs=(0.2,) * 51)
    too_many.weight = 51
    assert "above --max-child-weight 50" in await _refused(agg, too_many)
    more_costs = make_local("child-a", rng.uniform(size=(2, 6)), costs=(0.2,) * 11)
    more_costs.weight = 10
    assert "11 per-pod costs for a model standing for 10" in await _refused(agg, more_costs)
    absurd = make_local("child-a", rng.uniform(size=(2, 6)), costs=(0.2,) * 9 + (500.0,))
    absurd.weight = 10
    assert "absurd for this fleet" in await _refused(agg, absurd)
    honest = make_local("child-a", rng.uniform(size=(2, 6)), costs=(0.2,) * 30)
    honest.weight = 50
    await agg.stub().Exchange(honest, timeout=5)
    served = await agg.wait_recomputed(FLEET + 1)
    # 50 nodes of cost 0.2 against 20 near 0.1: the median moves, as far as the child's honest
    # share of the fleet moves it, and no further.
    assert served.contributing_nodes == FLEET + 50
    assert served.priors.nodes_with_cost == FLEET + 30
    assert served.priors.median_per_pod_cost == pytest.approx(0.2)
    assert np.isfinite(served.priors.median_per_pod_cost)
