"""What keeps a solve inside its time budget on large clusters, and keeps it right.

The budget itself is measured by ``make bench BENCH_ARGS=repack`` and the note's large-cluster
runs (timings do not belong in pass/fail tests); here: the shortcuts taken to stay inside it give
the same answers, and are taken only when the time is short.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from ortools.sat.python import cp_model
from repack_builders import fragmentation_list, kube_list, node_obj, pod_obj

from repack.cpsat.model import PhaseModels
from repack.driver.context import SolveContext
from repack.driver.dispatch import start_phase
from repack.driver.options import SolveOptions, Tuning
from repack.driver.phase import search_beside, searched
from repack.driver.search import NOT_RUN, StopAbove, WholeSearch
from repack.problem.classes import (
    build_problem,
    current_assignment,
    empty_assignment,
    feasible,
    tier_value,
)
from repack.problem.eligibility import eligible
from repack.problem.generator import Cell, instances
from repack.problem.snapshot import parse_list
from repack.search import heuristics
from repack.search.heuristics import best_start

GPU_TAINT = {"key": "gpu", "value": "y", "effect": "NoSchedule"}
TOLERATE_GPU = {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "y"}]}
SSD = {"nodeSelector": {"disk": "ssd"}}
NOT_A = {"key": "metadata.name", "operator": "NotIn", "values": ["a"]}
NOT_ON_A = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [NOT_A]}]
            }
        }
    }
}


def test_each_class_is_eligible_exactly_where_each_of_its_pods_is() -> None:
    # pods share their eligibility per combination of selector, affinity and tolerations: pods
    # with the same requests but other rules must not share it
    rules: list[dict[str, Any]] = [{}, TOLERATE_GPU, SSD, {**SSD, **TOLERATE_GPU}, NOT_ON_A]
    items = [
        node_obj("a"),
        node_obj("b", taints=[GPU_TAINT]),
        node_obj("c", labels={"disk": "ssd"}),
        node_obj("d", labels={"disk": "ssd"}, taints=[GPU_TAINT]),
        node_obj("e", unschedulable=True),
    ]
    for i, spec in enumerate(rules):
        for j, cpu in enumerate(("100m", "100m", "200m")):
            items.append(pod_obj(f"p{i}-{j}", cpu, "1M", spec=spec))
    snapshot = parse_list(kube_list(*items))
    problem = build_problem(snapshot)
    class_of = {key: c for c, cls in enumerate(problem.classes) for key in cls.pending}
    kinds = set()
    for pod in snapshot.pods:
        want = frozenset(n for n, node in enumerate(snapshot.nodes) if eligible(pod, node))
        assert problem.classes[class_of[pod.key]].eligible == want, pod.key
        kinds.add((pod.requests["cpu"], want))
    # one class per request size and set of eligible nodes (the selector and the affinity both
    # leave node c alone, so those pods share classes)
    assert len(problem.classes) == len(kinds) == 8


def test_a_search_whose_model_would_outlast_its_time_is_not_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = build_problem(parse_list(fragmentation_list()))
    search = WholeSearch(problem, SolveOptions(time_limit=1), lambda: 0.0)
    built: list[int] = []
    build = PhaseModels.build

    def counted(self: PhaseModels, tier: int, *args: Any) -> Any:
        built.append(tier)
        return build(self, tier, *args)

    monkeypatch.setattr(PhaseModels, "build", counted)
    hint = current_assignment(problem)
    declined = search.run(0, True, [], hint, 1e-7, None)
    assert not declined.ran and declined.solution is None
    assert declined.status == cp_model.UNKNOWN
    assert built == []  # declined before building anything
    # with time for it, the same call builds the model and finds the one-move placement
    found = search.run(0, True, [], hint, 5.0, None)
    assert found.ran and built == [0]
    assert found.solution is not None and tier_value(problem, found.solution, 0)[0] == 10


@pytest.mark.parametrize(("until", "want"), [(math.inf, [False, True]), (0.0, [])])
def test_starts_repack_from_scratch_only_while_time_is_left(
    monkeypatch: pytest.MonkeyPatch, until: float, want: list[bool]
) -> None:
    problem = build_problem(parse_list(fragmentation_list()))
    calls: list[bool] = []
    original = heuristics.pack_from_scratch

    def counted(*args: Any) -> Any:
        calls.append(args[-1])  # best_fit
        return original(*args)

    monkeypatch.setattr(heuristics, "pack_from_scratch", counted)
    x, ok = best_start(problem, [[0] * 3 for _ in problem.classes], 0, until, lambda: 1.0)
    # with the time spent, the start keeps the pods where they run (and is still valid)
    assert ok and feasible(problem, x)
    assert tier_value(problem, x, 0)[0] >= 9
    assert calls == want


def test_the_work_beside_a_declined_search_keeps_the_phase() -> None:
    # a model too large to build in time: no search thread, and the work beside it keeps the
    # solve's own clock (a clock that ended with a search that never ran ended the phase at once
    # on 256 nodes, 2 of 10 s unused)
    ((_, snapshot),) = instances(Cell(32, 8, 100, 1), 1)
    problem = build_problem(snapshot)
    tier = problem.tiers[0]
    start, _ = best_start(problem, empty_assignment(problem), tier)
    slow_build = replace(Tuning(), setup_seconds_per_variable=1e6)
    options = SolveOptions(time_limit=10, workers=2, tuning=slow_build)
    now = [0.0]
    ctx = SolveContext(problem, options, lambda: now[0], 10.0)
    st = start_phase(ctx, tier, "place", [], start, start, 256)
    beside = search_beside(ctx, st, start, 10.0, StopAbove(256))
    assert beside.thread is None
    now[0] = 4.0
    assert beside.clock() == 4.0  # the solve's clock, not one that ended
    assert searched(ctx, st, beside, lambda: False) == NOT_RUN
    assert st.steps == []  # no search step: none ran


def test_a_search_is_started_only_with_twice_the_time_to_build_its_model() -> None:
    # a search that spends its time building its model finds nothing and overruns the phase
    problem = build_problem(instances(Cell(32, 4, 100, 1), 1)[0][1])
    tier = problem.tiers[0]
    search = WholeSearch(problem, SolveOptions(time_limit=1, workers=2), lambda: 0.0)
    build = Tuning().setup_seconds_per_variable * search.models.variables(tier)
    assert build > 0.01  # 32 nodes: thousands of variables
    assert search.searchable(tier, 2 * build)
    assert not search.searchable(tier, 1.9 * build)
