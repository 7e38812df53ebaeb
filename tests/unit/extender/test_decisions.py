"""Filter, prioritize and preempt rules, exemptions and the stale-data policy.

Design: docs/architecture.md#decisions.
"""

from __future__ import annotations

import pytest

from scheduler_ext.capacity import CapacityTable, Thresholds
from scheduler_ext.decisions import Decider
from scheduler_ext.ledger import StaleData
from scheduler_ext.pods import ExemptionPolicy, PodFacts
from scheduler_ext.wire import HostPriority, MetaPod, MetaVictims

from .conftest import MakeReport

POD = PodFacts("shop", "web-1", "u1", owner_kinds=("ReplicaSet",))


def _decider(
    make_report: MakeReport,
    avails: dict[str, float],
    *,
    policy: StaleData = StaleData.FAIL_OPEN,
    threshold: float = 1.0,
    namespaces: frozenset[str] = frozenset({"kube-system"}),
) -> Decider:
    table = CapacityTable(Thresholds(threshold=threshold, stale_after=10.0))
    for node, avail in avails.items():
        table.ingest(make_report(node, avail), "s", now=0.0)
    return Decider(table, ExemptionPolicy(namespaces), policy)


def test_filter_threshold_boundary_and_reasons(make_report: MakeReport) -> None:
    d = _decider(make_report, {"a": 1.0, "b": 0.99, "c": 7.0})
    result = d.filter(POD, ["c", "b", "a"], now=1.0)
    assert result.passed == ["c", "a"]  # input order kept
    assert result.failed == {"b": "carico: avail 0.99 - reserved 0 < 1"}
    assert result.unresolvable == {} and result.exempt is None
    d.table.add_reserved("c", 6)
    assert d.filter(POD, ["c"], now=1.0).passed == ["c"]  # 7 - 6 = 1 still fits one pod
    d.table.add_reserved("c", 1)
    assert d.filter(POD, ["c"], now=1.0).failed == {"c": "carico: avail 7 - reserved 7 < 1"}


def test_filter_with_a_higher_threshold(make_report: MakeReport) -> None:
    d = _decider(make_report, {"a": 2.0, "b": 3.0}, threshold=3.0)
    assert d.filter(POD, ["a", "b"], now=1.0).passed == ["b"]


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        (PodFacts("mon", "agent", owner_kinds=("DaemonSet",)), "owned by a DaemonSet"),
        (PodFacts("infra", "etcd-n1", mirror=True), "static (mirror) pod"),
        (
            PodFacts("apps", "dns", priority_class="system-node-critical"),
            "priority class system-node-critical",
        ),
        (
            PodFacts("apps", "dns", priority_class="system-cluster-critical"),
            "priority class system-cluster-critical",
        ),
        (PodFacts("kube-system", "proxy"), "namespace kube-system is excluded"),
        (PodFacts("batch", "job-1"), "namespace batch is excluded"),
    ],
)
def test_exempt_pods_pass_untouched(make_report: MakeReport, pod: PodFacts, reason: str) -> None:
    d = _decider(make_report, {"full": 0.0}, namespaces=frozenset({"kube-system", "batch"}))
    result = d.filter(pod, ["full", "nodata"], now=1.0)
    assert result.exempt == reason
    assert result.passed == ["full", "nodata"] and result.failed == {}
    scores = d.prioritize(pod, ["full"], now=1.0)
    assert scores.exempt == reason and scores.scores == [HostPriority("full", 0)]
    victims = {"full": MetaVictims([MetaPod("v")]), "none": MetaVictims([], 0)}
    assert d.preempt(pod, victims, now=1.0).kept == {"full": victims["full"]}


def test_ordinary_pods_are_not_exempt() -> None:
    policy = ExemptionPolicy()
    assert policy.reason(POD) is None
    assert policy.reason(PodFacts("shop", "x", priority_class="high")) is None


def test_stale_and_missing_fail_open(make_report: MakeReport) -> None:
    d = _decider(make_report, {"old": 0.0})
    d.table.ingest(make_report("new", 0.2), "s", now=15.0)
    result = d.filter(POD, ["old", "new", "none"], now=15.0)
    # The stale node passes despite its failing old data; the fresh failing one fails.
    assert result.passed == ["old", "none"]
    assert result.failed == {"new": "carico: avail 0.2 - reserved 0 < 1"}
    assert (result.stale, result.missing) == (1, 1)


def test_stale_and_missing_fail_closed(make_report: MakeReport) -> None:
    d = _decider(make_report, {"old": 5.0}, policy=StaleData.FAIL_CLOSED)
    d.table.ingest(make_report("new", 5.0), "s", now=15.0)
    result = d.filter(POD, ["old", "new", "none"], now=15.0)
    assert result.passed == ["new"]
    assert result.unresolvable == {
        "old": "carico: capacity data of node old is 15s old (stale after 10s)",
        "none": "carico: no capacity report for node none",
    }
    assert result.failed == {}


def test_prioritize_scales_to_the_best_candidate(make_report: MakeReport) -> None:
    d = _decider(make_report, {"a": 8.0, "b": 4.0, "c": 1.0, "d": 0.5, "e": 0.0})
    d.table.add_reserved("d", 1)  # free -0.5 clamps to 0
    result = d.prioritize(POD, ["a", "b", "c", "d", "e", "none"], now=1.0)
    assert [(s.Host, s.Score) for s in result.scores] == [
        ("a", 10),
        ("b", 5),
        ("c", 1),  # 1.25 rounds to 1
        ("d", 0),
        ("e", 0),
        ("none", 0),
    ]
    assert result.missing == 1
    # The best among the candidates, not the cluster: b alone scores 10.
    assert d.prioritize(POD, ["b", "c"], now=1.0).scores == [
        HostPriority("b", 10),
        HostPriority("c", 3),  # 2.5 rounds half up
    ]


def test_prioritize_stale_scores_zero_and_no_room_scores_zero(make_report: MakeReport) -> None:
    d = _decider(make_report, {"old": 9.0})
    d.table.ingest(make_report("new", 3.0), "s", now=15.0)
    result = d.prioritize(POD, ["old", "new"], now=15.0)
    assert result.scores == [HostPriority("old", 0), HostPriority("new", 10)]
    assert result.stale == 1
    empty = _decider(make_report, {"x": 0.0, "y": 0.0})
    assert [s.Score for s in empty.prioritize(POD, ["x", "y"], now=1.0).scores] == [0, 0]
    assert empty.prioritize(POD, [], now=1.0).scores == []


def test_preempt_counts_one_unit_per_victim(make_report: MakeReport) -> None:
    d = _decider(make_report, {"a": 0.0, "b": 0.3, "c": 0.0})
    d.table.add_reserved("c", 2)  # free -2
    victims = {
        "a": MetaVictims([MetaPod("v1")], NumPDBViolations=1),
        "b": MetaVictims([]),
        "c": MetaVictims([MetaPod("v2"), MetaPod("v3")]),
    }
    result = d.preempt(POD, victims, now=1.0)
    assert result.kept == {"a": victims["a"]}  # passed back unchanged
    assert result.dropped == {
        "b": "carico: no victims given for this node",
        "c": "carico: avail - reserved -2 + 2 victim(s) < 1",
    }


def test_preempt_follows_the_stale_policy(make_report: MakeReport) -> None:
    victims = {"none": MetaVictims([MetaPod("v")])}
    open_ = _decider(make_report, {})
    assert open_.preempt(POD, victims, now=1.0).kept == victims
    closed = _decider(make_report, {}, policy=StaleData.FAIL_CLOSED)
    result = closed.preempt(POD, victims, now=1.0)
    assert result.kept == {} and "no capacity report" in result.dropped["none"]


@pytest.mark.parametrize("policy", list(StaleData))
def test_loop_and_vectorised_paths_agree(make_report: MakeReport, policy: StaleData) -> None:
    import random

    rng = random.Random(11)  # seeded: the same mixed table every run
    table = CapacityTable(Thresholds(threshold=1.0, stale_after=10.0))
    names = [f"n{i}" for i in range(600)]
    for name in names[:500]:  # n500..n599 never report
        received = rng.choice([0.0, 12.0])  # at now=15: stale or fresh
        table.ingest(make_report(name, rng.uniform(0, 4)), "s", now=received)
        table.add_reserved(name, rng.choice([0, 0, 1, 2]))
    d = Decider(table, ExemptionPolicy(), policy)
    for _ in range(20):
        sample = rng.sample(names, 300)
        assert d._filter_small(sample, 15.0) == d._filter_vector(sample, 15.0)
        assert d._prioritize_small(sample, 15.0) == d._prioritize_vector(sample, 15.0)
    # The public entry points pick a path by size and give the same answers.
    few = names[490:510]
    assert d.filter(POD, few, 15.0) == d._filter_vector(few, 15.0)
    assert d.prioritize(POD, few, 15.0) == d._prioritize_vector(few, 15.0)


def test_pods_of_unmanaged_schedulers_pass_through(make_report: MakeReport) -> None:
    # kube-scheduler sends every profile's pods to the extender; only managed ones are decided.
    d = _decider(make_report, {"full": 0.0})
    other = PodFacts("shop", "web-2", "u2", scheduler="default-scheduler")
    result = d.filter(other, ["full"], now=1.0)
    assert result.passed == ["full"] and result.failed == {}
    assert result.exempt == "scheduler default-scheduler is not managed by Carico"
    managed = PodFacts("shop", "web-3", "u3", scheduler="carico-scheduler")
    assert d.filter(managed, ["full"], now=1.0).failed.keys() == {"full"}


def test_managed_schedulers_policy() -> None:
    default = ExemptionPolicy()
    assert default.reason(PodFacts("shop", "a", scheduler="carico-scheduler")) is None
    assert default.reason(PodFacts("shop", "a", scheduler="default-scheduler")) is not None
    # Unknown scheduler (a bind of a pod no filter described): treated as managed.
    assert default.reason(PodFacts("shop", "a")) is None
    everything = ExemptionPolicy(managed_schedulers=frozenset())
    assert everything.reason(PodFacts("shop", "a", scheduler="default-scheduler")) is None
    two = ExemptionPolicy(managed_schedulers=frozenset({"carico-scheduler", "batch"}))
    assert two.reason(PodFacts("shop", "a", scheduler="batch")) is None
    assert two.reason(PodFacts("shop", "a", scheduler="other")) is not None


def test_remembered_candidate_lists_follow_table_changes(make_report: MakeReport) -> None:
    import json

    table = CapacityTable(Thresholds(threshold=1.0, stale_after=10.0))
    names = [f"n{i}" for i in range(300)]  # above both loop thresholds: the vectorised path
    for i, name in enumerate(names[:250]):
        table.ingest(make_report(name, float(i % 4)), "s", now=0.0)
    d = Decider(table, ExemptionPolicy())
    raw = json.dumps(names).encode()
    decoded: list[bytes] = []

    def decode(b: bytes) -> list[str]:
        decoded.append(b)
        result: list[str] = json.loads(b)
        return result

    checked: list[list[str]] = []

    def check(unknown: list[str]) -> None:
        checked.append(unknown)
        if "bad" in unknown:
            raise ValueError("bad name")

    first = d.candidates(raw, decode, check)
    assert d.candidates(raw, decode, check) is first and len(decoded) == 1  # decoded once, kept
    # Only the names without a report are checked (those with one were checked at ingest).
    assert checked == [names[250:]]
    assert d.filter(POD, first, 1.0) == d.filter(POD, list(names), 1.0)
    # New nodes report (new slots), others are forgotten (slots freed and reused): the kept list
    # must resolve again rather than read another node's verdict from a stale slot.
    for name in names[250:]:
        table.ingest(make_report(name, 0.0), "s", now=15.0)
    table.forget_older_than(now=20.0, age=18.0)  # drops n0..n249 (reported at 0)
    table.ingest(make_report("other", 9.0), "s", now=20.0)  # takes a freed slot
    fresh = d.filter(POD, list(names), 20.0)
    assert d.filter(POD, d.candidates(raw, decode, check), 20.0) == fresh
    kept = d.candidates(raw, decode, check)
    assert d.prioritize(POD, kept, 20.0) == d.prioritize(POD, names, 20.0)
    assert fresh.failed.keys() == set(names[250:]) and fresh.missing == 250
    # A bad list is not remembered.
    with pytest.raises(ValueError):
        d.candidates(b"[", decode, check)
    with pytest.raises(ValueError):
        d.candidates(b"[", decode, check)
    assert decoded.count(b"[") == 2
    # ... nor is one that fails the check.
    bad = json.dumps(["other", "bad"]).encode()
    for _ in range(2):
        with pytest.raises(ValueError):
            d.candidates(bad, decode, check)
    assert decoded.count(bad) == 2 and checked[-1] == ["bad"]


def test_the_passed_list_is_remembered_for_the_prioritize_that_follows(
    make_report: MakeReport,
) -> None:
    """kube-scheduler asks prioritize about exactly the list the filter passed, encoded as Go
    encodes a []string (compact, as msgspec): remembered with its slots, it is not decoded,
    checked or looked up again, and decides as the names would."""
    import json

    from scheduler_ext import wire

    table = CapacityTable(Thresholds(threshold=1.0, stale_after=10.0))
    names = [f"n{i}" for i in range(300)]  # above both loop thresholds: the vectorised path
    for i, name in enumerate(names[:280]):
        table.ingest(make_report(name, float(i % 4)), "s", now=0.0)
    d = Decider(table, ExemptionPolicy())
    decision = d.filter(POD, names, 1.0)
    assert 0 < len(decision.passed) < len(names)  # some fail (free 0)
    raw = wire.encode(decision.passed)
    assert raw == json.dumps(decision.passed, separators=(",", ":")).encode()
    d.expect(raw, decision)

    def decode(b: bytes) -> list[str]:
        raise AssertionError("a remembered list is not decoded again")

    def check(unknown: list[str]) -> None:
        raise AssertionError("a remembered list is not checked again")

    kept = d.candidates(raw, decode, check)
    assert kept.names == decision.passed and kept.safe is not None
    assert d.prioritize(POD, kept, 1.0) == d.prioritize(POD, list(decision.passed), 1.0)
    # Failing some passed nodes afterwards (nodes held by pods in flight) keeps the passed
    # nodes' slots aligned with them.
    dropped = {decision.passed[0]: "held", decision.passed[-1]: "held"}
    decision.fail(dropped)
    assert dropped.keys() <= decision.failed.keys()
    shorter = wire.encode(decision.passed)
    d.expect(shorter, decision)
    after = d.candidates(shorter, decode, check)
    assert after.safe is not None and len(after.safe) == len(decision.passed)
    assert d.prioritize(POD, after, 1.0) == d.prioritize(POD, list(decision.passed), 1.0)
    # the slots move on with the table: a new layout resolves the names again
    table.forget_older_than(now=20.0, age=19.0)
    table.ingest(make_report("other", 9.0), "s", now=20.0)
    assert d.prioritize(POD, kept, 20.0) == d.prioritize(POD, list(kept.names), 20.0)
