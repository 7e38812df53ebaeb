"""The per-class filter and prioritize over table slots give the answers of the per-node loops."""

from __future__ import annotations

import random

import pytest

from carico.pods import Requests
from scheduler_ext.capacity import CapacityTable, Thresholds
from scheduler_ext.decisions import SMALL_CLASSES, Candidates, Decider
from scheduler_ext.ledger import StaleData
from scheduler_ext.pods import ExemptionPolicy, PodFacts

from .conftest import MakeReport
from .test_class_fits_remembered import NEW, WEB, per_class_report

STALE_AFTER = 10.0


def _pod(klass: tuple[str, Requests]) -> PodFacts:
    return PodFacts(
        name="p", namespace="shop", uid="u1", workload_class=klass[0], requests=klass[1]
    )


def _check(d: Decider, pod: PodFacts, names: list[str], now: float) -> None:
    """Both paths on ``names``: the same decision, explanation, little room and scores."""
    small = d._filter_classes(pod, names, now)
    vector = d._filter_classes_vector(pod, Candidates(names), now)
    assert vector.passed == small.passed
    assert vector.failed == small.failed
    assert vector.unresolvable == small.unresolvable
    assert (vector.stale, vector.missing) == (small.stale, small.missing)
    assert small.fits is not None and vector.fits is not None
    assert vector.fits() == small.fits()
    assert small.little_room is not None and vector.little_room is not None
    for limit in (1.0, 3.0, 50.0):
        assert sorted(vector.little_room(limit)) == sorted(small.little_room(limit))
    # a node failed afterwards (held by pods in flight) is no longer one with little room
    if vector.passed:
        held = vector.passed[0]
        for decision in (small, vector):
            decision.failed[held] = "carico: room held for pods being bound: p"
            decision.passed = decision.passed[1:]
            assert decision.little_room is not None
            assert held not in dict(decision.little_room(50.0))
    assert d._prioritize_vector(Candidates(names), now, pod) == d._prioritize_small(names, now, pod)


@pytest.mark.parametrize("policy", list(StaleData))
def test_the_vector_paths_agree_with_the_loops_as_the_table_moves(
    make_report: MakeReport, policy: StaleData
) -> None:
    """A mixed table (nodes with per-class data, nodes with one cost per pod, stale nodes,
    candidates with no report) changed at random by reports, reservations of both classes and
    time passing: after every step both classes get the same answers from both paths."""
    rng = random.Random(5)  # seeded: the same sequence of tables every run
    table = CapacityTable(Thresholds(threshold=1.0, stale_after=STALE_AFTER))
    d = Decider(table, ExemptionPolicy(), policy)
    nodes = [f"n{i}" for i in range(140)]
    per_class, one_cost = nodes[:90], nodes[90:120]  # n120..n139 never report
    sequence = dict.fromkeys(nodes, 0)
    now = 20.0

    def report(node: str, at: float) -> None:
        sequence[node] += 1
        if node in per_class:
            msg = per_class_report(
                node, sequence[node], rng.uniform(0.0, 0.6), {WEB[0]: rng.uniform(0.2, 2.0)}
            )
        else:
            msg = make_report(node, rng.uniform(0.0, 4.0), sequence=sequence[node])
        assert table.ingest(msg, node, at)[0].value == "accepted"

    for node in per_class + one_cost:
        report(node, rng.choice([now - 12.0, now - 1.0]))  # stale or fresh
    reserved: list[tuple[str, tuple[str, Requests]]] = []
    for _ in range(60):
        action = rng.choice(("report", "report", "reserve", "release", "time"))
        if action == "report":
            report(rng.choice(per_class + one_cost), now)
        elif action == "reserve":
            node, klass = rng.choice(per_class + one_cost), rng.choice((WEB, NEW))
            table.add_reserved(node, 1, *klass)
            reserved.append((node, klass))
        elif action == "release" and reserved:
            node, klass = reserved.pop(rng.randrange(len(reserved)))
            table.add_reserved(node, -1, *klass)
        elif action == "time":
            now += rng.uniform(0.5, 3.0)
        sample = rng.sample(nodes, rng.randint(SMALL_CLASSES + 1, len(nodes)))
        for klass in (WEB, NEW):
            _check(d, _pod(klass), sample, now)


def test_the_entry_points_decide_long_and_short_lists_alike() -> None:
    """``filter`` and ``prioritize`` decide a list longer than ``SMALL_CLASSES`` (the vector
    path) as they decide a short one (the loop), and a node's fit is computed again only after
    its node moved on."""
    table = CapacityTable(Thresholds(stale_after=1e9))
    nodes = [f"n{i}" for i in range(SMALL_CLASSES + 10)]
    for i, node in enumerate(nodes):
        headroom = 0.02 if i % 3 == 0 else 0.4  # every third node has no room for a web pod
        assert table.ingest(per_class_report(node, 1, headroom, {WEB[0]: 1.0}), node, 0.0)[0]
    d = Decider(table, ExemptionPolicy())
    pod = _pod(WEB)
    full = d.filter(pod, Candidates(nodes), 1.0)
    assert full.failed.keys() == {n for i, n in enumerate(nodes) if i % 3 == 0}
    assert set(full.failed.values()) == {"carico: no room for a pod of shop/Deployment/web (cpu)"}
    assert full.passed == [n for i, n in enumerate(nodes) if i % 3 != 0]
    short = d.filter(pod, nodes[:SMALL_CLASSES], 1.0)
    assert short.passed == [n for n in full.passed if n in nodes[:SMALL_CLASSES]]
    view = table.class_view(*WEB, 1.0)
    remembered = {n: view.fit[table.slot[n]] for n in nodes}
    assert all(f is not None for f in remembered.values())
    table.add_reserved("n1", 1, *WEB)  # n1 moved on; the others did not
    again = d.filter(pod, Candidates(nodes), 2.0)
    fits = again.fits() if again.fits is not None else {}
    assert fits["n1"] is not remembered["n1"]
    assert all(fits[n] is remembered[n] for n in nodes if n != "n1")
    assert fits["n1"].free[0] < remembered["n1"].free[0]  # the reservation is charged
    scores = {h.Host: h.Score for h in d.prioritize(pod, Candidates(nodes), 2.0).scores}
    assert scores["n0"] < scores["n1"] < scores["n2"] == 10  # n1 has one pod reserved
