"""A scripted telemetry source for the e2e agents: fake procfs and cgroup trees written from the
pods that run.

A fake (no host is measured): every simulated node gets a directory shaped like ``/proc`` with
``stat``, ``meminfo`` and ``pressure/{cpu,memory,io}``, which a real ``carico agent
--proc-root <dir>`` samples with its production reader (:class:`agent.proc_source.ProcSource`), and
a cgroup v2 tree (cgroupfs driver: ``kubepods/besteffort/pod<uid>``, the bed's pods request
nothing) with each running pod's ``cpu.stat``, ``memory.current`` and ``memory.stat``, which the
same agent reads with ``--cgroup-root <dir>`` (:class:`agent.cgroup_usage.CgroupUsageReader`).
What the files say comes from a contention model of the node's load:

* the writer asks the fake kubelet which pods run on each node (``running``: the uids of its
  Running pods), and :class:`PodLoadModel` turns the pods Running on a node, plus a scripted
  background load that is not a pod, into the simulator's own
  :class:`carico_app.simulate.cluster.Telemetry` (utilisation, PSI ``some`` fractions, memory
  used), with the simulator's formulas: runnable threads share the cores fairly, utilisation =
  min(demand, cores)/cores, CPU pressure = waiting/busy (Linux PSI on SMP); each pod's share is
  its threads' fair share of the busy cores (:meth:`PodLoadModel.pod_cpu_rate`), its memory
  ``pod_memory`` plus ``POD_INACTIVE_FILE`` of inactive file cache (which the agent must not
  count);
* a writer thread integrates that into the cumulative counters procfs and the cgroups show
  (``stat`` busy and idle time, PSI ``total`` stall microseconds, each pod's ``usage_usec``)
  ``WRITE_HZ`` times a second. A pod's cgroup appears when it runs and goes when it stops.

Because the writer consumes ``Telemetry``, the simulator's ``Cluster.telemetry(node)`` can drive the
same files later in place of :class:`PodLoadModel` (``FakeProcfs(..., telemetry=...)``).

The agent keeps each file open and re-reads it from offset 0 (see agent/proc_source.py), so files
are rewritten in place, never replaced, and every number is zero-padded to a fixed width: a file
never changes length, so no truncation is needed and a reader never sees an empty file.
``meminfo`` and the pressure files are only rewritten when their content changes.

Why the room is predictable: each pod's cgroup shows exactly the model's pod (2 cores, 0.5 GiB),
so the agents learn that footprint per class, and the headroom they report is the full level L
minus the node's telemetry y (docs/architecture.md#cost-and-capacity): the room for one more pod,
min_j (L − y_j)/need_j with need the pod's share of each feature, is
:meth:`PodLoadModel.expected_room`. The agents' legacy avail is predictable too: with their model
frozen at the idle node (``--half-life`` far beyond the run, see e2e_agents.py), the expected
workload vector w is the idle telemetry y0, the signal k = min_j (L − y_j)/w_j is exactly linear
in the pods, the estimator learns the per-pod cost exactly, and avail in pods is
:meth:`PodLoadModel.expected_avail`. CPU pressure is zero until the runnable threads exceed the
cores, so below that the files are exact at any sampling phase; above it the PSI total is as old
as the last write (≤ 1/``WRITE_HZ``), a bounded jitter. A pod's CPU counter is read against the
agent's own clock, so each reading of it carries that jitter too (a 20 ms-old counter over the
0.5 s between readings: up to 4 %); the footprint averages it out.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from agent.pipeline import PipelineConfig
from carico_app.simulate.cluster import Telemetry

log = logging.getLogger(__name__)

GI = 1024**3
WRITE_HZ = 50.0  # five writes per agent sample at 10 Hz: a PSI total is at most 20 ms old
_WIDTH = 20  # digits of every counter: fixed, so a file never changes length
# The level at which the agents count a node full: theirs by default (--full-level).
FULL_LEVEL = PipelineConfig().full_level
# Inactive file cache in each pod's cgroup, on top of its working set: memory.current counts it,
# the agent must subtract it (memory.stat inactive_file).
POD_INACTIVE_FILE = 64 * 1024**2


@dataclass(frozen=True)
class PodLoadModel:
    """One node's load: system baseline + background (not pods) + identical CPU-bound pods.

    The defaults make a pod cost 2 threads and 0.5 GiB on an 8-core, 32 GiB node with 1 thread and
    1 GiB of system baseline, so the cpu feature ((util + psi)/2 = demand/16) binds: an idle node
    has room for (0.85 − 1/16)/(2/16) = 6.3 pods below the full level (:meth:`expected_room`).
    """

    cores: float = 8.0
    memory: float = 32.0 * GI
    base_threads: float = 1.0
    base_memory: float = 1.0 * GI
    pod_threads: float = 2.0
    pod_memory: float = 0.5 * GI
    background_threads: float = 0.0  # scripted load that is not a pod (tests set it)
    background_memory: float = 0.0
    full_level: float = FULL_LEVEL

    def telemetry(self, pods: int, now: float = 0.0) -> Telemetry:
        """The node's state with ``pods`` running, as the simulator's ``Telemetry``."""
        demand = self.base_threads + self.background_threads + self.pod_threads * pods
        busy = min(demand, self.cores)
        used = self.base_memory + self.background_memory + self.pod_memory * pods
        mem_used = min(used / self.memory, 1.0)
        return Telemetry(
            timestamp=now,
            util=busy / self.cores,
            # Linux PSI on SMP: some = min(waiting / busy, 1) (as carico_app/simulate/cluster.py).
            psi_cpu_some=min(max(demand - self.cores, 0.0) / busy, 1.0) if busy > 0 else 0.0,
            mem_used=mem_used,
            # The simulator's memory-pressure proxy: reclaim stalls as the node nears full.
            psi_mem_some=min(max((mem_used - 0.9) / 0.1, 0.0), 1.0),
            psi_io_some=0.0,
            pods_running=pods,
        )

    def pod_cpu_rate(self, pods: int) -> float:
        """Cores one pod gets with ``pods`` running: its threads' fair share of the busy cores."""
        demand = self.base_threads + self.background_threads + self.pod_threads * pods
        return self.pod_threads * min(demand, self.cores) / demand

    @property
    def need(self) -> tuple[float, float]:
        """One pod's share of each feature (cpu, memory): its demand of 2 threads is
        2/(2·cores) of the cpu feature (docs/architecture.md#sampling), its 0.5 GiB of memory."""
        return self.pod_threads / (2.0 * self.cores), self.pod_memory / self.memory

    def expected_room(self, pods: int) -> float:
        """Pods of this model's kind that fit below the full level with ``pods`` running: what the
        extender computes from the agent's headroom and the learned footprint (a real number)."""
        y = self.features(pods)
        return min(max(self.full_level - yj, 0.0) / nj for yj, nj in zip(y, self.need, strict=True))

    def features(self, pods: int) -> tuple[float, float]:
        """The agent's default features (cpu, memory) for ``pods`` running
        (docs/architecture.md#sampling)."""
        t = self.telemetry(pods)
        return (t.util + t.psi_cpu_some) / 2.0, t.mem_used

    def expected_avail(self, pods: int, idle: PodLoadModel | None = None) -> float:
        """The legacy avail (pods) an agent reports once its model is frozen at ``idle``
        (default: this model without background) and its per-pod cost is learned in the cpu
        dimension.

        w = y0 (the idle features), so k = min_j (L − y_j)/w_j and the learned cost is
        p = (pod_threads/2·cores)/w_cpu; avail = k/p.
        """
        idle = idle or replace(self, background_threads=0.0, background_memory=0.0)
        w = idle.features(0)
        y = self.features(pods)
        k = min((self.full_level - yj) / wj for yj, wj in zip(y, w, strict=True))
        per_pod_cost = self.pod_threads / (2.0 * self.cores) / w[0]
        return max(k, 0.0) / per_pod_cost

    def background_memory_for(self, room: float, pods: int = 0) -> float:
        """Background memory (bytes) that leaves a node running ``pods`` exactly ``room`` pods of
        room, memory-bound (``room`` below the cpu-bound room).

        Solves room = (L − y_m)/need_m for y_m.
        """
        used = (self.full_level - room * self.need[1]) * self.memory
        return max(used - self.base_memory - pods * self.pod_memory, 0.0)

    def background_memory_full(self) -> float:
        """Background memory (bytes) that fills the node's memory (100 %, far above the full
        level: no pod of any size fits, whatever the noise)."""
        return self.memory - self.base_memory

    @property
    def per_pod_cost(self) -> float:
        """The per-pod cost in k units the agents learn (cpu dimension, idle model)."""
        return self.pod_threads / (2.0 * self.cores) / self.features(0)[0]


class _File:
    """A file rewritten in place (pwrite at offset 0, constant length)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.last = b""

    def write(self, data: bytes) -> None:
        if data == self.last:
            return
        if self.last and len(data) != len(self.last):
            os.ftruncate(self.fd, len(data))  # only if a counter outgrew its width: never here
        os.pwrite(self.fd, data, 0)
        self.last = data

    def close(self) -> None:
        os.close(self.fd)


def _n(value: float) -> str:
    return f"{max(int(value), 0):0{_WIDTH}d}"


def _psi(some_us: float, full_us: float) -> bytes:
    return (
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={_n(some_us)}\n"
        f"full avg10=0.00 avg60=0.00 avg300=0.00 total={_n(full_us)}\n"
    ).encode()


class _NodeFiles:
    """The counters and files of one node's fake procfs."""

    def __init__(self, root: Path, cores: float, memory: float, now: float) -> None:
        (root / "pressure").mkdir(parents=True, exist_ok=True)
        self.root = root
        self.cores = cores
        self.memory_kb = int(memory // 1024)
        self.stat = _File(root / "stat")
        self.meminfo = _File(root / "meminfo")
        self.pressure = {r: _File(root / "pressure" / r) for r in ("cpu", "memory", "io")}
        # Cumulative counters in microseconds (CPU time summed over cores, like /proc/stat's ticks
        # but finer: only ratios are used).
        self.busy_us = 0.0
        self.idle_us = 0.0
        self.stall_us = {r: 0.0 for r in self.pressure}
        self.at = now

    def write(self, t: Telemetry, now: float) -> None:
        dt_us = max(now - self.at, 0.0) * 1e6
        self.at = now
        self.busy_us += t.util * self.cores * dt_us
        self.idle_us += (1.0 - t.util) * self.cores * dt_us
        for resource, frac in (
            ("cpu", t.psi_cpu_some),
            ("memory", t.psi_mem_some),
            ("io", t.psi_io_some),
        ):
            self.stall_us[resource] += frac * dt_us
        # user nice system idle iowait irq softirq steal guest guest_nice; one cpuN line per
        # core (the agent counts them: the node's size), sharing the load evenly.
        lines = [f"cpu  {_n(self.busy_us)} {_n(0)} {_n(0)} {_n(self.idle_us)}"]
        per_cpu = self.busy_us / self.cores, self.idle_us / self.cores
        lines += [
            f"cpu{i} {_n(per_cpu[0])} {_n(0)} {_n(0)} {_n(per_cpu[1])}"
            for i in range(int(self.cores))
        ]
        zeros = f" {_n(0)}" * 6
        self.stat.write("".join(f"{line}{zeros}\n" for line in lines).encode())
        available_kb = int(self.memory_kb * (1.0 - t.mem_used))
        self.meminfo.write(
            f"MemTotal:       {_n(self.memory_kb)} kB\n"
            f"MemFree:        {_n(available_kb)} kB\n"
            f"MemAvailable:   {_n(available_kb)} kB\n".encode()
        )
        for resource, f in self.pressure.items():
            # cpu has no meaningful "full" at system level; the others stall fully as often as
            # partly in this model (a single workload class).
            full = 0.0 if resource == "cpu" else self.stall_us[resource]
            f.write(_psi(self.stall_us[resource], full))

    def close(self) -> None:
        for f in (self.stat, self.meminfo, *self.pressure.values()):
            f.close()


class _PodCgroup:
    """One pod's cgroup v2 files and its cumulative CPU time."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True)
        self.directory = directory
        self.cpu = _File(directory / "cpu.stat")
        self.current = _File(directory / "memory.current")
        self.stat = _File(directory / "memory.stat")
        self.usage_us = 0.0

    def write(self, cores: float, memory: float, dt_us: float) -> None:
        self.usage_us += cores * dt_us
        self.cpu.write(f"usage_usec {_n(self.usage_us)}\nuser_usec {_n(self.usage_us)}\n".encode())
        self.current.write(f"{_n(memory + POD_INACTIVE_FILE)}\n".encode())
        self.stat.write(
            f"anon {_n(memory)}\nfile {_n(POD_INACTIVE_FILE)}\n"
            f"inactive_file {_n(POD_INACTIVE_FILE)}\nactive_file {_n(0)}\n".encode()
        )

    def close(self) -> None:
        for f in (self.cpu, self.current, self.stat):
            f.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class _NodeCgroups:
    """The kubepods tree of one node: a pod cgroup for each pod that runs."""

    def __init__(self, root: Path, now: float) -> None:
        self.qos = root / "kubepods" / "besteffort"
        self.qos.mkdir(parents=True, exist_ok=True)
        self.pods: dict[str, _PodCgroup] = {}
        self.at = now

    def write(self, uids: Collection[str], model: PodLoadModel, now: float) -> None:
        dt_us = max(now - self.at, 0.0) * 1e6
        self.at = now
        for uid in [u for u in self.pods if u not in uids]:
            self.pods.pop(uid).close()
        cores = model.pod_cpu_rate(len(uids)) if uids else 0.0
        for uid in uids:
            pod = self.pods.get(uid)
            if pod is None:  # it starts now: no CPU time yet
                self.pods[uid] = _PodCgroup(self.qos / f"pod{uid}")
                self.pods[uid].write(0.0, model.pod_memory, 0.0)
            else:
                pod.write(cores, model.pod_memory, dt_us)

    def close(self) -> None:
        for pod in self.pods.values():
            pod.close()
        self.pods.clear()


class FakeProcfs:
    """Per-node fake procfs and cgroup trees under ``root``, kept current by a writer thread.

    ``running`` gives the uids of the pods running on each node now (polled at every write, so
    the files never lag the kubelet by more than one write); set background load with
    :meth:`set_background`. ``telemetry`` overrides where a node's state comes from (e.g. the
    simulator's ``Cluster.telemetry``): it gets (node, running pods, now); the pods' cgroups
    still follow the :class:`PodLoadModel`.
    """

    def __init__(
        self,
        root: Path,
        nodes: Sequence[str],
        running: Callable[[], Mapping[str, Collection[str]]],
        model: PodLoadModel | None = None,
        *,
        telemetry: Callable[[str, int, float], Telemetry] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.model = model or PodLoadModel()
        self.clock = clock
        self._telemetry = telemetry
        self._running = running
        self._lock = threading.Lock()
        self._models: dict[str, PodLoadModel] = {n: self.model for n in nodes}
        now = clock()
        self._files = {
            n: _NodeFiles(root / n, self.model.cores, self.model.memory, now) for n in nodes
        }
        self._cgroups = {n: _NodeCgroups(self.cgroup_root(n), now) for n in nodes}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self._write_all(now)  # the files exist before any agent starts

    def proc_root(self, node: str) -> Path:
        return self.root / node

    def cgroup_root(self, node: str) -> Path:
        return self.root / "cgroup" / node

    # -- inputs ---------------------------------------------------------------------------------
    def set_background(self, node: str, threads: float = 0.0, memory: float = 0.0) -> None:
        """Load ``node`` with work that is not a pod (threads; memory in bytes)."""
        with self._lock:
            self._models[node] = replace(
                self.model, background_threads=threads, background_memory=memory
            )

    def leave_room(self, node: str, room: float, pods: int = 0) -> None:
        """Fill ``node``'s memory with background load until, with ``pods`` running, it has
        ``room`` pods of room, as :meth:`PodLoadModel.background_memory_for` computes."""
        self.set_background(node, memory=self.model.background_memory_for(room, pods))

    def fill(self, node: str) -> None:
        """Fill ``node``'s memory (100 %): no room for any pod."""
        self.set_background(node, memory=self.model.background_memory_full())

    def clear_background(self) -> None:
        with self._lock:
            for node in self._models:
                self._models[node] = self.model

    def node_model(self, node: str) -> PodLoadModel:
        with self._lock:
            return self._models[node]

    # -- the writer -----------------------------------------------------------------------------
    def _write_all(self, now: float) -> None:
        running = self._running()
        with self._lock:
            state = {n: (self._models[n], running.get(n, ())) for n in self._files}
        for node, (model, uids) in state.items():
            if self._telemetry is not None:
                t = self._telemetry(node, len(uids), now)
            else:
                t = model.telemetry(len(uids), now)
            self._files[node].write(t, now)
            self._cgroups[node].write(uids, model, now)

    def _run(self) -> None:
        period = 1.0 / WRITE_HZ
        next_at = self.clock()
        while not self._stop.is_set():
            try:
                self._write_all(self.clock())
            except Exception as exc:  # keep the other nodes' files alive; tests check errors
                self.errors.append(repr(exc))
            next_at = max(next_at + period, self.clock())
            self._stop.wait(max(0.0, next_at - self.clock()))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fake-procfs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        for files in self._files.values():
            files.close()
        for cgroups in self._cgroups.values():
            cgroups.close()
