"""Fixtures for the agent's unit tests: a fake procfs directory the tests can advance."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


class FakeProc:
    """A procfs root in a temporary directory (a fake: the real /proc cannot be scripted).

    ``stat`` holds the ``cpu`` line in USER_HZ ticks; ``meminfo`` is real kernel output with
    MemTotal/MemAvailable overridable; ``pressure`` files are written as the kernel formats them.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "pressure").mkdir(parents=True)
        self.meminfo_lines = (FIXTURES / "meminfo").read_text().splitlines()
        self.cores = 1  # cpuN lines written by set_cpu

    def set_cpu(
        self,
        user: int,
        nice: int,
        system: int,
        idle: int,
        iowait: int = 0,
        irq: int = 0,
        softirq: int = 0,
        steal: int = 0,
        guest: int = 0,
        guest_nice: int = 0,
    ) -> None:
        fields = (user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice)
        values = " ".join(str(f) for f in fields)
        per_cpu = "".join(f"cpu{i} {values}\n" for i in range(self.cores))
        (self.root / "stat").write_text(f"cpu  {values}\n{per_cpu}intr 0\n")

    def set_memory(self, total_kb: int, available_kb: int) -> None:
        out = []
        for line in self.meminfo_lines:
            if line.startswith("MemTotal:"):
                line = f"MemTotal:       {total_kb} kB"
            elif line.startswith("MemAvailable:"):
                line = f"MemAvailable:   {available_kb} kB"
            out.append(line)
        (self.root / "meminfo").write_text("\n".join(out) + "\n")

    def set_psi(self, resource: str, some_us: int, full_us: int | None = 0) -> None:
        text = f"some avg10=0.00 avg60=0.00 avg300=0.00 total={some_us}\n"
        if full_us is not None:
            text += f"full avg10=0.00 avg60=0.00 avg300=0.00 total={full_us}\n"
        (self.root / "pressure" / resource).write_text(text)

    def write(self, relative: str, text: str) -> None:
        (self.root / relative).write_text(text)


@pytest.fixture
def fake_proc(tmp_path: Path) -> FakeProc:
    proc = FakeProc(tmp_path / "proc")
    proc.set_cpu(1000, 0, 500, 8000)
    proc.set_memory(8_000_000, 6_000_000)
    for resource in ("cpu", "memory", "io"):
        proc.set_psi(resource, 0)
    return proc


class FakeCgroups:
    """A kubepods cgroup tree in a temporary directory, as the kubelet lays it out (a fake: the
    real cgroup filesystem cannot be scripted without root).

    ``version`` 1 (a hierarchy per controller; here ``cpu,cpuacct`` with the usual ``cpu`` and
    ``cpuacct`` links, and ``memory``) or 2 (one hierarchy); ``driver`` ``cgroupfs`` or
    ``systemd``. Pods are ``guaranteed``, ``burstable`` or ``besteffort``.
    """

    def __init__(self, root: Path, version: int, driver: str) -> None:
        self.root, self.version, self.driver = root, version, driver
        self._pods: dict[str, tuple[str, str]] = {}  # uid -> (relative dir, qos)
        if version == 1:
            (root / "cpu,cpuacct").mkdir(parents=True, exist_ok=True)
            for link in ("cpu", "cpuacct"):
                if not (root / link).exists():
                    (root / link).symlink_to("cpu,cpuacct")
            (root / "memory").mkdir(exist_ok=True)

    @property
    def top(self) -> str:
        return "kubepods.slice" if self.driver == "systemd" else "kubepods"

    def _relative(self, uid: str, qos: str) -> str:
        if self.driver == "cgroupfs":
            return f"pod{uid}" if qos == "guaranteed" else f"{qos}/pod{uid}"
        escaped = uid.replace("-", "_")
        if qos == "guaranteed":
            return f"kubepods-pod{escaped}.slice"
        return f"kubepods-{qos}.slice/kubepods-{qos}-pod{escaped}.slice"

    def _hierarchy(self, controller: str) -> Path:
        if self.version == 2:
            return self.root / self.top
        return self.root / ("cpuacct" if controller == "cpu" else "memory") / self.top

    def pod_dir(self, uid: str, controller: str = "cpu") -> Path:
        return self._hierarchy(controller) / self._pods[uid][0]

    def add_pod(self, uid: str, qos: str, cpu_seconds: float, memory: int, inactive: int) -> None:
        self._pods[uid] = (self._relative(uid, qos), qos)
        for controller in ("cpu", "memory"):
            self.pod_dir(uid, controller).mkdir(parents=True, exist_ok=True)
        self.set_usage(uid, cpu_seconds, memory, inactive)

    def write(self, uid: str, name: str, data: bytes) -> None:
        controller = "cpu" if name.startswith("cpu") else "memory"
        (self.pod_dir(uid, controller) / name).write_bytes(data)

    def set_usage(self, uid: str, cpu_seconds: float, memory: int, inactive: int) -> None:
        if self.version == 2:
            usec = round(cpu_seconds * 1e6)
            self.write(uid, "cpu.stat", f"usage_usec {usec}\nuser_usec {usec}\n".encode())
            self.write(uid, "memory.current", f"{memory}\n".encode())
            stat = f"anon {memory - inactive}\ninactive_file {inactive}\nactive_file 0\n"
        else:
            self.write(uid, "cpuacct.usage", f"{round(cpu_seconds * 1e9)}\n".encode())
            self.write(uid, "memory.usage_in_bytes", f"{memory}\n".encode())
            stat = f"cache 0\ninactive_file 0\ntotal_cache {inactive}\n"
            stat += f"total_inactive_file {inactive}\n"
        self.write(uid, "memory.stat", stat.encode())

    def remove_pod(self, uid: str) -> None:
        for controller in ("cpu", "memory"):
            shutil.rmtree(self.pod_dir(uid, controller), ignore_errors=True)
        del self._pods[uid]

    def remove_all(self) -> None:
        for controller in ("cpu", "memory"):
            shutil.rmtree(self._hierarchy(controller), ignore_errors=True)
        self._pods.clear()
