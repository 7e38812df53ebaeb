"""The throughput benchmark's figures: samples and percentiles as scheduler_perf computes them,
quantiles of Prometheus histograms, and the over-admission check."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from throughput_stats import (
    Histogram,
    admissible,
    admissible_per_class,
    count_by,
    counter,
    histogram,
    median_ratios,
    over_admitted,
    percentile,
    quantile,
    round_ratios,
    samples,
    summary,
)


def test_samples_are_per_second_counts_from_the_first_pod() -> None:
    # 10 pods in the first second, 20 in the second, 5 in a last half second
    times = [0.05 * i for i in range(10)]
    times += [1.0 + 0.05 * i for i in range(20)]
    times += [2.0 + 0.1 * i for i in range(1, 6)]
    assert samples(times) == pytest.approx([10.0, 20.0, 10.0])


def test_samples_ignore_order_and_an_offset_start() -> None:
    times = [100.0, 100.2, 101.5, 100.9, 102.0]
    assert samples(times) == samples(sorted(times)) == pytest.approx([3.0, 2.0])


def test_a_short_last_window_is_left_out() -> None:
    # 2 pods at 2.0-2.1 after two full seconds: over 0.1 s they would read as 20 pods/s
    times = [0.0, 0.5, 1.0, 1.5, 2.05, 2.1]
    assert samples(times) == pytest.approx([2.0, 2.0])


def test_samples_of_a_burst_shorter_than_half_an_interval() -> None:
    assert samples([5.0, 5.1, 5.2]) == [3.0]
    assert samples([]) == []
    with pytest.raises(ValueError):
        samples([1.0], interval=0)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([3.0, 1.0, 2.0], 90) == 3.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summary_averages_the_samples() -> None:
    s = summary([100.0, 200.0, 300.0, 400.0])
    assert s.average == 250.0
    assert s.percentiles[50] == 200.0
    assert s.percentiles[99] == 400.0
    assert s.count == 4
    assert summary([]).average == 0.0


METRICS = """\
# HELP scheduler_pod_scheduling_sli_duration_seconds E2e latency
# TYPE scheduler_pod_scheduling_sli_duration_seconds histogram
scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="1",le="0.01"} 2
scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="1",le="0.1"} 6
scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="1",le="+Inf"} 8
scheduler_pod_scheduling_sli_duration_seconds_sum{attempts="1"} 1.5
scheduler_pod_scheduling_sli_duration_seconds_count{attempts="1"} 8
scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="2",le="0.01"} 0
scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="2",le="0.1"} 0
scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="2",le="+Inf"} 2
scheduler_pod_scheduling_sli_duration_seconds_sum{attempts="2"} 0.5
scheduler_pod_scheduling_sli_duration_seconds_count{attempts="2"} 2
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="scheduled",le="0.001"} 1
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="scheduled",le="+Inf"} 4
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="error",le="0.001"} 7
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="error",le="+Inf"} 7
"""


def test_histogram_sums_the_matching_series() -> None:
    h = histogram(METRICS, "scheduler_pod_scheduling_sli_duration_seconds")
    assert h.buckets == ((0.01, 2.0), (0.1, 6.0), (math.inf, 10.0))
    assert h.count == 10.0
    assert h.mean() == pytest.approx(0.2)
    only = histogram(
        METRICS, "scheduler_scheduling_attempt_duration_seconds", {"result": "scheduled"}
    )
    assert only.buckets == ((0.001, 1.0), (math.inf, 4.0))
    assert histogram(METRICS, "no_such_metric").count == 0.0


def test_counter_sums_the_matching_series_only() -> None:
    text = (
        'scheduler_schedule_attempts_total{profile="a",result="scheduled"} 40\n'
        'scheduler_schedule_attempts_total{profile="a",result="error"} 2\n'
        'scheduler_schedule_attempts_total{profile="b",result="error"} 5\n'
        'scheduler_schedule_attempts_total_other{profile="a"} 99\n'
    )
    name = "scheduler_schedule_attempts_total"
    assert counter(text, name) == 47.0
    assert counter(text, name, {"result": "error"}) == 7.0
    assert counter(text, name, {"profile": "a", "result": "error"}) == 2.0
    assert counter(text, "absent") == 0.0


def test_quantile_interpolates_within_the_bucket() -> None:
    h = Histogram(((0.01, 2.0), (0.1, 6.0), (1.0, 10.0), (math.inf, 10.0)), 0.0)
    assert quantile(h, 0.1) == pytest.approx(0.005)  # rank 1 of 2 in [0, 0.01]
    assert quantile(h, 0.4) == pytest.approx(0.01 + 0.09 * 2 / 4)  # rank 4: 2 of 4 in (0.01, 0.1]
    assert quantile(h, 1.0) == pytest.approx(1.0)
    in_inf = Histogram(((0.1, 1.0), (math.inf, 4.0)), 0.0)
    assert quantile(in_inf, 0.99) == 0.1  # PromQL answers the highest finite bound
    assert math.isnan(quantile(Histogram((), 0.0), 0.5))


def test_minus_keeps_what_was_observed_since() -> None:
    before = Histogram(((0.1, 3.0), (math.inf, 4.0)), 2.0)
    after = Histogram(((0.1, 5.0), (math.inf, 9.0)), 6.0)
    since = after.minus(before)
    assert since.buckets == ((0.1, 2.0), (math.inf, 5.0))
    assert since.total == 4.0


def test_admissible_follows_the_filter_rule() -> None:
    # avail 3, threshold 1: passes at 0, 1 and 2 reserved (3-2 >= 1), not at 3
    assert admissible(3.0) == 3
    assert admissible(3.7) == 3
    assert admissible(0.99) == 0
    assert admissible(1.0) == 1
    assert admissible(5.0, threshold=2.0) == 4  # 5-3 >= 2, 5-4 < 2


def test_over_admitted_names_the_nodes_beyond_their_limit() -> None:
    bound = count_by(["a", "a", "a", "b", "c", "c"])
    assert bound == {"a": 3, "b": 1, "c": 2}
    assert over_admitted(bound, {"a": 2.5, "b": 4.0, "c": 2.0}) == {"a": (3, 2)}
    # a node without a report admits nothing
    assert over_admitted({"z": 1}, {}) == {"z": (1, 0)}
    assert over_admitted(bound, {"a": 3.0, "b": 1.0, "c": 2.0}) == {}


# Not a half above 1 (1.5): the room left after the reservations is then 0.5 give or take a
# rounding error, on the filter's edge (a pod counts when more than half of it fits).
@pytest.mark.parametrize("room", [0.3, 0.5, 0.51, 1.0, 1.49, 1.51, 3.49, 3.51, 7.2])
def test_the_per_class_limit_is_what_the_extender_admits_of_the_feeds_reports(room: float) -> None:
    """The feed's per-class report with room for ``room`` pods, taken by the extender's table:
    reserving pods of the class while its fit says one more fits admits admissible_per_class."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from throughput_feed import per_class

    from carico.pods import Requests
    from protos.carico.v1 import capacity_pb2
    from scheduler_ext.capacity import CapacityTable

    klass, requests = "throughput/pods", Requests(0.1, 0.0)
    msg = capacity_pb2.NodeCapacity(node="n", avail=room, sequence=1, timestamp=1.0)
    per_class(msg, room, klass)
    table = CapacityTable()
    assert table.ingest(msg, "s", 0.0)[0].value == "accepted"
    admitted = 0
    while (fit := table.fit("n", klass, requests, 0.0)) is not None and fit.count >= 1:
        table.add_reserved("n", 1, klass, requests)
        admitted += 1
        assert admitted < 100
    assert admitted == admissible_per_class(room)
    assert over_admitted({"n": admitted}, {"n": room}, per_class=True) == {}
    assert over_admitted({"n": admitted + 1}, {"n": room}, per_class=True) != {}


def test_ratios_leave_out_what_a_round_did_not_measure() -> None:
    ratios = round_ratios({"alone": 500.0, "trivial": 200.0, "floor": 0.0, "carico": 180.0})
    # a floor that scheduled nothing is 0 × trivial, and no denominator for Carico
    expected = {"carico/alone": 0.36, "carico/trivial": 0.9, "floor/trivial": 0.0}
    assert ratios == pytest.approx(expected)
    assert round_ratios({"trivial": 200.0}) == {}


def test_rounds_are_judged_by_the_median_of_their_ratios() -> None:
    rounds = [
        {"carico/trivial": 0.94, "carico/alone": 0.3},
        {"carico/trivial": 0.59},
        {"carico/trivial": 0.80, "carico/alone": 0.2},
    ]
    medians = median_ratios(rounds)
    assert medians["carico/trivial"] == (pytest.approx(0.80), [0.94, 0.59, 0.80])
    assert medians["carico/alone"] == (pytest.approx(0.25), [0.3, 0.2])  # two rounds: their mean
