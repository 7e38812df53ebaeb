"""Telemetry sources and the feature vector y ∈ [0,1]^d. Pure: no I/O, no clock.

Design: docs/architecture.md#sampling.

A :class:`TelemetrySource` returns one :class:`Sample` per call, given the monotonic time of the
call; :class:`agent.proc_source.ProcSource` reads the host, and the simulator feeds the same
pipeline through the same interface. Missing values are NaN, never zero.

Features (0 = empty, 1 = full):

* ``cpu`` = (util + psi_cpu_some)/2, or util alone when the kernel has no PSI;
* ``memory`` = 1 − MemAvailable/MemTotal;
* ``cpu_pressure``, ``memory_pressure``, ``io_pressure`` = the ``some`` stall fraction of that
  resource over the interval (0 when the kernel has no PSI: no evidence of stall).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:  # numpy itself is not needed here: the host source builds no arrays
    import numpy as np
    from numpy.typing import NDArray

    from carico.pods import PodClass

# One value per configured feature: a tuple of floats from the host source (no numpy array per
# sample at 10 Hz), any 1-D float array from other sources.
FeatureVector: TypeAlias = "Sequence[float] | NDArray[np.float64]"

FEATURES: tuple[str, ...] = ("cpu", "memory", "cpu_pressure", "memory_pressure", "io_pressure")
DEFAULT_FEATURES: tuple[str, ...] = ("cpu", "memory")


def parse_features(text: str) -> tuple[str, ...]:
    """``"cpu,memory,io_pressure"`` -> a validated tuple of feature names.

    >>> parse_features("cpu, memory")
    ('cpu', 'memory')
    """
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise ValueError("at least one feature is needed")
    unknown = [n for n in names if n not in FEATURES]
    if unknown:
        raise ValueError(
            f"unknown feature(s) {', '.join(unknown)}; choose from {', '.join(FEATURES)}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate feature in {text!r}")
    return names


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod's cumulative CPU time (seconds) and its current memory (bytes), from its cgroup."""

    cpu_seconds: float
    memory_bytes: float


@dataclass(frozen=True)
class Sample:
    """One telemetry sample.

    ``features`` has one value per configured feature, NaN where missing; ``missing`` says the
    sample was (partly) unreadable or malformed — counted in a metric; ``pods`` is the workload pod
    count when the source knows it (the simulator), else None.

    ``cpu_util`` and ``psi_cpu`` are the node's CPU utilisation and CPU pressure (NaN when not
    read); ``cores`` and ``memory_bytes`` its size (NaN when unknown). ``pod_usage``, per pod uid,
    is each pod's own usage, from the sources that read it (about twice a second is enough: it
    feeds the per-class footprints, not the 10 Hz signal); None when the source did not read it.
    ``running`` is the node's running workload pods with their classes, from a source that knows
    them (the simulator) and only when they changed; None otherwise (the pod watch tells).
    """

    features: FeatureVector
    psi_available: bool
    missing: bool = False
    pods: int | None = None
    problems: tuple[str, ...] = field(default=())
    cpu_util: float = math.nan
    psi_cpu: float = math.nan
    cores: float = math.nan
    memory_bytes: float = math.nan
    pod_usage: Mapping[str, PodUsage] | None = None
    running: Mapping[str, PodClass] | None = None


class TelemetrySource(Protocol):
    """Anything that produces samples of a fixed feature vector."""

    @property
    def feature_names(self) -> tuple[str, ...]: ...

    def read(self, now: float) -> Sample:
        """One sample; ``now`` is a monotonic time in seconds (the caller's clock)."""
        ...


@dataclass(frozen=True)
class CpuTimes:
    """The /proc/stat ``cpu`` line in seconds (psutil's ``cpu_times()`` fields)."""

    user: float
    nice: float
    system: float
    idle: float
    iowait: float
    irq: float
    softirq: float
    steal: float

    @property
    def busy(self) -> float:
        # guest and guest_nice are already counted inside user and nice: never add them again.
        return self.user + self.nice + self.system + self.irq + self.softirq + self.steal

    @property
    def total(self) -> float:
        # iowait is idle time the kernel could not fill; it is not busy.
        return self.busy + self.idle + self.iowait


def parse_cpu_line(data: bytes) -> CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat`` (USER_HZ ticks; only ratios are used).

    Fields after ``idle`` appeared over time (iowait, irq, softirq 2.6; steal 2.6.11); missing ones
    count 0. guest and guest_nice are ignored: they are already inside user and nice.

    >>> t = parse_cpu_line(b"cpu  10 1 5 80 4 0 2 3 7 0\\ncpu0 5 0 2 40 2 0 1 1 3 0\\n")
    >>> t.busy, t.total  # user+nice+system+irq+softirq+steal; + idle + iowait
    (21.0, 105.0)
    """
    end = data.find(b"\n")
    line = data if end < 0 else data[:end]
    fields = line.split()
    if len(fields) < 5 or fields[0] != b"cpu":
        raise ValueError(f"not the aggregate cpu line: {line[:40]!r}")
    values = [float(f) for f in fields[1:9]]
    # A NaN or an infinity makes the sum non-finite: one check instead of one per field.
    if not (min(values) >= 0 and math.isfinite(sum(values))):
        raise ValueError(f"bad cpu counters: {line[:60]!r}")
    values += [0.0] * (8 - len(values))
    return CpuTimes(*values)


def cpu_utilisation(prev: CpuTimes, cur: CpuTimes) -> float | None:
    """Δbusy/Δtotal over the interval, clipped to [0,1]; None when the counters give no answer.

    >>> a = CpuTimes(10, 0, 5, 80, 5, 0, 0, 0)
    >>> b = CpuTimes(13, 0, 6, 85, 6, 0, 0, 0)
    >>> cpu_utilisation(a, b)
    0.4
    """
    d_total = cur.total - prev.total
    d_busy = cur.busy - prev.busy
    # No tick elapsed (interval shorter than the USER_HZ resolution) or a counter reset.
    if not (d_total > 0) or d_busy < 0 or math.isnan(d_busy):
        return None
    return min(1.0, d_busy / d_total)


def count_cpus(data: bytes) -> int:
    """The number of ``cpuN`` lines of ``/proc/stat``: the CPUs online.

    >>> count_cpus(b"cpu  10 1 5 80\\ncpu0 5 0 2 40\\ncpu1 5 1 3 40\\nintr 1 2\\n")
    2
    """
    return sum(1 for line in data.split(b"\n") if line[:3] == b"cpu" and line[3:4].isdigit())


def parse_meminfo_head(data: bytes) -> tuple[int, int] | None:
    """(MemTotal, MemAvailable) in kB from ``/proc/meminfo``; None if MemAvailable is absent.

    Reads only up to MemAvailable (the third line since Linux 3.14). ValueError when MemTotal is
    missing or a needed value is malformed.

    >>> parse_meminfo_head(b"MemTotal: 8000 kB\\nMemFree: 1000 kB\\nMemAvailable: 6000 kB\\n")
    (8000, 6000)
    >>> parse_meminfo_head(b"MemTotal: 8000 kB\\nMemFree: 1000 kB\\n") is None
    True
    """
    total: int | None = None
    for line in data.split(b"\n"):
        key, _, rest = line.partition(b":")
        if key == b"MemTotal":
            total = _kb(rest)
        elif key == b"MemAvailable":
            if total is None:
                raise ValueError("MemAvailable before MemTotal")
            return total, _kb(rest)
    if total is None:
        raise ValueError("no MemTotal line")
    return None


def _kb(rest: bytes) -> int:
    fields = rest.split()
    # 20 digits at most: a 64-bit count of kB (hundreds of digits would overflow a float later)
    if not fields or not fields[0].isdigit() or len(fields[0]) > 20:
        raise ValueError(f"bad meminfo value {rest[:30]!r}")
    return int(fields[0])


def memory_used(total_bytes: float, available_bytes: float) -> float | None:
    """1 − MemAvailable/MemTotal, clipped to [0,1]; None for an impossible total.

    >>> memory_used(8e9, 6e9)
    0.25
    """
    if not (total_bytes > 0) or available_bytes < 0:
        return None
    return min(1.0, max(0.0, 1.0 - available_bytes / total_bytes))


def cpu_feature(util: float | None, psi_cpu_some: float | None, psi_available: bool) -> float:
    """(util + psi)/2 with PSI, util alone without it; NaN when a needed part is missing.

    >>> cpu_feature(0.6, 0.2, True)
    0.4
    >>> cpu_feature(0.6, None, False)
    0.6
    """
    if util is None:
        return math.nan
    if not psi_available:
        return util
    if psi_cpu_some is None:
        return math.nan
    return (util + psi_cpu_some) / 2.0


# A node counts as saturated, for the attribution of pods' CPU, when pressure is this close to 1.
SATURATED_PSI = 0.95


def pod_cpu_demand(
    usage_cores: float, cpu_util: float, psi_cpu: float, psi_available: bool
) -> tuple[float, bool]:
    """A pod's CPU demand in cores from its usage, and whether that is only a lower bound.

    On a contended node the scheduler shares the cores out, so a pod gets less than it demands.
    The node's ``cpu`` feature (util + psi)/2 grows with the runnable threads T as T / (2·cores)
    up to 2·cores (utilisation counts the threads that run, pressure the ones that wait), so the
    node's demand over what it got is (util + psi)/util, and a pod's demand is its usage times
    that ratio. Once pressure saturates (≥ SATURATED_PSI) the demand is only a lower bound.
    Without pressure information the usage is all there is.

    >>> pod_cpu_demand(1.0, 1.0, 0.5, True)  # 6 threads on 4 cores: each gets 4/6 of a core
    (1.5, False)
    >>> pod_cpu_demand(2.0, 1.0, 1.0, True)
    (4.0, True)
    >>> pod_cpu_demand(0.5, 0.3, 0.0, False)
    (0.5, False)
    """
    if not psi_available or not (math.isfinite(cpu_util) and math.isfinite(psi_cpu)):
        return usage_cores, False
    if cpu_util <= 0.05:  # an idle node: nothing to share out
        return usage_cores, False
    psi = min(max(psi_cpu, 0.0), 1.0)
    return usage_cores * (min(cpu_util, 1.0) + psi) / min(cpu_util, 1.0), psi >= SATURATED_PSI


def feature_scale(
    names: Sequence[str], cores: float, memory_bytes: float, psi_available: bool
) -> tuple[tuple[float, float], ...]:
    """Per feature, how much of it one core of CPU demand and one byte of memory are.

    ``cpu``: 1 / (2·cores) with pressure (see :func:`pod_cpu_demand`), 1 / cores without;
    ``memory``: 1 / MemTotal. The pressure features are not additive per pod: 0 (a pod is not
    charged for them; a node whose pressure is at its full level still takes no pod).

    >>> feature_scale(("cpu", "memory", "io_pressure"), 4, 8e9, True)
    ((0.125, 0.0), (0.0, 1.25e-10), (0.0, 0.0))
    """
    out = []
    for name in names:
        if name == "cpu" and cores > 0:
            out.append((1.0 / (2.0 * cores if psi_available else cores), 0.0))
        elif name == "memory" and memory_bytes > 0:
            out.append((0.0, 1.0 / memory_bytes))
        else:
            out.append((0.0, 0.0))
    return tuple(out)
