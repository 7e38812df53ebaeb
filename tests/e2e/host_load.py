"""The test's own measurements of the host, independent of the agent's code: the cpu feature
(util + psi)/2 over a window, the memory feature, and a pod's CPU and memory from its cgroup.

The definitions are those of docs/architecture.md#sampling, computed here from the kernel's files
with nothing shared with agent/ (a bug there must not hide in the reference).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the aggregate cpu line."""
    fields = [int(x) for x in (PROC / "stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _psi_cpu_some_us() -> int:
    for line in (PROC / "pressure" / "cpu").read_text().splitlines():
        if line.startswith("some "):
            return int(line.split("total=")[1])
    raise ValueError("no 'some' line in /proc/pressure/cpu")


@dataclass(frozen=True)
class CpuWindow:
    util: float
    psi: float
    seconds: float
    pods_cores: float = 0.0  # the cores the pods asked about used over the window

    @property
    def other_cores(self) -> float:
        """The cores busy with anything but those pods (the machine's other work)."""
        return self.util * cores() - self.pods_cores

    @property
    def feature(self) -> float:
        """The cpu feature, (util + psi)/2."""
        return (self.util + self.psi) / 2


@dataclass(frozen=True)
class CpuCounters:
    """The kernel's cumulative CPU counters at one moment: two of them make a window."""

    busy: int
    total: int
    psi_us: int
    at: float  # time.monotonic()

    def util_psi_since(self, before: CpuCounters) -> tuple[float, float]:
        """Utilisation and CPU pressure (`some` stall fraction) from ``before`` to these."""
        util = (self.busy - before.busy) / max(self.total - before.total, 1)
        psi = (self.psi_us - before.psi_us) / max((self.at - before.at) * 1e6, 1.0)
        return util, min(max(psi, 0.0), 1.0)

    def feature_since(self, before: CpuCounters) -> float:
        """The cpu feature (util + psi)/2 over the window from ``before`` to these."""
        return sum(self.util_psi_since(before)) / 2


def cpu_counters() -> CpuCounters:
    busy, total = _cpu_times()
    return CpuCounters(busy, total, _psi_cpu_some_us(), time.monotonic())


def cpu_window(seconds: float, pods: tuple[str, ...] = ()) -> CpuWindow:
    """Utilisation and CPU pressure (`some` stall fraction) over the next ``seconds``, and the
    cores the pods with uids ``pods`` used meanwhile (from their cgroups)."""
    start = cpu_counters()
    pods0 = [pod_cpu_seconds(uid) for uid in pods]
    time.sleep(seconds)
    end = cpu_counters()
    pods1 = [pod_cpu_seconds(uid) for uid in pods]
    util, psi = end.util_psi_since(start)
    used = sum(b - a for a, b in zip(pods0, pods1, strict=True) if a is not None and b is not None)
    return CpuWindow(util, psi, end.at - start.at, used / (end.at - start.at))


def memory_total() -> int:
    for line in (PROC / "meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no MemTotal in /proc/meminfo")


def cores() -> int:
    return os.cpu_count() or 1


def pod_cgroup(uid: str, controller: str) -> Path | None:
    """The pod's cgroup directory in a v1 ``controller`` hierarchy (cgroupfs driver)."""
    top = CGROUP / controller / "kubepods"
    for candidate in (
        top / f"pod{uid}",
        top / "burstable" / f"pod{uid}",
        top / "besteffort" / f"pod{uid}",
    ):
        if candidate.is_dir():
            return candidate
    return None


def pod_cpu_seconds(uid: str) -> float | None:
    d = pod_cgroup(uid, "cpuacct")
    if d is None:
        return None
    return int((d / "cpuacct.usage").read_text()) / 1e9


def pod_working_set(uid: str) -> int | None:
    """usage_in_bytes minus total_inactive_file: the kubelet's working set."""
    d = pod_cgroup(uid, "memory")
    if d is None:
        return None
    usage = int((d / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
    return max(usage - int(stat["total_inactive_file"]), 0)


def pod_cores(uid: str, seconds: float) -> float | None:
    """The cores a pod used over the next ``seconds`` (its cgroup's CPU time)."""
    c0, t0 = pod_cpu_seconds(uid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = pod_cpu_seconds(uid), time.monotonic()
    if c0 is None or c1 is None:
        return None
    return (c1 - c0) / (t1 - t0)
