"""Memory growth of the soak's components: RSS slopes from samples of /proc/<pid>/status.

Pure: :func:`parse_vm_rss` reads the text of a status file, :func:`rss_slope` fits a line to
samples. A component restarted by the soak is a new process with a fresh heap, so samples are kept
per pid and each process is judged on its own samples after its warm-up; the slope reported for a
component is that of its longest-lived process (the one with the most to say). "Stops growing"
is judged on the second half of that process's samples after warm-up: a leak grows there as in
the first half, while a heap that filled its caches is flat by then. Neighbours:
tests/e2e/soak_bed.py samples, soak_report.py prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIB = 1024.0**2


def parse_vm_rss(status: str) -> int | None:
    """Resident memory in bytes from /proc/<pid>/status text (None when absent: a zombie)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            return int(parts[1]) * 1024  # the kernel writes kB
    return None


def rss_slope(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, bytes) samples, in MiB per minute (0 for < 2 samples)."""
    n = len(samples)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var * 60.0 / MIB


@dataclass(frozen=True)
class MemoryVerdict:
    component: str
    pid: int
    span_s: float  # how long the judged process was sampled after warm-up
    rss_mib: float  # its last RSS
    slope: float  # MiB/min over everything after warm-up
    late_slope: float  # MiB/min over the second half after warm-up
    judged: bool  # long enough to judge (``min_span_s``)

    @property
    def growing(self) -> bool:
        return self.judged and self.late_slope > self.limit

    limit: float = 1.0  # MiB/min


def judge(
    component: str,
    samples: Iterable[tuple[int, float, int]],
    *,
    warmup_s: float,
    min_span_s: float,
    limit_mib_per_min: float = 1.0,
) -> MemoryVerdict | None:
    """``samples``: (pid, seconds, rss bytes). None when no process was sampled."""
    by_pid: dict[int, list[tuple[float, float]]] = {}
    for pid, t, rss in samples:
        by_pid.setdefault(pid, []).append((t, float(rss)))
    if not by_pid:
        return None

    def after_warmup(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
        points.sort()
        return [p for p in points if p[0] >= points[0][0] + warmup_s]

    judged = {pid: after_warmup(points) for pid, points in by_pid.items()}
    pid, points = max(judged.items(), key=lambda kv: (kv[1][-1][0] - kv[1][0][0]) if kv[1] else -1)
    if not points:
        last = sorted(by_pid[pid])[-1]
        return MemoryVerdict(component, pid, 0.0, last[1] / MIB, 0.0, 0.0, False, limit_mib_per_min)
    span = points[-1][0] - points[0][0]
    late = [p for p in points if p[0] >= points[0][0] + span / 2]
    return MemoryVerdict(
        component,
        pid,
        span,
        points[-1][1] / MIB,
        rss_slope(points),
        rss_slope(late),
        span >= min_span_s,
        limit_mib_per_min,
    )
