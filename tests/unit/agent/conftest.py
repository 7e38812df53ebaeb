"""Fixtures for the agent's unit tests: a fake procfs directory the tests can advance."""

from __future__ import annotations

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
        line = "cpu  " + " ".join(str(f) for f in fields)
        (self.root / "stat").write_text(line + "\ncpu0 " + " ".join(str(f) for f in fields) + "\n")

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
