"""Each pod's own usage from its cgroup: cumulative CPU time and memory working set.

Design: docs/architecture.md#sampling; the per-class footprints it feeds:
docs/architecture.md#cost-and-capacity.

The kubelet puts every pod in a cgroup of its own under the kubepods tree (the layouts are those
of :mod:`agent.cgroup_watch`):

* cgroup v2 (one unified hierarchy at ``--cgroup-root``): ``cpu.stat`` ``usage_usec`` (µs) and
  ``memory.current`` minus ``inactive_file`` of ``memory.stat``;
* cgroup v1 (one hierarchy per controller): ``cpuacct/.../cpuacct.usage`` (ns) and
  ``memory/.../memory.usage_in_bytes`` minus ``total_inactive_file`` of ``memory.stat`` (the
  hierarchical figure: the pod's own processes sit in its containers' cgroups below it);
* the cgroupfs driver names a pod ``pod<uid>`` under ``kubepods/{burstable,besteffort}`` (a
  Guaranteed pod directly under ``kubepods``), the systemd driver
  ``kubepods-<qos>-pod<uid with _ for ->.slice`` under ``kubepods.slice/kubepods-<qos>.slice``
  (``kubepods-pod<uid>.slice`` directly under ``kubepods.slice``).

The working set is usage minus inactive file cache, never below 0: what the kubelet calls a pod's
working set, the memory it cannot give back without reclaiming pages it uses.

The parsers are pure; :class:`CgroupUsageReader` lists the pod directories and reads three small
files per pod through descriptors kept open (:class:`agent.files.KeptOpenFiles`). A pod whose files
are missing, unreadable or malformed (it is being created or removed, most often) is skipped for
that reading and counted; nothing here raises. :class:`agent.proc_source.ProcSource` calls the
reader about twice a second.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.files import KeptOpenFiles
from agent.telemetry import PodUsage

log = logging.getLogger(__name__)

KUBEPODS_NAMES = ("kubepods.slice", "kubepods")
# v1: the hierarchy with cpuacct (mounted alone or together with cpu, either name order)
V1_CPU_CONTROLLERS = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")
QOS_NAMES = frozenset(
    {"burstable", "besteffort", "kubepods-burstable.slice", "kubepods-besteffort.slice"}
)
# pod<uid> (cgroupfs) or kubepods[-<qos>]-pod<uid with _>.slice (systemd)
_POD_DIR = re.compile(
    r"(?:kubepods(?:-burstable|-besteffort)?-)?pod([0-9a-fA-F][0-9a-fA-F_-]{7,})(\.slice)?"
)
# Seconds between two looks for a kubepods tree that was not there.
LOCATE_EVERY = 10.0


def pod_uid(name: str) -> str | None:
    """The pod uid in a pod cgroup's directory name, or None for any other directory.

    >>> pod_uid("kubepods-burstable-pod3f1c2a4e_5b6d_4c7e_8f9a_0b1c2d3e4f5a.slice")
    '3f1c2a4e-5b6d-4c7e-8f9a-0b1c2d3e4f5a'
    >>> pod_uid("pod3f1c2a4e-5b6d-4c7e-8f9a-0b1c2d3e4f5a")
    '3f1c2a4e-5b6d-4c7e-8f9a-0b1c2d3e4f5a'
    >>> pod_uid("kubepods-burstable.slice"), pod_uid("cpu.stat"), pod_uid("podx")
    (None, None, None)
    """
    match = _POD_DIR.fullmatch(name)
    if match is None:
        return None
    uid = match.group(1)
    if match.group(2):  # systemd escapes '-' in a unit name as '_'
        uid = uid.replace("_", "-")
    elif "_" in uid:
        return None
    return uid


# -- parsers ----------------------------------------------------------------------------------


def _integer(data: bytes) -> int:
    text = data.strip()
    # 20 digits at most: a 64-bit counter (hundreds of digits would overflow a float later)
    if not text.isdigit() or len(text) > 20:
        raise ValueError(f"not a counter: {data[:40]!r}")
    return int(text)


def stat_value(data: bytes, key: bytes) -> int:
    """The value of ``key`` in a flat keyed file (``memory.stat``, ``cpu.stat``).

    >>> stat_value(b"inactive_anon 0\\ninactive_file 4096\\n", b"inactive_file")
    4096
    >>> stat_value(b"inactive_file 1\\ntotal_inactive_file 8192\\n", b"total_inactive_file")
    8192
    """
    if data.startswith(key + b" "):
        start = len(key) + 1
    else:
        at = data.find(b"\n" + key + b" ")
        if at < 0:
            raise ValueError(f"no {key.decode()} line")
        start = at + len(key) + 2
    end = data.find(b"\n", start)
    return _integer(data[start:] if end < 0 else data[start:end])


def working_set(usage: int, inactive_file: int) -> int:
    """Usage minus inactive file cache, not below 0 (the kubelet's working set).

    >>> working_set(1000, 300), working_set(100, 300)
    (700, 0)
    """
    return max(usage - inactive_file, 0)


def usage_v1(cpuacct_usage: bytes, usage_in_bytes: bytes, memory_stat: bytes) -> PodUsage:
    """A pod's usage from its cgroup v1 files; ValueError when one is malformed.

    >>> usage_v1(b"2500000000\\n", b"1000\\n", b"inactive_file 5\\ntotal_inactive_file 300\\n")
    PodUsage(cpu_seconds=2.5, memory_bytes=700.0)
    """
    cpu = _integer(cpuacct_usage) / 1e9
    memory = working_set(_integer(usage_in_bytes), stat_value(memory_stat, b"total_inactive_file"))
    return PodUsage(cpu, float(memory))


def usage_v2(cpu_stat: bytes, memory_current: bytes, memory_stat: bytes) -> PodUsage:
    """A pod's usage from its cgroup v2 files; ValueError when one is malformed.

    >>> usage_v2(b"usage_usec 2500000\\nuser_usec 2000000\\n", b"1000\\n", b"inactive_file 300\\n")
    PodUsage(cpu_seconds=2.5, memory_bytes=700.0)
    """
    cpu = stat_value(cpu_stat, b"usage_usec") / 1e6
    memory = working_set(_integer(memory_current), stat_value(memory_stat, b"inactive_file"))
    return PodUsage(cpu, float(memory))


# -- the tree ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where the kubepods tree is: one directory on v2, the cpuacct and memory ones on v1."""

    version: int
    cpu_top: str
    memory_top: str

    def files(self, relative: str) -> tuple[str, str, str]:
        """The CPU, memory usage and memory.stat files of the pod cgroup at ``relative``."""
        if self.version == 2:
            pod = f"{self.cpu_top}/{relative}"
            return f"{pod}/cpu.stat", f"{pod}/memory.current", f"{pod}/memory.stat"
        memory = f"{self.memory_top}/{relative}"
        return (
            f"{self.cpu_top}/{relative}/cpuacct.usage",
            f"{memory}/memory.usage_in_bytes",
            f"{memory}/memory.stat",
        )


def find_layout(cgroup_root: str) -> Layout | None:
    """The kubepods tree under ``cgroup_root``, or None when there is none.

    cgroup v2 has kubepods at the root of its single hierarchy; v1 has it inside each
    controller's hierarchy (and never at the root, which holds only the controllers).
    """
    for name in KUBEPODS_NAMES:
        top = os.path.join(cgroup_root, name)
        if os.path.isdir(top):
            return Layout(2, top, top)
    for controller in V1_CPU_CONTROLLERS:
        for name in KUBEPODS_NAMES:
            top = os.path.join(cgroup_root, controller, name)
            if os.path.isdir(top):
                return Layout(1, top, os.path.join(cgroup_root, "memory", name))
    return None


def list_pods(top: str) -> dict[str, str]:
    """Pod uid -> the pod cgroup's path relative to ``top`` (the kubepods directory).

    OSError when ``top`` itself cannot be listed; an unreadable QoS directory is passed over.
    """
    pods: dict[str, str] = {}
    qos: list[str] = []
    with os.scandir(top) as entries:
        for entry in entries:
            uid = pod_uid(entry.name)
            if uid is not None:
                pods[uid] = entry.name
            elif entry.name in QOS_NAMES:
                qos.append(entry.name)
    for name in qos:
        try:
            with os.scandir(os.path.join(top, name)) as entries:
                for entry in entries:
                    uid = pod_uid(entry.name)
                    if uid is not None:
                        pods[uid] = f"{name}/{entry.name}"
        except OSError:
            continue
    return pods


class CgroupUsageReader:
    """Reads the usage of every pod cgroup under ``cgroup_root``; :meth:`read` never raises.

    ``reader`` replaces the kept-open descriptors (tests pass a plain file reader).
    """

    def __init__(self, cgroup_root: str, reader: Callable[[str], bytes] | None = None) -> None:
        self.root = cgroup_root
        self._files = KeptOpenFiles(size=8192)
        self._read = reader if reader is not None else self._files
        self.layout: Layout | None = None
        self._next_locate = -math.inf
        self._paths: dict[str, tuple[str, str, str]] = {}  # pod uid -> its three files
        self.skipped = 0  # pod readings skipped: a file missing, unreadable or malformed
        self.pods = 0  # pods read at the last reading
        self._warned = False

    @property
    def open_files(self) -> int:
        return len(self._files)

    def read(self, now: float) -> Mapping[str, PodUsage] | None:
        """Every pod's usage at monotonic time ``now``; None without a kubepods tree (looked for
        again every LOCATE_EVERY seconds)."""
        if self.layout is None:
            if now < self._next_locate:
                return None
            self._next_locate = now + LOCATE_EVERY
            self.layout = find_layout(self.root)
            if self.layout is None:
                return None
            log.info("reading pods' usage from cgroup v%d at %s", self.layout.version, self.root)
        layout = self.layout
        try:
            pods = list_pods(layout.cpu_top)
        except OSError as exc:  # the tree went away (or was never readable)
            log.warning("cannot list %s: %r; per-pod usage paused", layout.cpu_top, exc)
            self.layout = None
            self._forget(list(self._paths))
            return None
        self._forget([uid for uid in self._paths if uid not in pods])
        usage: dict[str, PodUsage] = {}
        parse = usage_v2 if layout.version == 2 else usage_v1
        read = self._read
        for uid, relative in pods.items():
            paths = self._paths.get(uid)
            if paths is None:
                paths = self._paths[uid] = layout.files(relative)
            try:
                usage[uid] = parse(read(paths[0]), read(paths[1]), read(paths[2]))
            except (OSError, ValueError) as exc:
                self.skipped += 1
                self._forget([uid])  # reopen its files at the next reading
                if not self._warned:  # one line, not one per pod and reading
                    self._warned = True
                    log.warning("skipping pod %s: its cgroup usage is unreadable: %r", uid, exc)
        self.pods = len(usage)
        return usage

    def _forget(self, uids: list[str]) -> None:
        for uid in uids:
            for path in self._paths.pop(uid, ()):
                self._files.close(path)

    def close(self) -> None:
        self._files.close()
        self._paths.clear()
