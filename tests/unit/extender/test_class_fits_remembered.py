"""CapacityTable.class_fits: a node's fit for a class, remembered until what it rests on changes."""

from __future__ import annotations

import random

from carico.pods import Requests
from protos.carico.v1 import capacity_pb2
from scheduler_ext.capacity import CapacityTable, Thresholds

GI = 2**30
WEB = ("shop/Deployment/web", Requests(0.1, 128 * 2**20))
NEW = ("shop/Job/new", Requests(0.5, 0.0))  # no node has measured it: probed, fleet-dependent


def per_class_report(
    node: str, sequence: int, cpu_headroom: float, classes: dict[str, float]
) -> capacity_pb2.NodeCapacity:
    """A 4-core, 32 GiB node's report with the classes it learned (cores per pod)."""
    msg = capacity_pb2.NodeCapacity(
        node=node, avail=5.0, k=1.0, capacity=2.0, per_pod_cost=0.1, pods=1, sequence=sequence,
        timestamp=1.7e9 + sequence, mode=capacity_pb2.CAPACITY_MODE_LIVE,
        feature_names=["cpu", "memory"], features=[0.3, 0.2], headroom=[cpu_headroom, 0.6],
        full_level=0.85, cpu_cores=4.0, memory_bytes=32 * GI,
    )  # fmt: skip
    msg.scale.extend(
        [
            capacity_pb2.FeatureScale(per_core=1 / 8),
            capacity_pb2.FeatureScale(per_byte=1 / (32 * GI)),
        ]
    )
    for name, cores in classes.items():
        msg.classes.add(
            workload_class=name, cpu_cores=cores, memory_bytes=GI / 4, source="learned", pods=1,
            samples=40, request_cpu_cores=0.1, request_memory_bytes=128 * 2**20,
        )  # fmt: skip
    msg.default_footprint.CopyFrom(
        capacity_pb2.ClassFootprint(cpu_cores=0.5, memory_bytes=GI / 4, source="default")
    )
    return msg


def test_a_fit_is_remembered_until_its_node_or_the_fleet_changes() -> None:
    """Random reports, reservations and forgotten nodes: after every step the remembered fit
    of every node equals one computed afresh, and a node nothing touched gives the very same
    object (it was not computed again)."""
    rng = random.Random(7)
    table = CapacityTable(Thresholds(stale_after=1e9))
    nodes = [f"n{i}" for i in range(12)]
    sequence = dict.fromkeys(nodes, 0)
    now = 0.0

    def report(node: str, classes: dict[str, float] | None = None) -> None:
        sequence[node] += 1
        msg = per_class_report(
            node, sequence[node], rng.uniform(0.0, 0.8), classes or {WEB[0]: rng.uniform(0.3, 2)}
        )
        assert table.ingest(msg, node, now)[0].value == "accepted"

    for node in nodes:
        report(node)
    reserved: list[tuple[str, tuple[str, Requests]]] = []
    for step in range(300):
        now += 0.5
        action = rng.choice(("report", "reserve", "release", "new class", "forget", "none"))
        touched = ""
        if action == "report":
            touched = rng.choice(nodes)
            report(touched)
        elif action == "reserve":
            touched, klass = rng.choice(nodes), rng.choice((WEB, NEW))
            table.add_reserved(touched, 1, *klass)
            reserved.append((touched, klass))
        elif action == "release" and reserved:
            touched, klass = reserved.pop(rng.randrange(len(reserved)))
            table.add_reserved(touched, -1, *klass)
        elif action == "new class":
            # a class learned somewhere changes the fleet's summary, and with it every fit
            touched = rng.choice(nodes)
            report(touched, {WEB[0]: 1.0, f"shop/Job/c{step}": 0.7})
        elif action == "forget":
            now += 100.0
            for node in nodes:
                if node != "n0":
                    report(node)
            assert table.forget_older_than(now, 50.0) == ["n0"]
            report("n0")  # back, with a report newer than what was remembered of it
            touched = "n0"
        for klass in (WEB, NEW):
            before = {n: table.class_fits(*klass, now)(n) for n in nodes}
            again = table.class_fits(*klass, now)
            for node in nodes:
                assert again(node) == table.fit(node, *klass, now), (step, action, node)
                if node != touched and action != "new class":
                    assert again(node) is before[node], (step, action, node)


def test_a_fleet_median_that_barely_moved_keeps_the_remembered_fits() -> None:
    """n1 has not learned web: its cost there is the fleet's median, n0's. Agents' footprints
    move a little with every report; the fleet's view is replaced (and every fit computed again)
    only when a median moved by more than FLEET_MOVED."""
    table = CapacityTable(Thresholds(stale_after=1e9))
    table.ingest(per_class_report("n0", 1, 0.5, {WEB[0]: 1.0}), "n0", 0.0)
    table.ingest(per_class_report("n1", 1, 0.5, {"shop/Job/other": 0.2}), "n1", 0.0)
    first = table.class_fits(*WEB, 0.0)("n1")
    assert first is not None and first.cost.source == "fleet"
    assert first.cost.footprint.cpu == 1.0
    generation = table.fleet.generation
    table.ingest(per_class_report("n0", 2, 0.5, {WEB[0]: 1.005}), "n0", 2.0)  # 0.5 %
    assert table.class_fits(*WEB, 4.0)("n1") is first
    assert table.fleet.generation == generation
    table.ingest(per_class_report("n0", 3, 0.5, {WEB[0]: 1.05}), "n0", 6.0)  # 5 %
    moved = table.class_fits(*WEB, 8.0)("n1")
    assert moved is not None and moved.cost.footprint.cpu == 1.05
    assert table.fleet.generation == generation + 1
