"""What one pod of a workload class costs a node: its footprint, learned per class.

A footprint is a pod's CPU demand in cores (the cores it keeps busy or waiting, whatever their
share) and its memory in bytes: absolute units, the same on every node, so that the fleet can
share what its nodes learn and a node can be told about a class it never ran. A node turns a
footprint into its own feature units with the scale its agent reports
(docs/architecture.md#cost-and-capacity).

* :class:`FootprintLearner` keeps, on one node, the footprint of each class whose pods ran there,
  from each pod's own measured usage (one measurement per pod and batch). A CPU measurement taken
  while the node is saturated is censored: the pod got less than it asked for, so it can only
  raise the estimate. At most ``max_classes`` classes are kept, the least recently seen dropped.
* :func:`fleet_summary` turns what many nodes learned into per-class medians and the fleet's
  ratio of measured footprint to requests, per resource (the aggregator publishes it to the
  agents; the extender computes the same from the nodes' reports).
* :func:`resolve` picks a class's footprint on a node, in order: learned there, the fleet's
  median, the pod's requests scaled by the fleet's ratio, the fleet's typical pod, the caller's
  default; and says which one it used.

Pure: no I/O; times are passed in.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from carico.pods import Requests

SOURCES = ("learned", "fleet", "requests", "typical", "default")
# The most classes one node's report (and one sender's model) carries: the receivers refuse more.
MAX_CLASSES_PER_REPORT = 256


@dataclass(frozen=True, slots=True)
class Footprint:
    """A pod's CPU demand (cores) and memory (bytes)."""

    cpu: float
    memory: float

    def scaled(self, factor: float) -> Footprint:
        return Footprint(self.cpu * factor, self.memory * factor)

    def plus(self, other: Footprint) -> Footprint:
        return Footprint(self.cpu + other.cpu, self.memory + other.memory)


ZERO = Footprint(0.0, 0.0)


def value_moved(a: float, b: float, rel: float) -> bool:
    """Whether ``a`` and ``b`` differ by at least ``rel`` of the larger of them (NaN and a number
    differ; two NaNs do not).

    >>> value_moved(1.0, 1.03, 0.02), value_moved(1.0, 1.01, 0.02), value_moved(0.0, 0.0, 0.02)
    (True, False, False)
    """
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) != math.isnan(b)
    return abs(a - b) >= rel * max(abs(a), abs(b), 1e-12)


def footprint_moved(a: Footprint, b: Footprint, rel: float) -> bool:
    """Whether the CPU or the memory of two footprints differ by ``rel`` of themselves: the dead
    band of the agents' report gate and of the extender's fleet view alike."""
    return value_moved(a.cpu, b.cpu, rel) or value_moved(a.memory, b.memory, rel)


@dataclass(frozen=True, slots=True)
class ClassFootprint:
    """A class's footprint with where it comes from and what it was learned from."""

    name: str
    footprint: Footprint
    source: str  # one of SOURCES
    samples: int = 0  # pod-batches measured (0 unless learned)
    requests: Requests = Requests()


@dataclass(frozen=True, slots=True)
class PodMeasurement:
    """One pod's usage over one batch, attributed to its class."""

    workload_class: str
    cpu_demand: float  # cores; see the agent's attribution of a pod's usage
    memory: float  # bytes
    cpu_censored: bool = False  # the node was saturated: the demand is a lower bound


@dataclass(slots=True)
class _Learned:
    cpu: float
    memory: float
    samples: int
    last_seen: float
    requests: Requests


class FootprintLearner:
    """Per-class footprints of one node, from per-pod measurements.

    Each batch, a class's measurements are averaged and folded in with the gain
    ``max(1 / samples, min_gain)``: the first batches average, later ones follow a change within
    about ``1 / min_gain`` batches.

    >>> learner = FootprintLearner()
    >>> for t in range(5):
    ...     learner.observe(t, [PodMeasurement("ns/Job/a", 1.0, 6e7)] * 2)
    >>> learner.learned("ns/Job/a").footprint
    Footprint(cpu=1.0, memory=60000000.0)
    >>> learner.observe(5, [PodMeasurement("ns/Job/a", 0.5, 6e7, cpu_censored=True)])
    >>> learner.learned("ns/Job/a").footprint.cpu  # a censored 0.5 cannot lower 1.0
    1.0
    """

    def __init__(self, *, max_classes: int = 64, min_gain: float = 0.1) -> None:
        if not (isinstance(max_classes, int) and max_classes >= 1):
            raise ValueError(f"max_classes must be an integer >= 1, got {max_classes!r}")
        if not 0.0 < min_gain <= 1.0:
            raise ValueError(f"min_gain must be in (0, 1], got {min_gain!r}")
        self.max_classes = max_classes
        self.min_gain = min_gain
        self._classes: OrderedDict[str, _Learned] = OrderedDict()
        self._requests: OrderedDict[str, Requests] = OrderedDict()
        self.dropped = 0  # classes forgotten to stay within max_classes

    def note_requests(self, workload_class: str, requests: Requests, now: float) -> None:
        """Remember what a class's pods request (the prior while it is not measured)."""
        self._requests[workload_class] = requests
        self._requests.move_to_end(workload_class)
        while len(self._requests) > self.max_classes:
            self._requests.popitem(last=False)
        entry = self._classes.get(workload_class)
        if entry is not None:
            entry.requests = requests
            entry.last_seen = now
            self._classes.move_to_end(workload_class)

    def observe(self, now: float, measurements: Iterable[PodMeasurement]) -> None:
        """Fold in one batch of per-pod measurements."""
        by_class: dict[str, list[PodMeasurement]] = {}
        for m in measurements:
            if not (
                math.isfinite(m.cpu_demand)
                and m.cpu_demand >= 0
                and math.isfinite(m.memory)
                and m.memory >= 0
            ):
                continue
            by_class.setdefault(m.workload_class, []).append(m)
        for name, group in by_class.items():
            cpu = sum(m.cpu_demand for m in group) / len(group)
            memory = sum(m.memory for m in group) / len(group)
            censored = all(m.cpu_censored for m in group)
            entry = self._classes.get(name)
            if entry is None:
                requests = self._requests.get(name, Requests())
                self._classes[name] = _Learned(cpu, memory, len(group), now, requests)
                self._trim()
                continue
            entry.samples += len(group)
            gain = max(len(group) / entry.samples, self.min_gain)
            # A saturated node gave its pods less CPU than they demand: such a measurement is a
            # lower bound, so it may raise the estimate but never lower it.
            if not censored or cpu > entry.cpu:
                entry.cpu += gain * (cpu - entry.cpu)
            entry.memory += gain * (memory - entry.memory)
            entry.last_seen = now
            self._classes.move_to_end(name)

    def _trim(self) -> None:
        while len(self._classes) > self.max_classes:
            self._classes.popitem(last=False)
            self.dropped += 1

    def knows(self, workload_class: str) -> bool:
        """Whether the class has been measured (and not dropped since)."""
        return workload_class in self._classes

    def learned(self, workload_class: str) -> ClassFootprint | None:
        entry = self._classes.get(workload_class)
        if entry is None:
            return None
        return ClassFootprint(
            workload_class,
            Footprint(entry.cpu, entry.memory),
            "learned",
            entry.samples,
            entry.requests,
        )

    def requests_of(self, workload_class: str) -> Requests | None:
        return self._requests.get(workload_class)

    def all_learned(self) -> list[ClassFootprint]:
        """Every learned class, most recently seen last."""
        return [c for name in self._classes if (c := self.learned(name)) is not None]

    def __len__(self) -> int:
        return len(self._classes)


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """The fleet's view of the classes: medians per class, and measured-to-requested ratios."""

    classes: Mapping[str, Footprint]
    # median over classes of measured / requested, per resource (None: no class to learn it from)
    cpu_ratio: float | None = None
    memory_ratio: float | None = None
    typical: Footprint | None = None  # the median pod over all classes

    @classmethod
    def of(
        cls,
        classes: Mapping[str, Footprint],
        cpu_ratio: float | None = None,
        memory_ratio: float | None = None,
    ) -> FleetSummary:
        """A summary of per-class medians; the typical pod is the median over the classes."""
        typical = None
        if classes:
            typical = Footprint(
                statistics.median(f.cpu for f in classes.values()),
                statistics.median(f.memory for f in classes.values()),
            )
        return cls(dict(classes), cpu_ratio, memory_ratio, typical)

    def requests_prior(self, requests: Requests) -> Footprint | None:
        """A footprint for a pod of a class never measured, from what it requests."""
        cpu = requests.cpu * self.cpu_ratio if self.cpu_ratio is not None else None
        memory = requests.memory * self.memory_ratio if self.memory_ratio is not None else None
        if not (cpu and cpu > 0) and not (memory and memory > 0):
            return None
        typical = self.typical or ZERO
        # A resource the pod does not request (or the fleet cannot scale) takes the typical pod's.
        return Footprint(
            cpu if cpu and cpu > 0 else typical.cpu,
            memory if memory and memory > 0 else typical.memory,
        )


EMPTY_FLEET = FleetSummary({})


def fleet_summary(
    entries: Iterable[ClassFootprint], max_classes: int | None = None
) -> FleetSummary:
    """Per-class medians of what the nodes learned, and the fleet's ratios to requests.

    The ratios are medians over classes (each class counts once, however many nodes run it) of
    the class's median footprint over its requests, per resource, for the classes that request
    that resource. ``max_classes`` keeps the classes learned on the most nodes.

    >>> a = ClassFootprint("a", Footprint(1.0, 6e7), "learned", 5, Requests(0.1, 0.0))
    >>> b = ClassFootprint("b", Footprint(4.0, 7e8), "learned", 5, Requests(0.2, 7.5e8))
    >>> s = fleet_summary([a, b, b])
    >>> s.cpu_ratio, round(s.memory_ratio, 3), s.classes["b"]
    (15.0, 0.933, Footprint(cpu=4.0, memory=700000000.0))
    """
    by_class: dict[str, list[ClassFootprint]] = {}
    for e in entries:
        if e.source == "learned":
            by_class.setdefault(e.name, []).append(e)
    if max_classes is not None and len(by_class) > max_classes:
        keep = sorted(by_class, key=lambda n: (-len(by_class[n]), n))[:max_classes]
        by_class = {n: by_class[n] for n in keep}
    medians: dict[str, Footprint] = {}
    cpu_ratios: list[float] = []
    memory_ratios: list[float] = []
    for name, group in by_class.items():
        median = Footprint(
            statistics.median(e.footprint.cpu for e in group),
            statistics.median(e.footprint.memory for e in group),
        )
        medians[name] = median
        requests = group[-1].requests
        if requests.cpu > 0:
            cpu_ratios.append(median.cpu / requests.cpu)
        if requests.memory > 0:
            memory_ratios.append(median.memory / requests.memory)
    return FleetSummary.of(
        medians,
        statistics.median(cpu_ratios) if cpu_ratios else None,
        statistics.median(memory_ratios) if memory_ratios else None,
    )


def resolve(
    workload_class: str,
    requests: Requests,
    local: ClassFootprint | None,
    fleet: FleetSummary,
    default: Footprint,
) -> ClassFootprint:
    """A class's footprint on a node, and where it comes from.

    >>> fleet = FleetSummary({"b": Footprint(4.0, 7e8)}, cpu_ratio=10.0, typical=Footprint(1, 6e7))
    >>> resolve("b", Requests(), None, fleet, Footprint(0.5, 1e8)).source
    'fleet'
    >>> r = resolve("c", Requests(cpu=0.2), None, fleet, Footprint(0.5, 1e8))
    >>> r.source, r.footprint
    ('requests', Footprint(cpu=2.0, memory=60000000.0))
    >>> resolve("d", Requests(), None, fleet, Footprint(0.5, 1e8)).source
    'typical'
    >>> resolve("d", Requests(), None, EMPTY_FLEET, Footprint(0.5, 1e8)).source
    'default'
    """
    if local is not None:
        return local
    known = fleet.classes.get(workload_class)
    if known is not None:
        return ClassFootprint(workload_class, known, "fleet", requests=requests)
    prior = fleet.requests_prior(requests)
    if prior is not None:
        return ClassFootprint(workload_class, prior, "requests", requests=requests)
    if fleet.typical is not None:
        return ClassFootprint(workload_class, fleet.typical, "typical", requests=requests)
    return ClassFootprint(workload_class, default, "default", requests=requests)
