"""The figures of the scheduling-throughput benchmark (``tests/bench/bench_throughput.py``).

Pure: every function takes numbers or metric text and returns numbers; nothing here reads a clock
or does I/O. What is computed follows kube-scheduler's own scheduler_perf:

* throughput is sampled once per interval (1 s) from the moment the first pod is scheduled; a
  sample is the pods scheduled in that interval divided by its length, and the figures are the
  samples' average and percentiles (``samples``, ``summary``);
* latency percentiles come from Prometheus histograms, with the linear interpolation within a
  bucket that PromQL's ``histogram_quantile`` uses (``histogram``, ``quantile``);
* a node over-admits when more pods are bound to it than the filter rule allows for its reported
  avail (``admissible``, ``over_admitted``).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

PERCENTILES = (50, 90, 95, 99)


def samples(times: Sequence[float], interval: float = 1.0) -> list[float]:
    """Pods per second in consecutive ``interval``-long windows from the first scheduling time.

    ``times`` are the moments pods were seen scheduled (any order). The last window ends at the
    last pod; shorter than half an interval, it is left out (a few pods over a sliver of time would
    make an absurd rate), longer, its rate is over its own length.

    >>> samples([0.0, 0.5, 1.2, 1.4, 1.5])
    [2.0, 6.0]
    """
    if interval <= 0:
        raise ValueError(f"the sampling interval must be positive: {interval}")
    if not times:
        return []
    ordered = sorted(times)
    start, end = ordered[0], ordered[-1]
    windows = max(1, math.ceil((end - start) / interval))
    counts = [0] * windows
    for t in ordered:
        counts[min(int((t - start) / interval), windows - 1)] += 1
    rates = [c / interval for c in counts[:-1]]
    last = end - (start + (windows - 1) * interval)
    if last >= interval / 2:
        rates.append(counts[-1] / last)
    elif not rates:  # every pod within half an interval: one sample over that span
        rates.append(counts[-1] / interval)
    return rates


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile, as scheduler_perf reports its throughput percentiles."""
    if not values:
        raise ValueError("no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100]: {p}")
    ordered = sorted(values)
    return ordered[math.ceil(len(ordered) * p / 100) - 1]


@dataclass(frozen=True)
class Summary:
    average: float
    percentiles: dict[int, float]
    count: int


def summary(values: Sequence[float]) -> Summary:
    """Average and the scheduler_perf percentiles of throughput samples."""
    if not values:
        return Summary(0.0, {p: 0.0 for p in PERCENTILES}, 0)
    return Summary(
        sum(values) / len(values), {p: percentile(values, p) for p in PERCENTILES}, len(values)
    )


# -- Prometheus histograms ---------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets (upper bound, count) in increasing order, and the observations' sum."""

    buckets: tuple[tuple[float, float], ...]
    total: float

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made since ``earlier`` (a scrape of the same histogram)."""
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, c - before.get(le, 0.0)) for le, c in self.buckets),
            self.total - earlier.total,
        )


def histogram(text: str, name: str, match: Mapping[str, str] | None = None) -> Histogram:
    """Histogram ``name`` from Prometheus text, summed over every series whose labels include
    ``match`` (e.g. all ``attempts`` values of a per-attempts histogram)."""
    want = dict(match or {})
    by_le: dict[float, float] = {}
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        found = _SAMPLE.match(line)
        if found is None:
            continue
        metric, raw_labels, value = found.groups()
        labels = dict(_LABEL.findall(raw_labels or ""))
        if any(labels.get(k) != v for k, v in want.items()):
            continue
        if metric == f"{name}_bucket":
            le = float(labels["le"])  # "+Inf" parses to inf
            by_le[le] = by_le.get(le, 0.0) + float(value)
        elif metric == f"{name}_sum":
            total += float(value)
    return Histogram(tuple(sorted(by_le.items())), total)


def counter(text: str, name: str, match: Mapping[str, str] | None = None) -> float:
    """The sum of counter ``name``'s series whose labels include ``match``."""
    want = dict(match or {})
    total = 0.0
    for line in text.splitlines():
        found = _SAMPLE.match(line) if line.startswith(name) else None
        if found is None or found.group(1) != name:
            continue
        labels = dict(_LABEL.findall(found.group(2) or ""))
        if all(labels.get(k) == v for k, v in want.items()):
            total += float(found.group(3))
    return total


def quantile(h: Histogram, q: float) -> float:
    """PromQL ``histogram_quantile``: linear within the bucket holding rank ``q·count``; the
    lowest bucket starts at 0; a rank in the ``+Inf`` bucket answers the highest finite bound."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be in [0, 1]: {q}")
    count = h.count
    if count <= 0:
        return math.nan
    rank = q * count
    lower_bound, lower_count = 0.0, 0.0
    for le, c in h.buckets:
        if c >= rank:
            if math.isinf(le):
                return lower_bound
            if c == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (c - lower_count)
        lower_bound, lower_count = le, c
    return lower_bound


# -- admission ---------------------------------------------------------------------------------


def admissible(avail: float, threshold: float = 1.0) -> int:
    """The most pods the filter lets onto a node reporting ``avail`` while none of them runs: a
    node passes while avail − reserved ≥ threshold, and each bound pod reserves one unit."""
    if avail < threshold:
        return 0
    return math.floor(avail - threshold) + 1


def admissible_per_class(room: float) -> int:
    """The most pods of a class the filter lets onto a node with room for ``room`` of them
    (threshold 1) while none runs: a pod counts when more than half of it fits, each bound pod
    reserves one, so it passes while room − reserved > 0.5."""
    return max(0, math.ceil(room - 0.5))


def over_admitted(
    bound: Mapping[str, int],
    avail: Mapping[str, float],
    threshold: float = 1.0,
    per_class: bool = False,
) -> dict[str, tuple[int, int]]:
    """Nodes with more pods bound than ``admissible`` (``admissible_per_class`` of the avail
    as room when the nodes report per class): node -> (bound, admissible). A node with pods but
    no reported avail admits none."""
    over: dict[str, tuple[int, int]] = {}
    for node, pods in bound.items():
        if node not in avail:
            limit = 0
        elif per_class:
            limit = admissible_per_class(avail[node])
        else:
            limit = admissible(avail[node], threshold)
        if pods > limit:
            over[node] = (pods, limit)
    return over


def count_by(values: Iterable[str]) -> dict[str, int]:
    """How many times each value occurs (pods per node from the pods' node names)."""
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


# The ratios the benchmark prints and judges: (numerator, denominator) configurations.
RATIOS = (("carico", "alone"), ("carico", "trivial"), ("floor", "trivial"), ("carico", "floor"))


def round_ratios(averages: Mapping[str, float]) -> dict[str, float]:
    """One round's ratios (``"carico/trivial"``...) from its pods/s by configuration; a ratio
    is left out when either configuration was not measured or its denominator scheduled nothing
    (a numerator that scheduled nothing is a ratio of 0, a missed target).

    >>> round_ratios({"carico": 150.0, "trivial": 200.0})
    {'carico/trivial': 0.75}
    """
    return {
        f"{a}/{b}": averages[a] / averages[b]
        for a, b in RATIOS
        if a in averages and averages.get(b, 0.0) > 0
    }


def median_ratios(rounds: Sequence[Mapping[str, float]]) -> dict[str, tuple[float, list[float]]]:
    """Each ratio's median over the rounds that have it, with its values round by round.

    On a shared machine one round's ratio moves by ±20 % from run to run (docs/benchmarks.md),
    so several rounds, their configurations in alternating order, are judged by the median.

    >>> median_ratios([{"c/t": 0.7}, {"c/t": 0.9}, {"c/t": 0.8}])
    {'c/t': (0.8, [0.7, 0.9, 0.8])}
    """
    out: dict[str, tuple[float, list[float]]] = {}
    for name in dict.fromkeys(k for r in rounds for k in r):
        values = [r[name] for r in rounds if name in r]
        out[name] = (statistics.median(values), values)
    return out
