"""The score shape: kube-scheduler's RequestedToCapacityRatio arithmetic on measured load.

Design: docs/architecture.md#score-shape.
"""

from __future__ import annotations

import numpy as np
import pytest

from carico.footprint import EMPTY_FLEET, ClassFootprint, Footprint
from carico.pods import Requests
from protos.carico.v1 import capacity_pb2
from scheduler_ext.capacity import CapacityTable, Thresholds
from scheduler_ext.class_fit import NodeClasses, node_fit
from scheduler_ext.decisions import Decider
from scheduler_ext.pods import ExemptionPolicy, PodFacts
from scheduler_ext.shape import (
    PODS_FEATURE,
    ScoreShape,
    ShapePoint,
    class_utilisation,
    parse_shape,
    parse_weights,
    pods_utilisation,
)

from .conftest import MakeReport

GI = 2**30
PACK = ScoreShape.parse("0:0,100:10")
SPREAD = ScoreShape.parse("0:10,100:0")
# The documentation example of RequestedToCapacityRatio: weights intel.com/foo 5, cpu 3, memory 1.
EXAMPLE = ScoreShape.parse("0:0,100:10", "intel.com/foo=5,cpu=3,memory=1")
FEATURES = ("intel.com/foo", "memory", "cpu")


def measured(
    full_level: float, capacity: tuple[float, ...], used: tuple[float, ...], pod: tuple[float, ...]
) -> dict[str, int]:
    """The example's node in the agent's units: a feature's level is its use over capacity
    scaled to the full level; the free room is the full level minus the level used."""
    level = [full_level * u / c for u, c in zip(used, capacity, strict=True)]
    need = [full_level * p / c for p, c in zip(pod, capacity, strict=True)]
    free = [full_level - x for x in level]
    return class_utilisation(FEATURES, full_level, need, free)


@pytest.mark.parametrize("full_level", [0.85, 0.8, 1.0])
def test_the_documentation_example_on_measured_load(full_level: float) -> None:
    pod = (2, 256, 2)  # intel.com/foo, memory (MB), cpu
    node1 = measured(full_level, (4, 1024, 8), (1, 256, 1), pod)
    node2 = measured(full_level, (8, 1024, 8), (2, 512, 6), pod)
    # 100 % is the full level, whatever it is: the documentation's percentages, truncated
    assert node1 == {"intel.com/foo": 75, "memory": 50, "cpu": 37}
    assert node2 == {"intel.com/foo": 50, "memory": 75, "cpu": 100}
    # per feature 7, 5, 3 -> (35 + 5 + 9) / 9 = 5.4; 5, 7, 10 -> (25 + 7 + 30) / 9 = 6.9
    assert EXAMPLE.node_score(node1) == 5
    assert EXAMPLE.node_score(node2) == 7
    # In-tree, the points are scaled to 0..100 before interpolating: 536 / 9 and 625 / 9.
    assert EXAMPLE.node_score(node1, scale=10) == 60
    assert EXAMPLE.node_score(node2, scale=10) == 69


def test_interpolation_truncates_toward_zero_as_go_does() -> None:
    # 10 + (0 - 10) * 37 / 100: Go's -370 / 100 is -3, Python's floor would make it -4
    assert SPREAD.score_at(37) == 7
    assert PACK.score_at(37) == 3
    bent = ScoreShape.parse("20:0,50:10,100:4")
    assert [bent.score_at(u) for u in (0, 20, 35, 50, 75, 100)] == [0, 0, 5, 10, 7, 4]
    # past the last point the score stays flat
    assert ScoreShape.parse("10:2,60:8").score_at(90) == 8


def test_the_weighted_mean_rounds_halves_up_and_counts_zero_scores() -> None:
    even = ScoreShape.parse("0:0,100:10", "cpu=1,memory=1")
    assert even.node_score({"cpu": 50, "memory": 60}) == 6  # 5.5
    assert even.node_score({"cpu": 50, "memory": 50}) == 5
    # Upstream leaves a resource scored 0 out of the mean; here a node full on CPU is not
    # ranked by its memory alone when spreading.
    assert SPREAD.node_score({"cpu": 100, "memory": 0}) == 5
    # a feature the weights do not name does not count; no weighted feature scores 0
    assert even.node_score({"cpu": 40, "io_pressure": 100}) == 4
    assert even.node_score({"io_pressure": 100}) == 0
    # a node without per-class data is scored on its pods alone
    assert EXAMPLE.node_score({PODS_FEATURE: 80}) == 8


def test_reservations_and_the_pod_count_in_the_utilisation() -> None:
    web = ClassFootprint("shop/Deployment/web", Footprint(1.0, 1 * GI), "learned", 20)
    node = NodeClasses(
        feature_names=("cpu", "memory"),
        headroom=np.array([0.6, 0.6]),  # expected use 0.2 of full level 0.8
        scale=np.array([[1 / 8, 0.0], [0.0, 1 / (8 * GI)]]),  # 4 cores with PSI, 8 GiB
        classes={web.name: web},
        pods={web.name: 1},
        default=Footprint(0.05, 0.01 * GI),
        full_level=0.8,
        cores=4.0,
        memory_bytes=8 * GI,
    )
    idle = node_fit(node, web.name, Requests(), {}, 0, EMPTY_FLEET)
    # use 0.2 + the pod's 0.125 = 0.325 of 0.8
    assert class_utilisation(node.feature_names, 0.8, idle.need, idle.free) == {
        "cpu": 40,
        "memory": 40,
    }
    held = node_fit(node, web.name, Requests(), {(web.name, Requests()): 1}, 0, EMPTY_FLEET)
    # one more web pod reserved: 0.45 of 0.8
    assert class_utilisation(node.feature_names, 0.8, held.need, held.free) == {
        "cpu": 56,
        "memory": 56,
    }


def test_pods_utilisation_counts_reservations_and_the_pod() -> None:
    # 3 running + 1 reserved + this one, of 3 + avail 5
    assert pods_utilisation(3, 5.0, 1) == {PODS_FEATURE: 62}
    assert pods_utilisation(0, 0.0, 0) == {PODS_FEATURE: 100}  # no room at all is full
    assert pods_utilisation(0, 10.0, 0) == {PODS_FEATURE: 10}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at least one"),
        (" , ", "at least one"),
        ("0:0,100", "shape point 2 ('100'): write utilisation:score"),
        ("0:0,x:5", "shape point 2 (x:5): 'x' is not an integer"),
        ("50:5,20:3", "shape point 2 (20:3): utilisation must be greater than the previous"),
        ("0:0,50:5,50:6", "shape point 3 (50:6): utilisation must be greater"),
        ("0:0,101:10", "shape point 2 (101:10): utilisation must be in 0..100"),
        ("-1:0,100:10", "shape point 1 (-1:0): utilisation must be in 0..100"),
        ("0:0,100:11", "shape point 2 (100:11): score must be in 0..10"),
        ("0:-1", "shape point 1 (0:-1): score must be in 0..10"),
    ],
)
def test_bad_shapes_are_refused_naming_the_point(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_shape(text)
    assert message in str(err.value)


def test_a_shape_built_in_code_is_validated_too() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        ScoreShape((ShapePoint(10, 1), ShapePoint(10, 2)), {"cpu": 1})
    assert ScoreShape.parse("0:0, 100:10").text == "0:0,100:10"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no feature weights"),
        ("cpu=0", "weight of cpu is 0, not in 1..100"),
        ("cpu=101", "weight of cpu is 101, not in 1..100"),
        ("cpu=1,cpu=2", "weight of cpu given twice"),
        ("cpu", "weight 'cpu': write feature=weight"),
        ("=3", "weight '=3': write feature=weight"),
        ("cpu=1.5", "weight of cpu: '1.5' is not an integer"),
    ],
)
def test_bad_weights_are_refused_naming_the_feature(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_weights(text)
    assert message in str(err.value)


# -- prioritize over the capacity table -----------------------------------------------------

WEB = "shop/Deployment/web"
POD = PodFacts("shop", "web-1", "u1", owner_kinds=("ReplicaSet",), workload_class=WEB)


def per_class(make_report: MakeReport, node: str, cpu_headroom: float) -> capacity_pb2.NodeCapacity:
    """A 4-core, 8 GiB node (full level 0.85) that learned a web pod keeps one core busy."""
    msg = make_report(node, 10.0, feature_names=["cpu", "memory"], features=[0.3, 0.2])
    msg.headroom.extend([cpu_headroom, 0.6])
    msg.scale.extend(
        [
            capacity_pb2.FeatureScale(per_core=1 / 8),
            capacity_pb2.FeatureScale(per_byte=1 / (8 * GI)),
        ]
    )
    msg.classes.add(workload_class=WEB, cpu_cores=1.0, memory_bytes=0.1 * GI, source="learned")
    msg.full_level = 0.85
    msg.cpu_cores, msg.memory_bytes = 4.0, 8 * GI
    return msg


def _table(make_report: MakeReport, headrooms: dict[str, float]) -> CapacityTable:
    table = CapacityTable(Thresholds(stale_after=10.0))
    for node, headroom in headrooms.items():
        outcome, why = table.ingest(per_class(make_report, node, headroom), node, now=0.0)
        assert outcome.value == "accepted", why
    return table


def _ranked(decider: Decider, names: list[str], now: float = 1.0) -> list[str]:
    scores = decider.prioritize(POD, names, now).scores
    return [s.Host for s in sorted(scores, key=lambda s: -s.Score)]


def test_a_packing_shape_ranks_the_busiest_node_first_a_spreading_one_the_emptiest(
    make_report: MakeReport,
) -> None:
    # cpu headroom 0.7, 0.4, 0.15 of 0.85: busy has the least room but a web pod still fits
    headrooms = {"empty": 0.7, "half": 0.4, "busy": 0.15}
    policy = ExemptionPolicy()
    pack = Decider(_table(make_report, headrooms), policy, shape=PACK)
    spread = Decider(_table(make_report, headrooms), policy, shape=SPREAD)
    names = ["empty", "half", "busy"]
    assert _ranked(pack, names) == ["busy", "half", "empty"]
    assert _ranked(spread, names) == ["empty", "half", "busy"]
    d = pack.prioritize(POD, names, now=1.0)
    assert d.utilisation is not None
    # cpu: 0.85 - 0.15 + 0.125 = 0.825 of 0.85; memory 0.25 + 0.0125 of 0.85
    assert d.utilisation["busy"] == {"cpu": 97, "memory": 30}
    assert {s.Host: s.Score for s in d.scores}["busy"] == 6  # (9 + 3) / 2


def test_a_reservation_makes_a_node_busier_to_the_shape(make_report: MakeReport) -> None:
    table = _table(make_report, {"a": 0.4, "b": 0.4})
    pack = Decider(table, ExemptionPolicy(), shape=PACK)
    before = pack.prioritize(POD, ["a", "b"], now=1.0).utilisation
    table.add_reserved("b", 1, WEB, Requests())
    after = pack.prioritize(POD, ["a", "b"], now=1.0).utilisation
    assert before is not None and after is not None
    assert before["a"] == before["b"] == after["a"]
    assert after["b"]["cpu"] > before["b"]["cpu"]
    assert _ranked(pack, ["a", "b"]) == ["b", "a"]


def test_stale_missing_and_exempt_nodes_score_zero_with_a_shape(make_report: MakeReport) -> None:
    table = _table(make_report, {"old": 0.15})
    table.ingest(per_class(make_report, "new", 0.7), "new", now=15.0)
    pack = Decider(table, ExemptionPolicy(), shape=PACK)
    d = pack.prioritize(POD, ["old", "new", "none"], now=15.0)
    assert [s.Score for s in d.scores] == [0, 3, 0]  # new: cpu 32 %, memory 30 %
    assert (d.stale, d.missing) == (1, 1)
    assert d.utilisation is not None and set(d.utilisation) == {"new"}
    system = PodFacts("kube-system", "dns", "u2", workload_class=WEB)
    assert [s.Score for s in pack.prioritize(system, ["new"], now=15.0).scores] == [0]


def test_nodes_without_per_class_data_are_shaped_on_pods(make_report: MakeReport) -> None:
    table = CapacityTable(Thresholds(stale_after=10.0))
    table.ingest(make_report("roomy", 9.0, pods=1), "s1", now=0.0)  # 2 of 10 pods after
    table.ingest(make_report("tight", 1.0, pods=7), "s2", now=0.0)  # 8 of 8
    pack = Decider(table, ExemptionPolicy(), shape=PACK)
    d = pack.prioritize(POD, ["roomy", "tight"], now=1.0)
    assert d.utilisation == {"roomy": {PODS_FEATURE: 20}, "tight": {PODS_FEATURE: 100}}
    assert [s.Score for s in d.scores] == [2, 10]


NEW = "shop/Job/batch"  # a class no node has measured: its cost is a prior, so it is probed
NEW_POD = PodFacts("shop", "batch-1", "u2", owner_kinds=("Job",), workload_class=NEW)


def test_a_packing_shape_probes_a_new_class_on_the_cluster_not_on_every_node(
    make_report: MakeReport,
) -> None:
    """Two pods of an unmeasured class in flight on one node: spreading still lets every other
    node take two of its own (the probe is per node); packing holds the rest of the burst until
    the class is measured, instead of taking two pods to every node."""
    headrooms = {"a": 0.7, "b": 0.7, "c": 0.7}
    names = list(headrooms)
    for shape, passing in ((SPREAD, ["b", "c"]), (PACK, [])):
        table = _table(make_report, headrooms)
        decider = Decider(table, ExemptionPolicy(), shape=shape)
        assert decider.filter(NEW_POD, names, now=1.0).passed == names
        table.add_reserved("a", 2, NEW, Requests())
        assert decider.filter(NEW_POD, names, now=1.0).passed == passing, shape
    # Once running on a node (its report counts them), the pods still hold the packing probe.
    table = _table(make_report, {"b": 0.7, "c": 0.7})
    msg = per_class(make_report, "a", 0.7)
    msg.classes.add(workload_class=NEW, cpu_cores=0.1, memory_bytes=0.0, source="requests", pods=2)
    assert table.ingest(msg, "a", now=0.5)[0].value == "accepted"
    assert Decider(table, ExemptionPolicy(), shape=PACK).filter(NEW_POD, names, 1.0).passed == []
