"""The fleet's per-class medians over real gRPC: what two agents learned comes back to a third as
``class_medians`` (one process, and workers in front of a merger), the agent's own reader turns
the reply into those medians, a refused class list refuses the model, and in a tree the parent's
medians count the child's medians as one vote per class and reach the child's nodes."""

import asyncio
import contextlib
import statistics

import grpc
import numpy as np
import pytest

from agent.wire import fleet_from_wire, local_model_message
from aggregator.grpc_client import ParentLink
from aggregator.validate import SenderPolicy
from carico.footprint import ClassFootprint, Footprint
from carico.model import SubspaceModel
from carico.pods import Requests
from protos.carico.v1 import aggregator_pb2

FEATURES = ("cpu", "memory")
GI = 2.0**30
WEB = "shop/Deployment/web"
JOB = "ml/Job/train-7"


def _agent_model(
    node: str, rng: np.random.Generator, classes: list[ClassFootprint], sequence: int = 1
) -> aggregator_pb2.LocalModel:
    """What a real agent sends (the agent's own message builder)."""
    model = SubspaceModel.from_batch(rng.uniform(size=(2, 8)))
    return local_model_message(node, sequence, 1000.0 + sequence, model, FEATURES, None, classes)


NO_REQUESTS = Requests()


def _learned(
    name: str, cpu: float, memory: float, requests: Requests = NO_REQUESTS
) -> ClassFootprint:
    return ClassFootprint(name, Footprint(cpu, memory), "learned", 30, requests)


async def _medians_once_known(stub, node: str, rng, wanted: int):  # type: ignore[no-untyped-def]
    """Exchange as ``node`` until the reply holds ``wanted`` senders' worth of classes (the
    aggregator rebuilds its per-class summary at most once a second; the bound only guards
    against a hang)."""
    for sequence in range(1, 2000):
        reply = await stub.Exchange(_agent_model(node, rng, [], sequence), timeout=5)
        if reply.contributing_nodes == wanted and len(reply.priors.class_medians) == 2:
            medians = {c.workload_class: c for c in reply.priors.class_medians}
            if medians[WEB].cpu_cores != 1.0:  # a's alone, before b's is summarised
                return reply
        await asyncio.sleep(0.01)
    raise AssertionError("the medians of both agents never came back")


@pytest.mark.parametrize("workers", [1, 2])
async def test_two_agents_learned_classes_come_back_to_a_third_as_fleet_medians(
    start_aggregator, rng, workers: int
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers, feature_names=FEATURES)
    stub = agg.stub()
    web_requests = Requests(0.25, 0.5 * GI)
    await stub.Exchange(
        _agent_model(
            "node-a", rng, [_learned(WEB, 1.0, 2 * GI, web_requests), _learned(JOB, 4.0, GI)]
        ),
        timeout=5,
    )
    await stub.Exchange(
        _agent_model("node-b", rng, [_learned(WEB, 2.0, 4 * GI, web_requests)]), timeout=5
    )
    reply = await _medians_once_known(stub, "node-c", rng, 3)

    medians = {c.workload_class: c for c in reply.priors.class_medians}
    assert {c.source for c in medians.values()} == {"fleet"}
    assert (medians[WEB].cpu_cores, medians[WEB].memory_bytes) == (1.5, 3 * GI)
    assert (medians[WEB].request_cpu_cores, medians[WEB].request_memory_bytes) == (0.25, 0.5 * GI)
    assert (medians[JOB].cpu_cores, medians[JOB].request_cpu_cores) == (4.0, 0.0)
    # Only web requests anything: 1.5 / 0.25 cores and 3 GiB / 0.5 GiB.
    assert reply.priors.cpu_request_ratio == pytest.approx(6.0)
    assert reply.priors.memory_request_ratio == pytest.approx(6.0)

    # The agent's reader gives it the medians to resolve classes it has not learned.
    fleet = fleet_from_wire(reply.priors)
    assert fleet.classes == {WEB: Footprint(1.5, 3 * GI), JOB: Footprint(4.0, GI)}
    assert (fleet.cpu_ratio, fleet.memory_ratio) == (pytest.approx(6.0), pytest.approx(6.0))
    assert fleet.typical == Footprint(statistics.median([1.5, 4.0]), 2 * GI)


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_bad_class_refuses_the_model_and_nothing_reaches_the_store(
    start_aggregator, rng, workers: int
) -> None:  # type: ignore[no-untyped-def]
    agg = await start_aggregator(workers=workers, feature_names=FEATURES)
    stub = agg.stub()
    twice = _agent_model("node-a", rng, [_learned(WEB, 1.0, GI), _learned(WEB, 9.0, GI)])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Exchange(twice, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "node-a: class 'shop/Deployment/web' appears more than once"
    absurd = _agent_model("node-a", rng, [_learned(WEB, 1.0, 2e15)])
    with pytest.raises(grpc.aio.AioRpcError, match="memory 2e\\+15 is not in"):
        await stub.Exchange(absurd, timeout=5)
    outcomes = await agg.outcomes(2)
    assert outcomes["invalid"] == 2 and len(agg.service.store) == 0


async def test_a_tree_counts_a_childs_medians_as_one_vote_and_serves_them_to_its_nodes(
    start_aggregator, rng
) -> None:  # type: ignore[no-untyped-def]
    root = await start_aggregator("root", policy=SenderPolicy(frozenset({"child"})))
    child = await start_aggregator("child")
    child_stub = child.stub()
    for i, cpu in enumerate([1.0, 2.0, 3.0, 4.0, 5.0]):
        await child_stub.Exchange(_agent_model(f"c{i}", rng, [_learned(WEB, cpu, GI)]), timeout=5)
    await child.wait_recomputed(5)
    root_stub = root.stub()
    for node, cpu in (("r1", 10.0), ("r2", 20.0)):
        await root_stub.Exchange(_agent_model(node, rng, [_learned(WEB, cpu, GI)]), timeout=5)
    await root.wait_recomputed(2)
    link = ParentLink(child.service, root.address, interval=0.02)
    task = asyncio.create_task(link.run())
    try:
        # Wait (no timing assertion) until the child's nodes are served the root's medians: the
        # child's five nodes are one vote, their median 3.0, beside the root's 10 and 20.
        for _ in range(1000):
            served = child.service.served()
            medians = served.priors.class_medians
            if served.aggregator == "root" and medians and medians[0].cpu_cores == 10.0:
                break
            await asyncio.sleep(0.01)
        reply = await child_stub.Exchange(
            _agent_model("c0", rng, [_learned(WEB, 1.0, GI)], 2), timeout=5
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await link.close()
    assert reply.aggregator == "root" and reply.contributing_nodes == 7
    assert [(c.workload_class, c.cpu_cores) for c in reply.priors.class_medians] == [(WEB, 10.0)]
    held = root.service.store.get("child")
    assert held is not None and [(c.name, c.footprint.cpu) for c in held.classes] == [(WEB, 3.0)]
