"""``ProcSource``: the host's telemetry read through a procfs root (docs/architecture.md#sampling).

Cost decides how the files are read. The agent samples at 10 Hz on a budget of 1 % of a core, and
between two samples it sleeps 100 ms, so every read runs with cold caches. Measured per read on a
loaded 2-core host under those conditions: ``psutil.cpu_times()`` ≈ 150 µs and
``psutil.virtual_memory()`` ≈ 200 µs (each opens and closes its file, and the latter computes a
dozen fields), against ≈ 40 µs and ≈ 25 µs for a descriptor kept open and re-read from offset 0
with ``os.pread`` plus the two or eight numbers the agent needs. Together that was a third of the
agent's CPU. So ``stat``, ``meminfo`` and the pressure files are read through
:class:`agent.files.KeptOpenFiles` (procfs regenerates a file's content on every read from offset
0; a failing descriptor is closed and reopened at the next read) with the small parsers of
:mod:`agent.telemetry` and :mod:`agent.psi`. psutil remains for what it does better: a kernel
older than 3.14 has no MemAvailable, and psutil estimates it the way the kernel does; the tests
also check the ``stat`` parser against ``psutil.cpu_times()``.

psutil's procfs root is a module global (``psutil.PROCFS_PATH``) that every psutil call reads at
call time. Changing it for the whole process would surprise any other psutil user in the process
(and two sources with different roots, as in the tests, would race), so each read swaps it in and
back out under a lock: :func:`procfs_root`. The swap costs two attribute assignments.

Failure handling: PSI absent (``ENOENT``: the kernel was built or booted without it), disabled
(``EOPNOTSUPP``, errno 95: older kernels booted with ``psi=0``) or forbidden (``EACCES``) switches
the source to utilisation only, logged once and reported in every sample's ``psi_available``. Any
other unreadable or malformed file marks the sample missing (NaN features) and never raises; PSI
files that stay unreadable for ``PSI_GIVE_UP`` samples in a row are given up the same way.

Per-class data (docs/architecture.md#cost-and-capacity): every sample also carries the node's CPU
utilisation and CPU pressure over the interval. When a kubepods cgroup tree exists under
``cgroup_root``, the source also reads each pod's own usage every ``pod_usage_interval`` seconds
(:class:`agent.cgroup_usage.CgroupUsageReader`) and gives the node's size with every sample: its
cores (the ``cpuN`` lines of ``stat``, counted every ``CORES_EVERY`` seconds) and MemTotal.
Without such a tree it gives neither, and the pipeline reports no per-class data: per-class
decisions need the pods' own usage, and a node that cannot measure any would only report guesses.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psutil

from agent.cgroup_usage import CgroupUsageReader
from agent.files import KeptOpenFiles, read_bytes
from agent.psi import PsiParseError, PsiTotals, parse_psi, pressure_fraction
from agent.telemetry import (
    DEFAULT_FEATURES,
    CpuTimes,
    PodUsage,
    Sample,
    count_cpus,
    cpu_feature,
    cpu_utilisation,
    memory_used,
    parse_cpu_line,
    parse_meminfo_head,
)

log = logging.getLogger(__name__)

_PSUTIL_LOCK = threading.Lock()
# What the parsers (psutil's included) raise on a truncated or garbled file (psutil: a meminfo
# without MemTotal gives a KeyError).
_PARSE_ERRORS = (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError)
# Absent (ENOENT), disabled (EOPNOTSUPP) or forbidden to this container (EACCES, EPERM): PSI is
# unusable for good, not for one sample.
_PSI_OFF_ERRNOS = {errno.ENOENT, errno.EOPNOTSUPP, errno.EACCES, errno.EPERM}
# Consecutive failed pressure reads (5 s at 10 Hz) after which PSI is given up.
PSI_GIVE_UP = 50
# Seconds between two counts of the node's CPUs (a CPU can be taken offline; rarely).
CORES_EVERY = 60.0
# The pods' usage feeds per-class footprints, not the 10 Hz signal: twice a second is enough.
DEFAULT_POD_USAGE_INTERVAL = 0.5


@contextlib.contextmanager
def procfs_root(root: str) -> Iterator[None]:
    """Point psutil at ``root`` for the duration of the block (thread-safe, restored after)."""
    with _PSUTIL_LOCK:
        saved = psutil.PROCFS_PATH
        psutil.PROCFS_PATH = root
        try:
            yield
        finally:
            psutil.PROCFS_PATH = saved


class ProcSource:
    """Samples the host through ``proc_root``; ``read`` never raises on bad telemetry."""

    def __init__(
        self,
        proc_root: str = "/proc",
        features: tuple[str, ...] = DEFAULT_FEATURES,
        reader: Callable[[str], bytes] | None = None,
        *,
        cgroup_root: str | None = None,
        pod_usage_interval: float = DEFAULT_POD_USAGE_INTERVAL,
        usage_reader: CgroupUsageReader | None = None,
    ) -> None:
        """``cgroup_root`` (or a ready ``usage_reader``) turns on the pods' usage, read every
        ``pod_usage_interval`` seconds (0: never)."""
        self._root = str(Path(proc_root))
        self._features = tuple(features)
        self._reader = reader if reader is not None else KeptOpenFiles()
        needed = {"cpu"} if {"cpu", "cpu_pressure"} & set(features) else set()
        needed |= {res for res in ("memory", "io") if f"{res}_pressure" in features}
        self._psi_resources = tuple(sorted(needed))
        self._psi_available = True
        self._psi_failures = 0
        self._warned: set[str] = set()
        self._prev_cpu: CpuTimes | None = None
        self._prev_psi: dict[str, tuple[float, int]] = {}
        if usage_reader is None and cgroup_root and pod_usage_interval > 0:
            usage_reader = CgroupUsageReader(cgroup_root)
        self.usage = usage_reader if pod_usage_interval > 0 else None
        self._usage_interval = pod_usage_interval
        self._next_usage = -math.inf
        self._cores = math.nan
        self._next_cores = -math.inf
        self._memory_total = math.nan  # bytes

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self._features

    @property
    def psi_available(self) -> bool:
        return self._psi_available

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    # -- individual reads ---------------------------------------------------------------------

    def _cpu_times(self, problems: list[str]) -> CpuTimes | None:
        try:
            return parse_cpu_line(self._reader(f"{self._root}/stat"))
        except (OSError, *_PARSE_ERRORS) as exc:
            problems.append(f"stat: {exc!r}")
            self._warn_once("stat", "cannot read %s/stat: %r", self._root, exc)
            return None

    def _memory(self, problems: list[str]) -> float | None:
        try:
            head = parse_meminfo_head(self._reader(f"{self._root}/meminfo"))
            if head is not None:
                total, used = head[0] * 1024.0, memory_used(float(head[0]), float(head[1]))
            else:  # a kernel without MemAvailable: psutil estimates it
                with procfs_root(self._root):
                    vm = psutil.virtual_memory()
                total, used = float(vm.total), memory_used(float(vm.total), float(vm.available))
            if total > 0:
                self._memory_total = total
        except (OSError, *_PARSE_ERRORS) as exc:
            problems.append(f"meminfo: {exc!r}")
            self._warn_once("meminfo", "cannot read %s/meminfo: %r", self._root, exc)
            return None
        if used is None:
            problems.append("meminfo: MemTotal is not positive")
        return used

    def _count_cores(self, now: float) -> None:
        """The node's CPUs: the ``cpuN`` lines of the whole ``stat`` (the kept-open read may stop
        short of them on a large host), else psutil's count of this host's CPUs."""
        if now < self._next_cores and math.isfinite(self._cores):
            return
        self._next_cores = now + CORES_EVERY
        try:
            cores = float(count_cpus(read_bytes(f"{self._root}/stat")))
        except OSError as exc:
            self._warn_once("cores", "cannot count the CPUs in %s/stat: %r", self._root, exc)
            cores = 0.0
        if cores <= 0:
            cores = float(psutil.cpu_count() or math.nan)
        self._cores = cores

    def _pod_usage(self, now: float) -> Mapping[str, PodUsage] | None:
        """The pods' usage when it is due (None otherwise, or without a kubepods tree)."""
        if self.usage is None or now + 0.1 * self._usage_interval < self._next_usage:
            return None
        # On the schedule (0.5 s apart at 10 Hz, not 0.6 when a tick comes a little early).
        due = self._next_usage + self._usage_interval
        self._next_usage = due if due > now else now + self._usage_interval
        usage = self.usage.read(now)
        if usage is not None and "memory" not in self._features:
            # MemTotal only (the memory feature reads it every sample); not a feature, so a
            # failure does not make the sample missing.
            self._memory([])
        return usage

    def _psi_off(self, reason: str) -> None:
        self._psi_available = False
        self._warn_once(
            "psi-off",
            "pressure stall information unusable (%s); falling back to CPU utilisation alone",
            reason,
        )

    def _psi(self, resource: str, problems: list[str]) -> PsiTotals | None:
        path = f"{self._root}/pressure/{resource}"
        try:
            totals = parse_psi(self._reader(path).decode("ascii"))
            self._psi_failures = 0
            return totals
        except OSError as exc:
            if exc.errno in _PSI_OFF_ERRNOS:
                self._psi_off(f"{path}: {exc.strerror or exc}")
                return None
            problems.append(f"pressure/{resource}: {exc!r}")
        except (UnicodeDecodeError, PsiParseError) as exc:
            problems.append(f"pressure/{resource}: {exc}")
        self._warn_once(f"psi-{resource}", "malformed %s: %s", path, problems[-1])
        self._psi_failures += 1
        if self._psi_failures >= PSI_GIVE_UP:
            # Never a single good read in a row of this many: a format this parser does not know
            # or a file that stays broken. Without PSI the cpu feature still works.
            self._psi_off(f"{PSI_GIVE_UP} consecutive unreadable pressure files")
        return None

    # -- the sample ---------------------------------------------------------------------------

    def read(self, now: float) -> Sample:
        problems: list[str] = []
        values: dict[str, float] = {}

        cpu_now = self._cpu_times(problems) if "cpu" in self._features else None
        util = None
        if cpu_now is not None:
            if self._prev_cpu is not None:
                util = cpu_utilisation(self._prev_cpu, cpu_now)
            self._prev_cpu = cpu_now

        pressure: dict[str, float | None] = {}
        for resource in self._psi_resources:
            if not self._psi_available:
                break
            totals = self._psi(resource, problems)
            if totals is None:
                pressure[resource] = None
                continue
            prev = self._prev_psi.get(resource)
            self._prev_psi[resource] = (now, totals.some)
            pressure[resource] = (
                None if prev is None else pressure_fraction(prev[1], totals.some, prev[0], now)
            )

        pod_usage = self._pod_usage(now)
        sized = self.usage is not None and self.usage.layout is not None
        if sized:
            self._count_cores(now)
        psi_ok = self._psi_available
        for name in self._features:
            if name == "cpu":
                values[name] = cpu_feature(util, pressure.get("cpu"), psi_ok)
            elif name == "memory":
                used = self._memory(problems)
                values[name] = math.nan if used is None else used
            else:  # "<resource>_pressure"
                resource = name.removesuffix("_pressure")
                p = pressure.get(resource)
                values[name] = (0.0 if not psi_ok else math.nan) if p is None else p
        psi_cpu = pressure.get("cpu") if psi_ok else None
        return Sample(
            features=tuple([values[n] for n in self._features]),
            psi_available=psi_ok,
            missing=bool(problems),
            problems=tuple(problems),
            cpu_util=math.nan if util is None else util,
            psi_cpu=math.nan if psi_cpu is None else psi_cpu,
            cores=self._cores if sized else math.nan,
            memory_bytes=self._memory_total if sized else math.nan,
            pod_usage=pod_usage,
        )
