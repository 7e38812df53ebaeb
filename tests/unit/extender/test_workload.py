"""The global workload a report carries: validation, storage per node and the /api/v1/model view."""

from __future__ import annotations

import math
from typing import Any

import pytest

from protos.carico.v1 import capacity_pb2
from scheduler_ext.capacity import CapacityTable, Ingest, Thresholds
from scheduler_ext.workload import model_view

from .conftest import MakeReport


def workload(**changes: Any) -> capacity_pb2.GlobalWorkload:
    values: dict[str, Any] = {
        "has_model": True,
        "expected_workload": [0.3, 0.4],
        "feature_names": ["cpu", "memory"],
        "version": 5,
        "computed_at": 1.7e9,
        "age_seconds": 2.0,
        "contributing_nodes": 3,
        "aggregator": "agg-a",
    }
    values.update(changes)
    return capacity_pb2.GlobalWorkload(**values)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"expected_workload": [0.3, math.nan]}, "memory = nan"),
        ({"expected_workload": [-0.1, 0.4]}, "cpu = -0.1"),
        ({"expected_workload": [1.5, 0.1]}, "outside [0, √d = 1.41]"),  # √2 bounds w in 2-D
        ({"expected_workload": [0.3]}, "differ in length"),
        ({"expected_workload": [], "feature_names": []}, "0 values"),
        ({"feature_names": ["cpu", "cpu"]}, "unique"),
        ({"age_seconds": -1.0}, "age_seconds is -1.0"),
        ({"computed_at": math.inf}, "computed_at is inf"),
        # What the table keeps of each node stays small.
        ({"feature_names": ["cpu", "m" * 64]}, "longer than 63"),
        ({"aggregator": "a" * (1 << 20)}, "aggregator is 1048576 characters long"),
        ({"aggregator": "Agg A"}, "not a DNS-1123 subdomain"),
    ],
)
def test_a_bad_global_workload_refuses_the_report(
    make_report: MakeReport, changes: dict[str, Any], fragment: str
) -> None:
    table = CapacityTable()
    outcome, why = table.ingest(
        make_report("n1", 2.0, global_workload=workload(**changes)), "s", now=0.0
    )
    assert outcome is Ingest.INVALID and fragment in why, why
    assert table.report("n1") is None


def test_the_table_keeps_each_nodes_global_workload(make_report: MakeReport) -> None:
    table = CapacityTable()
    assert table.ingest(make_report("n1", 2.0, global_workload=workload()), "s", 0.0)[0] is (
        Ingest.ACCEPTED
    )
    assert table.ingest(make_report("n2", 2.0), "t", 0.0)[0] is Ingest.ACCEPTED  # older agent
    off = workload(has_model=False, expected_workload=[], feature_names=[])
    assert table.ingest(make_report("n3", 2.0, global_workload=off), "u", 0.0)[0] is (
        Ingest.ACCEPTED
    )
    n1, n2, n3 = (table.report(n) for n in ("n1", "n2", "n3"))
    assert n1 is not None and n1.global_workload is not None
    assert n1.global_workload.expected_workload == (0.3, 0.4)
    assert n1.global_workload.feature_names == ("cpu", "memory")
    assert (n1.global_workload.version, n1.global_workload.aggregator) == (5, "agg-a")
    assert n2 is not None and n2.global_workload is None
    assert n3 is not None and n3.global_workload is None


def _table_with(reports: list[capacity_pb2.NodeCapacity], at: list[float]) -> CapacityTable:
    table = CapacityTable(Thresholds(stale_after=10.0))
    for i, (msg, now) in enumerate(zip(reports, at, strict=True)):
        msg.health.global_model = True
        assert table.ingest(msg, i, now)[0] is Ingest.ACCEPTED
    return table


def test_the_view_shows_the_youngest_model_and_each_nodes_version(
    make_report: MakeReport,
) -> None:
    table = _table_with(
        [
            make_report("old", 1.0, global_workload=workload(version=4, age_seconds=1.0)),
            make_report(
                "new",
                1.0,
                global_workload=workload(version=5, age_seconds=3.0, expected_workload=[0.2, 0.6]),
            ),
            make_report("none", 1.0),
        ],
        at=[100.0, 104.0, 104.0],
    )
    view = model_view(table.reports(), 105.0, table.is_fresh)
    # old: 1 s at the agent + 5 s since it arrived = 6 s; new: 3 + 1 = 4 s, so "new" wins.
    assert view["available"] and not view["stale"]
    assert view["reported_by"] == "new" and view["version"] == 5
    assert view["expected_workload"] == [0.2, 0.6] and view["feature_names"] == ["cpu", "memory"]
    assert view["age_seconds"] == 4.0 and view["contributing_nodes"] == 3
    assert view["nodes"] == {
        "old": {"version": 4, "age_seconds": 6.0},
        "new": {"version": 5, "age_seconds": 4.0},
        "none": None,
    }


def test_the_view_marks_a_stale_or_unmerged_model(make_report: MakeReport) -> None:
    table = _table_with([make_report("a", 1.0, global_workload=workload())], at=[100.0])
    assert not model_view(table.reports(), 105.0, table.is_fresh)["stale"]
    assert model_view(table.reports(), 111.0, table.is_fresh)["stale"]  # node data stale
    unmerged = make_report("a", 1.0, sequence=2, global_workload=workload())
    unmerged.health.global_model = False  # past the agent's global TTL
    assert table.ingest(unmerged, 0, 112.0)[0] is Ingest.ACCEPTED
    assert model_view(table.reports(), 112.0, table.is_fresh)["stale"]


def test_no_model_anywhere_is_reported_as_absent(make_report: MakeReport) -> None:
    table = _table_with([make_report("a", 1.0)], at=[1.0])
    assert model_view(table.reports(), 1.0, table.is_fresh) == {
        "available": False,
        "nodes": {"a": None},
    }
