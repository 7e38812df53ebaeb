"""The fleet's per-class medians: the store summarises the senders' learned classes (one vote per
sender and class), drops expired senders' classes, rebuilds the summary only when classes changed
(at most once per interval), and the wire carries it to the agents and, from a child aggregator,
to its parent."""

import statistics

import numpy as np
import pytest

from aggregator.store import ModelStore
from aggregator.validate import (
    MAX_CLASS_CPU,
    MAX_CLASS_MEMORY,
    MAX_FLEET_CLASSES,
    NodeEntry,
    SenderPolicy,
    validate_local_model,
)
from aggregator.wire import forward_message, global_message
from carico.footprint import Footprint, fleet_summary
from carico.pods import Requests
from protos.carico.v1 import capacity_pb2

from .conftest import learned, local_model

GI = 2.0**30
WEB = "shop/Deployment/web"
DB = "shop/StatefulSet/db"
CHILDREN = SenderPolicy(frozenset({"child"}))


class Fleet:
    """A store fed with real validated models, each node's classes given per call."""

    def __init__(self, ttl: float = 60.0, class_interval: float = 1.0) -> None:
        self.store = ModelStore(ttl=ttl, class_interval=class_interval)
        self.rng = np.random.default_rng(7)
        self.sequence = 0

    def send(
        self, node: str, classes: list[capacity_pb2.ClassFootprint], now: float = 0.0
    ) -> NodeEntry:
        self.sequence += 1
        message = local_model(
            node, self.rng.uniform(size=(2, 6)), sequence=self.sequence, classes=classes
        )
        entry, names = validate_local_model(message, None, now, (), CHILDREN)
        assert self.store.offer(entry, names) == "accepted"
        return entry


def test_the_median_of_a_class_is_over_the_senders_that_learned_it() -> None:
    fleet = Fleet()
    cpus = [0.2, 0.4, 0.5, 0.9, 3.0]
    entries = [
        fleet.send(f"n{i}", [learned(WEB, cpu, (i + 1) * GI, 0.25, GI)])
        for i, cpu in enumerate(cpus)
    ]
    entries.append(fleet.send("n9", [learned(DB, 2.0, 8 * GI, 1.0, 0.0)]))
    entries.append(fleet.send("n10", []))  # knows no class: no vote anywhere
    view = fleet.store.compute(0.0)
    assert view is not None
    assert view.fleet.classes == {WEB: Footprint(0.5, 3 * GI), DB: Footprint(2.0, 8 * GI)}
    # The ratios are medians over classes of median / requests: web 0.5/0.25 and 3 GiB/1 GiB, db
    # 2.0/1.0 and no memory request (no memory ratio from it).
    assert (view.fleet.cpu_ratio, view.fleet.memory_ratio) == (2.0, 3.0)
    assert view.class_requests == {WEB: Requests(0.25, GI), DB: Requests(1.0, 0.0)}
    # It is the core's summary of the same classes.
    assert view.fleet == fleet_summary(c for e in entries for c in e.classes)


def test_a_chatty_node_counts_once_per_class_with_its_latest_footprint() -> None:
    fleet = Fleet(class_interval=0.0)
    fleet.send("quiet-a", [learned(WEB, 1.0, GI)])
    fleet.send("quiet-b", [learned(WEB, 1.2, GI)])
    for cpu in (5.0, 6.0, 7.0, 8.0, 0.1):
        fleet.send("chatty", [learned(WEB, cpu, GI)])
    view = fleet.store.compute(0.0)
    assert view is not None and view.fleet.classes[WEB].cpu == 1.0  # median of 1.0, 1.2, 0.1


def test_expired_senders_drop_out_with_their_classes() -> None:
    fleet = Fleet(ttl=10.0)
    fleet.send("old", [learned(WEB, 4.0, GI), learned(DB, 2.0, GI)], now=0.0)
    fleet.send("new", [learned(WEB, 1.0, GI)], now=8.0)
    view = fleet.store.compute(8.0)
    assert view is not None and view.fleet.classes == {
        WEB: Footprint(2.5, GI),
        DB: Footprint(2.0, GI),
    }
    assert fleet.store.expire(12.0) == ["old"]
    view = fleet.store.compute(12.0)
    assert view is not None and view.fleet.classes == {WEB: Footprint(1.0, GI)}
    assert fleet.store.expire(20.0) == ["new"]
    assert fleet.store.compute(20.0) is None
    fleet.send("back", [], now=21.0)
    view = fleet.store.compute(21.0)
    assert view is not None and view.fleet.classes == {} and view.fleet.cpu_ratio is None


def test_the_summary_is_rebuilt_only_when_classes_changed_and_at_most_once_per_interval() -> None:
    fleet = Fleet(class_interval=1.0)
    fleet.send("a", [learned(WEB, 1.0, GI)], now=0.0)
    first = fleet.store.compute(0.0)
    assert first is not None and first.fleet.classes[WEB].cpu == 1.0
    # Models without a change of classes: the summary is not rebuilt, whatever the time.
    fleet.send("a", [learned(WEB, 1.0, GI)], now=5.0)
    fleet.send("b", [], now=5.0)
    same = fleet.store.compute(5.0)
    assert same is not None and same.fleet is first.fleet and not fleet.store.dirty
    # A change: rebuilt at once (the last rebuild was long ago).
    fleet.send("a", [learned(WEB, 3.0, GI)], now=5.0)
    changed = fleet.store.compute(5.0)
    assert changed is not None and changed.fleet.classes[WEB].cpu == 3.0
    # Another within the interval waits (the store stays dirty, so the aggregator recomputes
    # again), then shows.
    fleet.send("a", [learned(WEB, 4.0, GI)], now=5.5)
    withheld = fleet.store.compute(5.5)
    assert withheld is not None and withheld.fleet.classes[WEB].cpu == 3.0 and fleet.store.dirty
    later = fleet.store.compute(6.0)
    assert later is not None and later.fleet.classes[WEB].cpu == 4.0 and not fleet.store.dirty


def test_a_clock_that_steps_back_does_not_freeze_the_summary() -> None:
    fleet = Fleet(class_interval=1.0)
    fleet.send("a", [learned(WEB, 1.0, GI)])
    fleet.store.compute(1000.0)
    fleet.send("a", [learned(WEB, 2.0, GI)])
    view = fleet.store.compute(10.0)  # before the last rebuild: not "within the interval"
    assert view is not None and view.fleet.classes[WEB].cpu == 2.0


def test_at_most_1024_classes_are_kept_those_learned_by_the_most_senders() -> None:
    fleet = Fleet()
    for i in range(5):  # 1,280 distinct classes, 1 sender each but these
        fleet.send(
            f"n{i}",
            [learned(f"ns/Job/n{i}-{j:03d}", 1.0, GI) for j in range(255)]
            + [learned(WEB, 1.0 + i, GI)],
        )
    fleet.send("n5", [learned(DB, 1.0, GI), learned("ns/Job/n0-000", 1.0, GI)])
    fleet.send("n6", [learned(DB, 3.0, GI)])
    view = fleet.store.compute(0.0)
    assert view is not None and len(view.fleet.classes) == MAX_FLEET_CLASSES
    # Learned by 5, 2 and 2 senders: kept; the rest by name among those of one sender.
    assert {WEB, DB, "ns/Job/n0-000"} <= set(view.fleet.classes)
    assert "ns/Job/n0-001" in view.fleet.classes and "ns/Job/n4-254" not in view.fleet.classes
    assert set(view.class_requests) == set(view.fleet.classes)


def test_a_hostile_child_with_1024_huge_classes_has_one_vote_per_class() -> None:
    fleet = Fleet()
    honest = [0.3, 0.5, 0.6, 0.8, 1.0, 1.1, 1.4, 2.0, 2.5]
    for i, cpu in enumerate(honest):
        fleet.send(f"n{i}", [learned(WEB, cpu, GI), learned(DB, 2.0, 4 * GI)])
    baseline = fleet.store.compute(0.0)
    assert baseline is not None
    # As huge as validation lets through, for the fleet's classes and 1,022 invented ones.
    huge = [
        learned(name, MAX_CLASS_CPU, MAX_CLASS_MEMORY, 1e-3, 1.0)
        for name in [WEB, DB, *(f"evil/Job/{k}" for k in range(MAX_FLEET_CLASSES - 2))]
    ]
    fleet.send("child", huge)
    view = fleet.store.compute(5.0)
    assert view is not None
    # One more vote moves a median of nine at most to halfway to the next honest value.
    ordered = sorted(honest)
    assert ordered[4] <= view.fleet.classes[WEB].cpu <= ordered[5]
    assert view.fleet.classes[WEB].memory == GI
    assert view.fleet.classes[DB] == Footprint(2.0, 4 * GI)  # all honest nodes agree: unmoved
    # The classes many nodes learned stay among the 1,024 published.
    assert {WEB, DB} <= set(view.fleet.classes)


def test_a_child_aggregators_classes_are_its_medians_one_vote_each_at_the_parent() -> None:
    child = Fleet(class_interval=0.0)
    for i, cpu in enumerate([1.0, 2.0, 3.0, 4.0, 5.0]):
        child.send(f"c{i}", [learned(WEB, cpu, GI, 0.5, GI)])
    child.send("c9", [learned(DB, 7.0, GI)])
    child_view = child.store.compute(0.0)
    assert child_view is not None
    forwarded = forward_message(child_view, "child", 1, 0.0)
    assert [(c.workload_class, c.cpu_cores, c.source) for c in forwarded.class_footprints] == [
        (WEB, 3.0, "learned"),
        (DB, 7.0, "learned"),
    ]
    assert forwarded.class_footprints[0].request_cpu_cores == 0.5
    parent = Fleet()
    entry, names = validate_local_model(forwarded, None, 0.0, (), CHILDREN)
    assert parent.store.offer(entry, names) == "accepted" and entry.weight == 6
    parent.send("p1", [learned(WEB, 10.0, GI)])
    parent.send("p2", [learned(WEB, 20.0, GI)])
    view = parent.store.compute(0.0)
    # The child's five nodes are one vote (its median 3.0) beside the parent's own two nodes.
    assert view is not None and view.fleet.classes[WEB].cpu == statistics.median([3.0, 10, 20])
    assert view.fleet.classes[DB].cpu == 7.0


def test_the_reply_carries_the_medians_their_requests_and_the_ratios() -> None:
    fleet = Fleet()
    fleet.send("a", [learned(WEB, 0.5, 2 * GI, 0.25, GI), learned(DB, 2.0, GI)])
    fleet.send("b", [learned(WEB, 1.5, 4 * GI, 0.25, GI)])
    view = fleet.store.compute(0.0)
    reply = global_message(view, 3, "agg", 0.0)
    medians = {c.workload_class: c for c in reply.priors.class_medians}
    assert set(medians) == {WEB, DB}
    web = medians[WEB]
    assert (web.cpu_cores, web.memory_bytes, web.source) == (1.0, 3 * GI, "fleet")
    assert (web.request_cpu_cores, web.request_memory_bytes) == (0.25, GI)
    assert (medians[DB].request_cpu_cores, medians[DB].request_memory_bytes) == (0.0, 0.0)
    # Only web requests anything: its ratios are the fleet's.
    assert reply.priors.cpu_request_ratio == pytest.approx(4.0)
    assert reply.priors.memory_request_ratio == pytest.approx(3.0)
    # A reply built again from the same view is the same message.
    assert global_message(view, 3, "agg", 0.0) == reply


def test_without_classes_the_reply_has_no_medians_and_zero_ratios() -> None:
    fleet = Fleet()
    fleet.send("a", [learned(DB, 2.0, GI)])  # requests nothing: no ratio to learn
    reply = global_message(fleet.store.compute(0.0), 1, "agg", 0.0)
    assert [c.workload_class for c in reply.priors.class_medians] == [DB]
    assert (reply.priors.cpu_request_ratio, reply.priors.memory_request_ratio) == (0.0, 0.0)
    empty = Fleet()
    empty.send("a", [])
    reply = global_message(empty.store.compute(0.0), 1, "agg", 0.0)
    assert not reply.priors.class_medians and reply.priors.cpu_request_ratio == 0.0
