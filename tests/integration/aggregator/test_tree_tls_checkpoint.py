"""A two-level tree equals one flat aggregator; mTLS refuses clients without a valid certificate;
checkpoints survive a restart and a corrupt one is ignored."""

import asyncio
import contextlib
import datetime as dt
import json
import logging
from pathlib import Path

import grpc
import numpy as np
import pytest

from aggregator.grpc_client import ClientTls, ParentLink
from aggregator.grpc_server import ServerTls
from aggregator.validate import SenderPolicy
from carico.tls import grpc_channel_credentials, make_ca, make_leaf, write_pair

# Each level adds one eigendecomposition's rounding (~1e-16 relative); 1e-12 is far above that
# and far below any weighting mistake (which would shift entries by ~1e-2).
ATOL = 1e-12


async def test_two_level_tree_gives_the_flat_global_model(
    start_aggregator, make_local, moment_of, rng
) -> None:  # type: ignore[no-untyped-def]
    flat = await start_aggregator("flat")
    names = [f"child-{i}" for i in range(3)]
    root = await start_aggregator("root", policy=SenderPolicy(frozenset(names)))
    children = [await start_aggregator(name) for name in names]
    # Uneven groups so that an unweighted mean of the children would differ.
    groups = [range(0, 5), range(5, 25), range(25, 27)]
    flat_stub = flat.stub()
    costs: list[float] = []
    for child, group in zip(children, groups, strict=True):
        stub = child.stub()
        for i in group:
            batch = rng.uniform(size=(2, 10)) * rng.uniform(0.1, 1.0)
            cost = (round(float(rng.uniform(0.05, 0.9)), 6),) if i % 3 else ()
            costs.extend(cost)
            message = make_local(f"node-{i}", batch, costs=cost)
            await stub.Exchange(message, timeout=5)
            await flat_stub.Exchange(message, timeout=5)
    await flat.wait_recomputed(27)
    links = []
    for child, group in zip(children, groups, strict=True):
        await child.wait_recomputed(len(group))
        link = ParentLink(child.service, root.address, interval=0.05)
        links.append(link)
        assert await link.exchange_once()
    try:
        root_view = await root.wait_recomputed(3)
        flat_view = flat.service.served()
        np.testing.assert_allclose(moment_of(root_view), moment_of(flat_view), atol=ATOL)
        assert root_view.contributing_nodes == flat_view.contributing_nodes == 27
        assert root_view.priors.nodes_with_cost == flat_view.priors.nodes_with_cost == len(costs)
        assert root_view.priors.median_per_pod_cost == pytest.approx(float(np.median(costs)))
        assert flat_view.priors.median_per_pod_cost == pytest.approx(float(np.median(costs)))
        # The next exchange brings the root's fleet-wide model down to every child's nodes.
        for link, child in zip(links, children, strict=True):
            assert await link.exchange_once()
            served = await child.stub().Exchange(
                make_local("node-0", rng.uniform(size=(2, 4)), sequence=0, timestamp=0), timeout=5
            )
            assert served.aggregator == "root" and served.contributing_nodes == 27
            np.testing.assert_allclose(moment_of(served), moment_of(flat_view), atol=ATOL)
    finally:
        for link in links:
            await link.close()


async def test_an_unreachable_parent_backs_off_and_nodes_keep_the_local_model(
    start_aggregator, make_local, rng
) -> None:  # type: ignore[no-untyped-def]
    child = await start_aggregator("child")
    await child.stub().Exchange(make_local("n1", rng.uniform(size=(2, 4))), timeout=5)
    await child.wait_recomputed(1)
    # A port nothing listens on: a server started and stopped.
    gone = await start_aggregator("gone")
    address = gone.address
    await gone.server.stop(None)
    link = ParentLink(child.service, address, interval=0.5, timeout=1.0, max_backoff=8.0)
    try:
        assert not await link.exchange_once()
        assert not await link.exchange_once()
        assert link.next_delay() == 2.0  # 0.5 · 2²
        assert child.service.served().aggregator == "child"
        assert child.service.served().contributing_nodes == 1
    finally:
        await link.close()


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    now = dt.datetime.now(dt.UTC)
    ca, other = make_ca(now=now), make_ca("other-ca", now=now)
    paths: dict[str, Path] = {"ca": write_pair(ca, tmp_path, "ca")[0]}
    paths["srv_crt"], paths["srv_key"] = write_pair(
        make_leaf(ca, "aggregator", now=now, hosts=("127.0.0.1",)), tmp_path, "srv"
    )
    paths["cli_crt"], paths["cli_key"] = write_pair(
        make_leaf(ca, "agent", now=now, server=False), tmp_path, "cli"
    )
    paths["rogue_crt"], paths["rogue_key"] = write_pair(
        make_leaf(other, "rogue", now=now, server=False), tmp_path, "rogue"
    )
    return paths


@pytest.mark.parametrize("workers", [1, 2], ids=["1-process", "2-workers"])
async def test_mtls_accepts_signed_clients_and_refuses_the_rest(
    start_aggregator, make_local, rng, pki, workers
) -> None:  # type: ignore[no-untyped-def]
    tls = ServerTls(pki["srv_crt"], pki["srv_key"], pki["ca"])
    agg = await start_aggregator("secure", tls=tls, workers=workers)
    good = agg.stub(grpc_channel_credentials(pki["ca"], pki["cli_crt"], pki["cli_key"]))
    reply = await good.Exchange(make_local("n1", rng.uniform(size=(2, 4))), timeout=5)
    assert reply.aggregator == "secure"
    stream = good.ExchangeStream()  # the agents' stream goes through the same credentials
    await stream.write(make_local("n1", rng.uniform(size=(2, 4)), sequence=2, timestamp=1001.0))
    assert (await stream.read()).aggregator == "secure"
    stream.cancel()
    refused = {
        "no certificate": grpc_channel_credentials(pki["ca"]),
        "other CA": grpc_channel_credentials(pki["ca"], pki["rogue_crt"], pki["rogue_key"]),
    }
    for label, creds in refused.items():
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await agg.stub(creds).Exchange(make_local("n2", rng.uniform(size=(2, 4))), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, label
        stream = agg.stub(creds).ExchangeStream(timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stream.write(make_local("n2", rng.uniform(size=(2, 4))))
            await stream.read()
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, label
    with pytest.raises(grpc.aio.AioRpcError):  # plaintext to a TLS port
        await agg.stub().Exchange(make_local("n3", rng.uniform(size=(2, 4))), timeout=5)
    await agg.outcomes(2)  # both models counted: with workers, both reached the store too
    assert [e.node for e in agg.service.store.entries()] == ["n1"]
    assert agg.service.store.get("n1").sequence == 2  # the streamed model arrived


@pytest.mark.parametrize("workers", [1, 2], ids=["1-process", "2-workers"])
async def test_a_tree_link_over_mtls(start_aggregator, make_local, rng, pki, workers) -> None:  # type: ignore[no-untyped-def]
    root = await start_aggregator(
        "root", tls=ServerTls(pki["srv_crt"], pki["srv_key"], pki["ca"]), workers=workers
    )
    child = await start_aggregator("child", workers=workers)
    await child.stub().Exchange(make_local("n1", rng.uniform(size=(2, 4))), timeout=5)
    await child.wait_recomputed(1)
    link = ParentLink(
        child.service, root.address, tls=ClientTls(pki["ca"], pki["cli_crt"], pki["cli_key"])
    )
    try:
        assert await link.exchange_once()
        assert (await root.wait_recomputed(1)).contributing_nodes == 1
        assert await link.exchange_once()  # the root's answer now holds the child's node
    finally:
        await link.close()
    # The child's nodes get the fleet-wide model from the parent (through every worker).
    await child.wait_recomputed(1)
    reply = await child.stub().Exchange(
        make_local("n1", rng.uniform(size=(2, 4)), sequence=2), timeout=5
    )
    assert reply.aggregator == "root" and reply.has_model and reply.contributing_nodes == 1
    anonymous = ParentLink(child.service, root.address, tls=ClientTls(pki["ca"]))
    try:
        assert not await anonymous.exchange_once()
    finally:
        await anonymous.close()


async def test_checkpoint_restores_the_global_model_after_a_restart(
    start_aggregator, make_local, moment_of, rng, fake_clock, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "agg.json"
    first = await start_aggregator(clock=fake_clock, ttl=60.0, checkpoint_path=path)
    stub = first.stub()
    for i in range(10):
        await stub.Exchange(make_local(f"n{i}", rng.uniform(size=(2, 6)), costs=(0.2,)), timeout=5)
    fake_clock.now += 50  # n10 arrives later than the others
    await stub.Exchange(make_local("n10", rng.uniform(size=(2, 6))), timeout=5)
    before = await first.wait_recomputed(11)
    await first.server.stop(None)
    await first.service.stop()  # writes the final checkpoint
    assert len(json.loads(path.read_bytes())["entries"]) == 11

    second = await start_aggregator(clock=fake_clock, ttl=60.0, checkpoint_path=path)
    restored = second.service.served()  # before any node has called
    assert restored.contributing_nodes == 11
    np.testing.assert_allclose(moment_of(restored), moment_of(before), atol=ATOL)
    await second.server.stop(None)
    await second.service.stop()

    fake_clock.now += 20  # n0..n9 are now 70 s old: past the TTL; n10 is 20 s old
    third = await start_aggregator(clock=fake_clock, ttl=60.0, checkpoint_path=path)
    assert [e.node for e in third.service.store.entries()] == ["n10"]
    assert third.service.served().contributing_nodes == 1


async def test_a_corrupt_checkpoint_is_logged_and_ignored(
    start_aggregator, make_local, rng, tmp_path: Path, caplog
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "agg.json"
    path.write_bytes(b'{"format": "carico-aggregator-checkpoint", "version": 1, "entr')
    with caplog.at_level(logging.WARNING, logger="carico.aggregator"):
        agg = await start_aggregator(checkpoint_path=path)
    assert any("checkpoint ignored" in r.getMessage() for r in caplog.records)
    assert not agg.service.served().has_model
    await agg.stub().Exchange(make_local("n1", rng.uniform(size=(2, 4))), timeout=5)
    await agg.wait_recomputed(1)
    assert agg.service.save_checkpoint()
    assert json.loads(path.read_bytes())["entries"][0]["node"] == "n1"


async def test_the_checkpoint_task_writes_on_its_interval(
    start_aggregator, make_local, rng, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "agg.json"
    agg = await start_aggregator(checkpoint_path=path, checkpoint_interval=0.02)
    await agg.stub().Exchange(make_local("n1", rng.uniform(size=(2, 4))), timeout=5)
    await agg.wait_recomputed(1)
    for _ in range(1000):  # wait for a write that contains n1 (up to ~10 s on a loaded machine)
        if path.exists() and json.loads(path.read_bytes())["entries"]:
            break
        await asyncio.sleep(0.01)
    assert json.loads(path.read_bytes())["entries"][0]["node"] == "n1"


async def test_the_parent_link_runs_by_itself_and_brings_the_fleet_view_down(
    start_aggregator, make_local, moment_of, rng
) -> None:  # type: ignore[no-untyped-def]
    names = [f"child-{i}" for i in range(2)]
    root = await start_aggregator("root", policy=SenderPolicy(frozenset(names)))
    children = [await start_aggregator(name) for name in names]
    batches = [rng.uniform(size=(2, 6)) for _ in range(6)]
    for i, batch in enumerate(batches):
        await children[i % 2].stub().Exchange(make_local(f"n{i}", batch), timeout=5)
    for child in children:
        await child.wait_recomputed(3)
    links = [ParentLink(child.service, root.address, interval=0.02) for child in children]
    tasks = [asyncio.create_task(link.run()) for link in links]
    try:
        for child in children:  # wait (no timing assertion) until the whole fleet is served
            for _ in range(1000):
                served = child.service.served()
                if served.aggregator == "root" and served.contributing_nodes == 6:
                    break
                await asyncio.sleep(0.01)
            served = child.service.served()
            assert served.aggregator == "root" and served.contributing_nodes == 6
            expected = np.mean([b @ b.T / b.shape[1] for b in batches], axis=0)
            np.testing.assert_allclose(moment_of(served), expected, atol=ATOL)
    finally:
        for task in tasks:
            task.cancel()
        for task, link in zip(tasks, links, strict=True):
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await link.close()
