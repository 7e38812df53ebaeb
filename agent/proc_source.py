"""``ProcSource``: the host's telemetry read through a procfs root (docs/architecture.md#sampling).

Cost decides how the files are read. The agent samples at 10 Hz on a budget of 1 % of a core, and
between two samples it sleeps 100 ms, so every read runs with cold caches. Measured per read on a
loaded 2-core host under those conditions: ``psutil.cpu_times()`` ≈ 150 µs and
``psutil.virtual_memory()`` ≈ 200 µs (each opens and closes its file, and the latter computes a
dozen fields), against ≈ 40 µs and ≈ 25 µs for a descriptor kept open and re-read from offset 0
with ``os.pread`` plus the two or eight numbers the agent needs. Together that was a third of the
agent's CPU. So ``stat``, ``meminfo`` and the pressure files are read through :class:`ProcFiles`
(procfs regenerates a file's content on every read from offset 0; a failing descriptor is closed
and reopened at the next read) with the small parsers of :mod:`agent.telemetry` and
:mod:`agent.psi`. psutil remains for what it does better: a kernel older than 3.14 has no
MemAvailable, and psutil estimates it the way the kernel does; the tests also check the ``stat``
parser against ``psutil.cpu_times()``.

psutil's procfs root is a module global (``psutil.PROCFS_PATH``) that every psutil call reads at
call time. Changing it for the whole process would surprise any other psutil user in the process
(and two sources with different roots, as in the tests, would race), so each read swaps it in and
back out under a lock: :func:`procfs_root`. The swap costs two attribute assignments.

Failure handling: PSI absent (``ENOENT``: the kernel was built or booted without it), disabled
(``EOPNOTSUPP``, errno 95: older kernels booted with ``psi=0``) or forbidden (``EACCES``) switches
the source to utilisation only, logged once and reported in every sample's ``psi_available``. Any
other unreadable or malformed file marks the sample missing (NaN features) and never raises; PSI
files that stay unreadable for ``PSI_GIVE_UP`` samples in a row are given up the same way.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from agent.psi import PsiParseError, PsiTotals, parse_psi, pressure_fraction
from agent.telemetry import (
    DEFAULT_FEATURES,
    CpuTimes,
    Sample,
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


def read_bytes(path: str) -> bytes:
    """Open, read and close: the simple reader (tests use it on files they replace)."""
    with open(path, "rb") as f:
        return f.read()


class ProcFiles:
    """Reads procfs files through descriptors kept open between reads (see the module doc)."""

    def __init__(self, size: int = 16384) -> None:
        self._fds: dict[str, int] = {}
        self._size = size

    def __call__(self, path: str) -> bytes:
        fd = self._fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            self._fds[path] = fd
        try:
            return os.pread(fd, self._size, 0)
        except OSError:
            self.close(path)
            raise

    def close(self, path: str | None = None) -> None:
        for p in [path] if path is not None else list(self._fds):
            fd = self._fds.pop(p, None)
            if fd is not None:
                os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit os may already be gone
            self.close()


class ProcSource:
    """Samples the host through ``proc_root``; ``read`` never raises on bad telemetry."""

    def __init__(
        self,
        proc_root: str = "/proc",
        features: tuple[str, ...] = DEFAULT_FEATURES,
        reader: Callable[[str], bytes] | None = None,
    ) -> None:
        self._root = str(Path(proc_root))
        self._features = tuple(features)
        self._reader = reader if reader is not None else ProcFiles()
        needed = {"cpu"} if {"cpu", "cpu_pressure"} & set(features) else set()
        needed |= {res for res in ("memory", "io") if f"{res}_pressure" in features}
        self._psi_resources = tuple(sorted(needed))
        self._psi_available = True
        self._psi_failures = 0
        self._warned: set[str] = set()
        self._prev_cpu: CpuTimes | None = None
        self._prev_psi: dict[str, tuple[float, int]] = {}

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
                used = memory_used(float(head[0]), float(head[1]))
            else:  # a kernel without MemAvailable: psutil estimates it
                with procfs_root(self._root):
                    vm = psutil.virtual_memory()
                used = memory_used(float(vm.total), float(vm.available))
        except (OSError, *_PARSE_ERRORS) as exc:
            problems.append(f"meminfo: {exc!r}")
            self._warn_once("meminfo", "cannot read %s/meminfo: %r", self._root, exc)
            return None
        if used is None:
            problems.append("meminfo: MemTotal is not positive")
        return used

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
        return Sample(
            features=tuple([values[n] for n in self._features]),
            psi_available=psi_ok,
            missing=bool(problems),
            problems=tuple(problems),
        )
