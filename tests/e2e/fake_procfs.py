"""A scripted telemetry source for the e2e agents: fake procfs trees written from the pods that run.

A fake (no host is measured): every simulated node gets a directory shaped like ``/proc`` with
``stat``, ``meminfo`` and ``pressure/{cpu,memory,io}``, which a real ``carico agent
--proc-root <dir>`` samples with its production reader (:class:`agent.proc_source.ProcSource`).
What the files say comes from a contention model of the node's load:

* the writer asks the fake kubelet which pods run on each node (``running``: its ``pod_counts``),
  and :class:`PodLoadModel` turns the pods Running on a node, plus a scripted background load
  that is not a pod, into the simulator's own :class:`carico_app.simulate.cluster.Telemetry`
  (utilisation, PSI ``some`` fractions, memory used), with the simulator's formulas: runnable
  threads share the cores fairly, utilisation = min(demand, cores)/cores, CPU pressure =
  waiting/busy (Linux PSI on SMP);
* a writer thread integrates that into the cumulative counters procfs shows (``stat`` busy and
  idle time, PSI ``total`` stall microseconds) ``WRITE_HZ`` times a second.

Because the writer consumes ``Telemetry``, the simulator's ``Cluster.telemetry(node)`` can drive the
same files later in place of :class:`PodLoadModel` (``FakeProcfs(..., telemetry=...)``).

The agent keeps each file open and re-reads it from offset 0 (see agent/proc_source.py), so files
are rewritten in place, never replaced, and every number is zero-padded to a fixed width: a file
never changes length, so no truncation is needed and a reader never sees an empty file.
``meminfo`` and the pressure files are only rewritten when their content changes.

Why avail is predictable: with the agents' model frozen at the idle node (``--half-life`` far
beyond the run, see e2e_agents.py), the expected workload vector w is the idle telemetry y0, the
signal k = min_j (1 − y_j)/w_j is exactly linear in the pods, the estimator learns the per-pod cost
exactly, and avail in pods is :meth:`PodLoadModel.expected_avail`. CPU pressure is zero until the
runnable threads exceed the cores, so below that the files are exact at any sampling phase; above
it the PSI total is as old as the last write (≤ 1/``WRITE_HZ``), a bounded jitter.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from carico_app.simulate.cluster import Telemetry

log = logging.getLogger(__name__)

GI = 1024**3
WRITE_HZ = 50.0  # five writes per agent sample at 10 Hz: a PSI total is at most 20 ms old
_WIDTH = 20  # digits of every counter: fixed, so a file never changes length


@dataclass(frozen=True)
class PodLoadModel:
    """One node's load: system baseline + background (not pods) + identical CPU-bound pods.

    The defaults make a pod cost 2 threads and 0.5 GiB on an 8-core, 32 GiB node with 1 thread and
    1 GiB of system baseline, so the cpu feature ((util + psi)/2 = demand/16) binds and the node
    takes 7.5 pods from idle (:meth:`expected_avail`): avail lands half-way between integers.
    """

    cores: float = 8.0
    memory: float = 32.0 * GI
    base_threads: float = 1.0
    base_memory: float = 1.0 * GI
    pod_threads: float = 2.0
    pod_memory: float = 0.5 * GI
    background_threads: float = 0.0  # scripted load that is not a pod (tests set it)
    background_memory: float = 0.0

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

    def features(self, pods: int) -> tuple[float, float]:
        """The agent's default features (cpu, memory) for ``pods`` running
        (docs/architecture.md#sampling)."""
        t = self.telemetry(pods)
        return (t.util + t.psi_cpu_some) / 2.0, t.mem_used

    def expected_avail(self, pods: int, idle: PodLoadModel | None = None) -> float:
        """avail (pods) an agent reports once its model is frozen at ``idle`` (default: this model
        without background) and its per-pod cost is learned in the cpu dimension.

        w = y0 (the idle features), so k = min_j (1 − y_j)/w_j and the learned cost is
        p = (pod_threads/2·cores)/w_cpu; avail = k/p.
        """
        idle = idle or replace(self, background_threads=0.0, background_memory=0.0)
        w = idle.features(0)
        y = self.features(pods)
        k = min((1.0 - yj) / wj for yj, wj in zip(y, w, strict=True))
        per_pod_cost = self.pod_threads / (2.0 * self.cores) / w[0]
        return max(k, 0.0) / per_pod_cost

    def background_memory_for(self, avail: float) -> float:
        """Background memory (bytes) that leaves an idle node exactly ``avail`` pods, memory-bound
        (``avail`` below the cpu-bound idle avail); 0 pods leaves the node full (memory 100 %).

        Solves avail = (1 − y_m)/w_m / p for y_m with w = the idle features.
        """
        w_mem = self.features(0)[1]
        used = 1.0 - avail * self.per_pod_cost * w_mem
        return max(used * self.memory - self.base_memory, 0.0)

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
        # user nice system idle iowait irq softirq steal guest guest_nice
        self.stat.write(
            f"cpu  {_n(self.busy_us)} {_n(0)} {_n(0)} {_n(self.idle_us)} "
            f"{_n(0)} {_n(0)} {_n(0)} {_n(0)} {_n(0)} {_n(0)}\n".encode()
        )
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


class FakeProcfs:
    """Per-node fake procfs trees under ``root``, kept current by a writer thread.

    ``running`` says how many pods run on each node now (polled at every write, so the files
    never lag the kubelet by more than one write); set background load with
    :meth:`set_background`. ``telemetry`` overrides where a node's state comes from (e.g. the
    simulator's ``Cluster.telemetry``): it gets (node, running pods, now).
    """

    def __init__(
        self,
        root: Path,
        nodes: Sequence[str],
        running: Callable[[], Mapping[str, int]],
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
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self._write_all(now)  # the files exist before any agent starts

    def proc_root(self, node: str) -> Path:
        return self.root / node

    # -- inputs ---------------------------------------------------------------------------------
    def set_background(self, node: str, threads: float = 0.0, memory: float = 0.0) -> None:
        """Load ``node`` with work that is not a pod (threads; memory in bytes)."""
        with self._lock:
            self._models[node] = replace(
                self.model, background_threads=threads, background_memory=memory
            )

    def leave_room(self, node: str, avail: float) -> None:
        """Fill ``node``'s memory with background load until an idle node has ``avail`` pods of
        room (0: full), as :meth:`PodLoadModel.background_memory_for` computes."""
        self.set_background(node, memory=self.model.background_memory_for(avail))

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
            state = {n: (self._models[n], running.get(n, 0)) for n in self._files}
        for node, (model, pods) in state.items():
            if self._telemetry is not None:
                t = self._telemetry(node, pods, now)
            else:
                t = model.telemetry(pods, now)
            self._files[node].write(t, now)

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
