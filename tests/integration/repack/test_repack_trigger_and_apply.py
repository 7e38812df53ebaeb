"""The automatic trigger behind a real extender, and the apply-mode seam (``PlanRunner``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

import pytest

from repack.problem.plan import Plan
from repack.problem.snapshot import Snapshot
from scheduler_ext.cluster import InMemoryCluster, OnEvent, OnList
from scheduler_ext.pods import PodFacts
from scheduler_ext.repack.service import (
    ExecutionReport,
    RepackService,
    RepackSettings,
    RunInProgress,
)
from scheduler_ext.service import ExtenderService

from .conftest import MakeRepacker, fragmented_cluster, unscheduled_now

LIVENESS_S = 60.0  # upper bound on waiting for the background loop; never a pass/fail timing


async def eventually(what: str, check: Any) -> None:
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), LIVENESS_S)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


async def test_one_pending_pod_watch_feeds_the_ledger_and_the_trigger(
    make_repacker: MakeRepacker,
) -> None:
    """The wiring of ``carico extender`` (docs/architecture.md#pod-watches) on the in-memory
    cluster: the service's pod watch is ``run_pending_watch``, which feeds the repack trigger
    too, and the repacker runs without a watch of its own."""
    cluster = InMemoryCluster()
    cluster.set_objects(fragmented_cluster())
    r = await make_repacker(cluster=cluster)
    bound = PodFacts("shop", "web-1", "u1")
    cluster.add_pod(bound, node="node-a")  # bound, Pending: the ledger reserves for it

    def pending(ledger_list: OnList, ledger_event: OnEvent) -> Coroutine[Any, Any, None]:
        on_list, on_event = r.repack.on_unscheduled_list, r.repack.on_unscheduled_event
        return cluster.run_pending_watch(ledger_list, ledger_event, on_list, on_event)

    tasks = [
        asyncio.create_task(r.service.run_background(sweep_every=0.01, pod_watch=pending)),
        asyncio.create_task(r.repack.run_background(None, every=0.01)),
    ]
    try:
        await eventually("the trigger's list", lambda: r.repack.trigger.unschedulable == 1)
        await eventually("the ledger's list", lambda: r.service.readiness.ledger_rebuilt)
        assert [res.key for res in r.service.ledger.reservations()] == ["shop/web-1"]
        cluster.set_phase(bound.key, "Failed")  # an event after the list ends the reservation
        await eventually("the event", lambda: not list(r.service.ledger.reservations()))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_stuck_pods_trigger_one_run_per_cluster_state(make_repacker: MakeRepacker) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects(fragmented_cluster())
    r = await make_repacker(cluster=cluster, debounce=30.0, cooldown=60.0)
    background = asyncio.create_task(
        r.repack.run_background(cluster.run_unscheduled_watch, every=0.01)
    )
    try:
        await eventually("the watch to list", lambda: r.repack.trigger.unschedulable == 1)
        _, state = await r.get("/api/v1/repack")
        assert state["unschedulable"] == 1 and state["stuck"] == 0 and state["stuck_pods"] == []
        assert r.repack.plans() == []  # inside the debounce window
        r.clock.now += 30.0
        await eventually("an automatic run", lambda: len(r.repack.plans()) == 1)
        _, state = await r.get("/api/v1/repack")
        assert state["stuck"] == 1 and state["stuck_pods"] == ["default/pending"]
        first = r.repack.plans()[0]
        assert first["trigger"] == "unschedulable" and first["status"] == "OPTIMAL"
        assert first["plan"]["placements"] == [{"pod": "default/pending", "to": "node-a"}]
    finally:
        background.cancel()
        await asyncio.gather(background, return_exceptions=True)

    # Dry-run changed nothing, so the pod is still stuck; after the cooldown the state is the
    # one already solved: no second solve.
    r.clock.now += 59.0
    assert await r.repack.tick() is None and len(r.repack.plans()) == 1
    r.clock.now += 1.0
    assert await r.repack.tick() is None and len(r.repack.plans()) == 1
    # The cluster changes (a fourth node appears): the next due check solves again.
    changed = fragmented_cluster()
    changed["items"].append(
        {
            "kind": "Node",
            "metadata": {"name": "node-d"},
            "status": {"allocatable": {"cpu": "1", "memory": "2G", "pods": "110"}},
        }
    )
    cluster.set_objects(changed)
    r.clock.now += 60.0
    record = await r.repack.tick()
    assert record is not None and record.status == "OPTIMAL"
    assert record.plan is not None and record.plan["moves"] == []  # room on node-d now
    assert record.plan["placements"] == [{"pod": "default/pending", "to": "node-d"}]
    text = await r.metrics()
    assert 'carico_repack_runs_total{status="OPTIMAL",trigger="unschedulable"} 2.0' in text
    assert "carico_repack_unschedulable_pods 1.0" in text


async def test_pods_of_other_schedulers_neither_trigger_nor_get_planned(
    make_repacker: MakeRepacker,
) -> None:
    doc = fragmented_cluster()
    for item in doc["items"]:
        if item["kind"] == "Pod" and not item["spec"].get("nodeName"):
            item["spec"]["schedulerName"] = "default-scheduler"
    cluster = InMemoryCluster()
    cluster.set_objects(doc)
    r = await make_repacker(cluster=cluster, debounce=0.0)
    r.repack.on_unscheduled_list(await unscheduled_now(cluster))
    assert r.repack.trigger.unschedulable == 0 and await r.repack.tick() is None
    status, body = await r.post()
    assert status == 200 and body["status"] == "NO_IMPROVEMENT" and body["pending"] == []


class RecordingRunner:
    """A stand-in executor (the real one lives with the Eviction API code): records the plans it
    is handed and finishes when the test says so."""

    def __init__(self, outcome: str = "completed") -> None:
        self.outcome = outcome
        self.calls: list[tuple[Plan, Snapshot]] = []
        self.release = asyncio.Event()

    async def run(self, plan: Plan, snapshot: Snapshot) -> ExecutionReport:
        self.calls.append((plan, snapshot))
        await self.release.wait()
        return ExecutionReport(self.outcome, "", len(plan.steps), len(plan.steps))


def test_apply_mode_refuses_to_start_without_an_executor() -> None:
    metrics = ExtenderService(InMemoryCluster()).metrics
    with pytest.raises(ValueError, match="apply needs a plan executor"):
        RepackService(RepackSettings(mode="apply"), InMemoryCluster().list_for_repack, metrics)
    with pytest.raises(ValueError, match="unknown repack mode"):
        RepackSettings(mode="yes")


async def test_apply_mode_hands_checked_plans_to_the_runner(make_repacker: MakeRepacker) -> None:
    cluster = InMemoryCluster()
    cluster.set_objects(fragmented_cluster())
    runner = RecordingRunner()
    r = await make_repacker(cluster=cluster, runner=runner, mode="apply")
    status, body = await r.post()
    assert status == 200 and body["mode"] == "apply"
    assert body["execution"] == {"state": "running"}
    await eventually("the runner to be called", lambda: len(runner.calls) == 1)
    plan, snapshot = runner.calls[0]
    assert [p.pod for p in plan.placements] == ["default/pending"]
    assert {n.name for n in snapshot.nodes} == {"node-a", "node-b", "node-c"}
    # Executing holds the repacker: no second run meanwhile.
    status, reply = await r.post()
    assert status == 409 and "executing" in reply["Error"]
    with pytest.raises(RunInProgress):
        await r.repack.run("http")
    runner.release.set()
    await eventually("the execution to finish", lambda: r.repack.busy == "")
    _, plans = await r.get("/api/v1/repack/plans")
    assert plans[0]["execution"]["state"] == "completed"
    assert plans[0]["execution"]["steps_done"] == 2
    assert 'carico_repack_executions_total{outcome="completed"} 1.0' in await r.metrics()

    # A dry-run request in apply mode computes only.
    status, body = await r.post(json.dumps({"dry_run": True}).encode())
    assert status == 200 and body["mode"] == "dry-run" and body["execution"] is None
    assert len(runner.calls) == 1


async def test_plans_without_improvement_are_not_executed(make_repacker: MakeRepacker) -> None:
    runner = RecordingRunner()
    r = await make_repacker(runner=runner, mode="apply")  # empty cluster: nothing to improve
    status, body = await r.post()
    assert status == 200 and body["status"] == "NO_IMPROVEMENT" and body["execution"] is None
    assert runner.calls == [] and r.repack.busy == ""


async def test_a_failing_runner_is_recorded_as_aborted(make_repacker: MakeRepacker) -> None:
    class Broken(RecordingRunner):
        async def run(self, plan: Plan, snapshot: Snapshot) -> ExecutionReport:
            raise RuntimeError("eviction API unreachable")

    cluster = InMemoryCluster()
    cluster.set_objects(fragmented_cluster())
    r = await make_repacker(cluster=cluster, runner=Broken(), mode="apply")
    status, _ = await r.post()
    assert status == 200
    await eventually("the execution to end", lambda: r.repack.busy == "")
    execution = r.repack.plans()[0]["execution"]
    assert execution["state"] == "aborted"
    assert "eviction API unreachable" in execution["reason"]
    assert 'carico_repack_executions_total{outcome="aborted"} 1.0' in await r.metrics()
