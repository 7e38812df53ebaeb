"""Apply mode end to end in one process: the real ExtenderService (filter, bind, plan slots), the
in-memory cluster (evictions, budgets, a ReplicaSet-like replacement of every evicted pod) and the
PlanExecutor, with a test-side stand-in for kube-scheduler (``FakeScheduler``: it fits pods by
requests, asks the extender's filter and binds through the extender, as kube-scheduler does) and
for the kubelet (bound pods turn Running at the next tick).

Time: runs that need the scheduler use real asyncio with millisecond polls; runs that only wait
(backoff, timeouts) use a fake clock that the executor's sleep advances, so no test depends on
how fast the machine is.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from repack.driver.solver import SolveOptions, solve
from repack.problem.plan import Plan, Step, outcome
from repack.problem.snapshot import parse_list
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.repack.executor import ABORTED, COMPLETED, ExecutorOptions, PlanExecutor
from scheduler_ext.repack.live import merge_lists
from scheduler_ext.repack.recheck import live_view
from scheduler_ext.service import ExtenderService

RUNNING = {
    "node-a": [("300m", "700M"), ("200m", "600M"), ("200m", "600M")],
    "node-b": [("400m", "500M"), ("200m", "400M"), ("200m", "400M")],
    "node-c": [("300m", "600M"), ("300m", "500M"), ("300m", "500M")],
}


def node_obj(name: str) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "1000m", "memory": "2G", "pods": "110"}},
    }


def pod_obj(
    name: str, cpu: str, memory: str, node: str | None, rs: str, **annotations: str
) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": {"app": rs},
            "annotations": dict(annotations),
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": rs, "uid": f"uid-{rs}", "controller": True}
            ],
        },
        "spec": {
            "schedulerName": "carico-scheduler",
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
            "nodeName": node,
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


async def document(cluster: InMemoryCluster) -> dict[str, Any]:
    return merge_lists(await cluster.list_for_repack())


def fragmented_cluster() -> InMemoryCluster:
    """The fragmentation article's example (three nodes of 1000m / 2 GB, nine ReplicaSet pods,
    a pending 300m / 600 MB pod that fits no node although 600m / 1200 MB are free in total)."""
    cluster = InMemoryCluster(auto_create=False)
    for node, pods in RUNNING.items():
        cluster.add_object(node_obj(node))
        for i, (cpu, mem) in enumerate(pods):
            cluster.add_object(pod_obj(f"{node}-p{i}", cpu, mem, node, f"rs-{node}-{i}"))
    cluster.add_object(pod_obj("pending", "300m", "600M", None, "rs-new"))
    return cluster


async def plan_for(cluster: InMemoryCluster) -> Plan:
    plan = solve(parse_list(await document(cluster)), SolveOptions(time_limit=10, workers=1))
    assert plan.status == "OPTIMAL", plan.message
    return plan


def overloaded(cluster: InMemoryCluster, document: dict[str, Any]) -> list[str]:
    view = live_view(document)
    over = []
    for node in view.snapshot.nodes:
        load = view.load(node.name)
        over += [f"{node.name} {r}" for r, v in load.items() if v > node.allocatable.get(r, 0)]
    return over


class FakeScheduler:
    """Stands in for kube-scheduler, the kubelets and the agents' pod counts (a fake: none of them
    runs here)."""

    def __init__(self, service: ExtenderService, cluster: InMemoryCluster) -> None:
        self.service, self.cluster = service, cluster
        self.overloads: list[str] = []
        self.ticks = 0
        cluster.subscribe(lambda _pod: self._audit())
        cluster.subscribe(service.on_pod_event)  # the extender's pod watch

    def _audit(self) -> None:
        # Every pod event: no node may be over its allocatable at any moment.
        document = {"items": list(self.cluster.objects["items"])}
        self.overloads += overloaded(self.cluster, document)

    def filter(self, obj: dict[str, Any], names: list[str]) -> dict[str, Any]:
        body = json.dumps({"Pod": obj, "Nodes": None, "NodeNames": names}).encode()
        reply: dict[str, Any] = json.loads(self.service.filter(body))
        return reply

    async def tick(self) -> None:
        self.ticks += 1
        for key, state in list(self.cluster.pods.items()):
            if state.node and state.phase == "Pending":
                self.cluster.set_phase(key, "Running")  # the kubelet starts it
                # and the node's agent counts it (the pods its report lists end their holds)
                self.service.ledger.counted(state.node, [state.facts.uid])
        view = live_view(await document(self.cluster))
        for key, pod in view.pods.items():
            if pod.node is not None:
                continue
            fits = [
                n.name
                for n in view.snapshot.nodes
                if all(
                    view.load(n.name).get(r, 0) + v <= n.allocatable.get(r, 0)
                    for r, v in pod.requests.items()
                )
            ]
            if not fits:
                continue
            reply = self.filter(self.cluster.object("Pod", key), fits)
            if reply["NodeNames"]:
                ns, name = key.split("/")
                bind = {"PodName": name, "PodNamespace": ns, "PodUID": pod.uid}
                bind["Node"] = reply["NodeNames"][0]
                await self.service.bind(json.dumps(bind).encode())
                return  # one pod per cycle, like kube-scheduler

    async def run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(0.002)


FAST = ExecutorOptions(
    plan_timeout=60, step_timeout=30, blocked_timeout=5, poll_seconds=0.002, backoff_initial=0.01
)


class FakeTime:
    """A clock the executor's sleep advances: waits cost no real time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def executions(service: ExtenderService, outcome_: str) -> float:
    value = service.metrics.registry.get_sample_value(
        "carico_repack_executions_total", {"outcome": outcome_}
    )
    return value or 0.0


def slots_gauge(service: ExtenderService) -> float:
    value = service.metrics.registry.get_sample_value("carico_repack_plan_slots_open")
    assert value is not None
    return value


def executor_for(
    service: ExtenderService, cluster: InMemoryCluster, options: ExecutorOptions = FAST, **kw: Any
) -> PlanExecutor:
    def count(result: str) -> None:
        service.metrics.repack_executions.labels(result).inc()

    return PlanExecutor(cluster, service.slots, options, on_outcome=count, **kw)


async def run_with_scheduler(
    service: ExtenderService, cluster: InMemoryCluster, executor: PlanExecutor, plan: Plan
) -> tuple[Any, FakeScheduler]:
    sched = FakeScheduler(service, cluster)
    task = asyncio.create_task(sched.run())
    try:
        ex = await asyncio.wait_for(executor.execute(plan), 60)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await sched.tick()  # the kubelet starts what was bound last
    return ex, sched


async def test_fragmentation_example_completes_without_overloading_a_node() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    plan = await plan_for(cluster)
    assert [s.action for s in plan.steps] == ["move", "place"]
    moved = plan.steps[0]
    ex, sched = await run_with_scheduler(service, cluster, executor_for(service, cluster), plan)
    assert ex.outcome == COMPLETED, ex.reason
    assert ex.steps_done == 2
    assert sched.overloads == []
    # The pending pod runs on its planned node; the moved pod's replacement on the target.
    assert cluster.pods["default/pending"].node == plan.steps[1].to_node
    assert cluster.evictions == [moved.pod]
    rs = moved.pod.split("/")[1].rsplit("-", 1)[0]
    owner = f"rs-{rs}-{moved.pod[-1]}"
    replacements = [p for k, p in cluster.pods.items() if k.startswith(f"default/{owner}-r")]
    assert [p.node for p in replacements] == [moved.to_node]
    # Nothing is left held: no slot, and the ledger's reservations ended as the pods ran.
    assert service.slots.open_count() == 0 and slots_gauge(service) == 0
    assert service.table.reserved_counts() == {}
    assert executions(service, COMPLETED) == 1
    after = parse_list(await document(cluster))
    assert outcome(after).placed_by_priority == plan.after.placed_by_priority


async def test_eviction_refused_then_allowed_retries_with_backoff() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    plan = await plan_for(cluster)
    cluster.refuse_evictions[plan.steps[0].pod] = 2  # two 429s, then the API accepts
    ex, _ = await run_with_scheduler(service, cluster, executor_for(service, cluster), plan)
    assert ex.outcome == COMPLETED, ex.reason
    assert sum("eviction refused" in e for e in ex.events) == 2
    assert cluster.pods["default/pending"].node == plan.steps[1].to_node


async def test_pdb_that_allows_no_disruption_pauses_then_aborts() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    plan = await plan_for(cluster)
    moved = plan.steps[0].pod
    app = cluster.object("Pod", moved)["metadata"]["labels"]["app"]
    # The budget appears after the plan was made: the Eviction API is the authority.
    cluster.add_object(
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-all", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        }
    )
    t = FakeTime()
    options = ExecutorOptions(blocked_timeout=30, backoff_initial=1, backoff_max=8)
    executor = executor_for(service, cluster, options, clock=t.clock, sleep=t.sleep)
    ex = await executor.execute(plan)
    assert ex.outcome == ABORTED
    assert "eviction refused until the deadline" in ex.reason and "disruption budget" in ex.reason
    # Backoff 1, 2, 4, 8, 8 s: five pauses fit in the 30 s budget before the deadline passes.
    assert sum("retry in" in e for e in ex.events) == 5
    assert cluster.evictions == [] and cluster.pods[moved].node == plan.steps[0].from_node
    assert cluster.pods["default/pending"].node == ""
    assert service.slots.open_count() == 0 and service.table.reserved_counts() == {}
    assert executions(service, ABORTED) == 1 and executions(service, COMPLETED) == 0


async def test_drift_before_a_step_aborts_without_evicting() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    plan = await plan_for(cluster)
    target = plan.steps[0].to_node
    assert target is not None
    # Someone else fills the target before the move: no room left for the planned pod.
    cluster.add_object(pod_obj("intruder", "400m", "100M", target, "rs-other"))
    ex = await executor_for(service, cluster).execute(plan)
    assert ex.outcome == ABORTED
    assert f"node {target} has no room" in ex.reason
    assert cluster.evictions == []
    assert service.slots.open_count() == 0 and service.table.reserved_counts() == {}


async def test_planned_pod_deleted_aborts_and_releases_the_pending_slot() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    plan = await plan_for(cluster)
    cluster.delete_pod(plan.steps[0].pod)
    ex = await executor_for(service, cluster).execute(plan)
    assert ex.outcome == ABORTED and "is gone" in ex.reason
    assert service.slots.open_count() == 0
    # The pending pod is no longer steered: the filter answers from capacity again.
    reply = FakeScheduler(service, cluster).filter(
        cluster.object("Pod", "default/pending"), ["node-a", "node-b", "node-c"]
    )
    assert reply["NodeNames"] == ["node-a", "node-b", "node-c"]


async def test_do_not_move_annotation_at_execution_refuses_the_plan() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    plan = await plan_for(cluster)
    meta = cluster.object("Pod", plan.steps[0].pod)["metadata"]
    meta["annotations"]["carico.io/do-not-move"] = "true"
    ex = await executor_for(service, cluster).execute(plan)
    assert ex.outcome == ABORTED and "must not be moved (do-not-move)" in ex.reason
    assert cluster.evictions == [] and service.slots.open_count() == 0


async def test_replacement_never_bound_times_out_and_leaves_no_slot() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    plan = await plan_for(cluster)
    t = FakeTime()
    options = ExecutorOptions(step_timeout=20, poll_seconds=1)
    ex = await executor_for(service, cluster, options, clock=t.clock, sleep=t.sleep).execute(plan)
    # No scheduler runs: the eviction happens, the replacement stays pending, the step times out.
    assert ex.outcome == ABORTED and ex.reason.startswith("step timeout (20s)")
    assert cluster.evictions == [plan.steps[0].pod]
    assert service.slots.open_count() == 0 and slots_gauge(service) == 0
    assert service.table.reserved_counts() == {}
    replacement = next(k for k, p in cluster.pods.items() if not p.node and "-r" in k)
    reply = FakeScheduler(service, cluster).filter(
        cluster.object("Pod", replacement), ["node-a", "node-b", "node-c"]
    )
    assert reply["FailedNodes"] == {}


def test_slot_steers_only_matching_pods_and_bind_takes_over_its_unit() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    sched = FakeScheduler(service, cluster)
    from scheduler_ext.repack.recheck import pod_signature
    from scheduler_ext.slots import SlotKind

    view = live_view({"items": list(cluster.objects["items"])})
    model = view.pods["default/node-a-p2"]
    service.slots.open(
        "p1",
        SlotKind.REPLACEMENT,
        "node-b",
        "uid-rs-node-a-2",
        0.0,
        signature=pod_signature(model),
        for_pod="default/node-a-p2",
    )
    assert service.table.reserved_counts() == {"node-b": 1}
    nodes = ["node-a", "node-b", "node-c"]
    twin = pod_obj("rs-node-a-2-x", "200m", "600M", None, "rs-node-a-2")
    reply = sched.filter(twin, nodes)
    assert reply["NodeNames"] == ["node-b"]
    assert reply["FailedNodes"]["node-a"] == "carico: repack plan p1 holds its slot on node-b"
    # Same owner, another class (a new template): not the planned pod, not steered.
    bigger = pod_obj("rs-node-a-2-y", "250m", "600M", None, "rs-node-a-2")
    assert sched.filter(bigger, nodes)["NodeNames"] == nodes
    # Another owner: untouched.
    assert sched.filter(pod_obj("z", "200m", "600M", None, "rs-z"), nodes)["NodeNames"] == nodes
    cluster.add_object(twin)
    bind = {"PodName": "rs-node-a-2-x", "PodNamespace": "default", "PodUID": "uid-rs-node-a-2-x"}
    result = asyncio.run(service.bind(json.dumps({**bind, "Node": "node-b"}).encode()))
    assert json.loads(result) == {"Error": ""}
    # The slot's unit became the pod's reservation: still one unit on node-b, not two.
    assert service.table.reserved_counts() == {"node-b": 1}
    assert service.ledger.get("default/rs-node-a-2-x") is not None
    assert service.slots.slots()[0].claimed_by == "uid-rs-node-a-2-x"


async def test_replacement_of_a_pod_evicted_for_good_is_held_until_the_plan_ends() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    before = outcome(parse_list(await document(cluster)))
    steps = (
        Step("evict", "default/node-c-p2", "node-c", None),
        Step("place", "default/pending", None, "node-c"),
    )
    plan = Plan("FEASIBLE", False, 0.0, "classes", before, before, steps=steps)
    sched = FakeScheduler(service, cluster)
    t = FakeTime()
    seen: list[dict[str, Any]] = []

    async def sleep(seconds: float) -> None:
        # While the plan waits for the pending pod, the evicted pod's replacement asks to be
        # scheduled: the hold keeps it off every node, including the room it just left.
        replacement = next(k for k in cluster.pods if "-r" in k)
        seen.append(sched.filter(cluster.object("Pod", replacement), ["node-c"]))
        await t.sleep(seconds)

    options = ExecutorOptions(step_timeout=5, poll_seconds=1)
    ex = await executor_for(service, cluster, options, clock=t.clock, sleep=sleep).execute(plan)
    assert ex.outcome == ABORTED and "no pod was bound to node-c" in ex.reason
    assert cluster.evictions == ["default/node-c-p2"]
    assert seen and all(r["NodeNames"] == [] for r in seen)
    assert seen[0]["FailedNodes"] == {
        "node-c": f"carico: repack plan {ex.plan_id} holds this pod back until it ends"
    }
    # The plan is over: the hold is gone with its other slots.
    assert service.slots.open_count() == 0 and service.table.reserved_counts() == {}
    replacement = next(k for k in cluster.pods if "-r" in k)
    assert sched.filter(cluster.object("Pod", replacement), ["node-c"])["NodeNames"] == ["node-c"]


async def test_plan_evicting_a_pod_for_good_completes() -> None:
    cluster = fragmented_cluster()
    cluster.replace_evicted = False
    service = ExtenderService(cluster)
    now = outcome(parse_list(await document(cluster)))
    steps = (Step("evict", "default/node-c-p2", "node-c", None),)
    plan = Plan("FEASIBLE", False, 0.0, "classes", now, now, steps=steps)
    ex = await executor_for(service, cluster).execute(plan)
    assert ex.outcome == COMPLETED, ex.reason
    assert cluster.evictions == ["default/node-c-p2"] and "default/node-c-p2" not in cluster.pods
    assert service.slots.open_count() == 0


def test_failed_bind_into_a_slot_gives_the_slot_back() -> None:
    cluster = fragmented_cluster()
    service = ExtenderService(cluster)
    sched = FakeScheduler(service, cluster)
    from scheduler_ext.slots import SlotKind

    slot = service.slots.open("p1", SlotKind.PENDING, "node-a", "uid-pending", 0.0)
    assert sched.filter(cluster.object("Pod", "default/pending"), ["node-a", "node-b"])[
        "NodeNames"
    ] == ["node-a"]
    cluster.fail_next_bind("the API said no")
    bind = {"PodName": "pending", "PodNamespace": "default", "PodUID": "uid-pending"}
    result = asyncio.run(service.bind(json.dumps({**bind, "Node": "node-a"}).encode()))
    assert json.loads(result) == {"Error": "the API said no"}
    assert slot.claimed_by == "" and service.ledger.get("default/pending") is None
    assert service.table.reserved_counts() == {"node-a": 1}  # the slot's own unit, once


async def test_cycle_broken_by_evicting_first_lands_every_pod() -> None:
    # Two full nodes whose big pods trade places: no order of plain moves has room, so the
    # sequencer evicts one first and lands it last. Neither node may ever be over capacity.
    cluster = InMemoryCluster(auto_create=False)
    for node in ("node-a", "node-b"):
        cluster.add_object(node_obj(node))
    cluster.add_object(pod_obj("big-a", "600m", "100M", "node-a", "rs-big-a"))
    cluster.add_object(pod_obj("small-a", "300m", "100M", "node-a", "rs-small-a"))
    cluster.add_object(pod_obj("big-b", "500m", "100M", "node-b", "rs-big-b"))
    cluster.add_object(pod_obj("small-b", "400m", "100M", "node-b", "rs-small-b"))
    snapshot = parse_list(await document(cluster))
    from repack.problem.plan import Move
    from repack.problem.sequencing import sequence

    moves = [Move("default/big-a", "node-a", "node-b"), Move("default/big-b", "node-b", "node-a")]
    steps = sequence(snapshot, moves, [], [])
    assert [s.action for s in steps] == ["evict-first", "move", "land"]
    now = outcome(snapshot)
    plan = Plan("FEASIBLE", False, 0.0, "classes", now, now, moves=tuple(moves), steps=steps)
    service = ExtenderService(cluster)
    ex, sched = await run_with_scheduler(service, cluster, executor_for(service, cluster), plan)
    assert ex.outcome == COMPLETED, (ex.reason, ex.events)
    assert sched.overloads == []
    placed = {k.split("/")[1].rsplit("-r", 1)[0]: p.node for k, p in cluster.pods.items()}
    assert placed == {
        "rs-big-a": "node-b",
        "rs-big-b": "node-a",
        "small-a": "node-a",
        "small-b": "node-b",
    }
    assert service.slots.open_count() == 0


def test_slots_outlive_the_longest_plan() -> None:
    service = ExtenderService(fragmented_cluster())
    assert service.slots.ttl == 600.0
    PlanExecutor(service.cluster, service.slots, ExecutorOptions(plan_timeout=1800))  # type: ignore[arg-type]
    assert service.slots.ttl == 1800.0


async def test_in_memory_eviction_of_objects_given_as_one_list() -> None:
    # The --no-kube cluster can be handed its objects at once (set_objects): evictions work on
    # them too, and the replacement is a pod like any other.
    source = fragmented_cluster()
    cluster = InMemoryCluster()
    cluster.set_objects(source.objects)
    gone = await cluster.evict("default", "node-a-p2", "uid-other")
    assert gone.outcome.value == "gone" and "uid-node-a-p2" in gone.message
    done = await cluster.evict("default", "node-a-p2", "uid-node-a-p2")
    assert done.outcome.value == "evicted"
    assert cluster.object("Pod", "default/node-a-p2") is None
    replacement = cluster.object("Pod", "default/rs-node-a-2-r1")
    assert replacement is not None and replacement["spec"]["nodeName"] is None
    assert cluster.pods["default/rs-node-a-2-r1"].node == ""
