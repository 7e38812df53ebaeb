"""Fuzzing the agent's readers of kernel output with mutations of real files.

The fixtures of tests/unit/agent (``/proc/stat``, ``/proc/meminfo``, pressure files) and the
cgroup v2 files of a pod are mutated byte by byte (truncated, cut, repeated, flipped, bytes that
are not UTF-8, numbers replaced by huge or special ones) and read through the agent's real
readers on a real directory tree: ``ProcSource`` (which must never raise, and whose features
are each NaN or in [0, 1]) and ``CgroupUsageReader`` (which must
never raise, and skips a pod whose files it cannot use, never reporting a negative or infinite
usage).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.cgroup_usage import CgroupUsageReader
from agent.files import read_bytes
from agent.proc_source import ProcSource

from .conftest import budget, tried
from .mutations import mutated_bytes

FIXTURES = Path(__file__).parents[1] / "unit" / "agent" / "fixtures"
STAT = (FIXTURES / "stat_head").read_bytes()
MEMINFO = (FIXTURES / "meminfo").read_bytes()
PSI = (FIXTURES / "psi_cpu_5.13").read_bytes()
FEATURES = ("cpu", "memory", "cpu_pressure", "memory_pressure")
POD_DIR = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3f1c2a4e_5b6d.slice"
CPU_STAT = b"usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"
MEMORY_CURRENT = b"104857600\n"
MEMORY_STAT = b"anon 1000\nfile 4096\ninactive_anon 0\ninactive_file 4096\n"


def _files(original: bytes) -> st.SearchStrategy[bytes]:
    """The real file, mutated once or twice."""
    once = mutated_bytes(original)
    return st.one_of(once, once.flatmap(mutated_bytes))


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-agent-") as tmp:
        yield Path(tmp)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.mark.fuzz("agent procfs")
# psutil warns when a mutated meminfo lacks the fields of its estimate (the fallback path)
@pytest.mark.filterwarnings("ignore:.*memory stats couldn.t be determined:RuntimeWarning")
def test_proc_source_never_raises_on_mutated_kernel_files(root: Path) -> None:
    proc = root / "proc"

    @budget(200)
    @given(_files(STAT), _files(MEMINFO), _files(PSI), _files(PSI))
    def one(stat: bytes, meminfo: bytes, cpu_psi: bytes, memory_psi: bytes) -> None:
        tried("agent procfs", 4)
        for name, data in (("stat", STAT), ("meminfo", MEMINFO)):
            _write(proc / name, data)
        for name in ("cpu", "memory"):
            _write(proc / "pressure" / name, PSI)
        source = ProcSource(str(proc), FEATURES, reader=read_bytes)
        source.read(0.0)  # a good first sample: the mutated one is compared with it
        _write(proc / "stat", stat)
        _write(proc / "meminfo", meminfo)
        _write(proc / "pressure" / "cpu", cpu_psi)
        _write(proc / "pressure" / "memory", memory_psi)
        sample = source.read(0.1)
        assert len(sample.features) == len(FEATURES)
        # NaN is "no value" (a malformed file, or counters that went backwards as a cut read
        # can make them look); anything else is a fraction
        for value in sample.features:
            assert math.isnan(value) or 0.0 <= value <= 1.0, sample

    one()


@pytest.mark.fuzz("agent cgroup")
def test_cgroup_reader_never_raises_on_mutated_pod_files(root: Path) -> None:
    cgroup = root / "cgroup"
    pod = cgroup / POD_DIR

    @budget(200)
    @given(_files(CPU_STAT), _files(MEMORY_CURRENT), _files(MEMORY_STAT))
    def one(cpu_stat: bytes, memory_current: bytes, memory_stat: bytes) -> None:
        tried("agent cgroup", 3)
        _write(pod / "cpu.stat", cpu_stat)
        _write(pod / "memory.current", memory_current)
        _write(pod / "memory.stat", memory_stat)
        reader = CgroupUsageReader(str(cgroup), reader=read_bytes)
        usage = reader.read(0.0)
        assert usage is not None  # the tree is there
        for pod_usage in usage.values():
            assert math.isfinite(pod_usage.cpu_seconds) and pod_usage.cpu_seconds >= 0
            assert math.isfinite(pod_usage.memory_bytes) and pod_usage.memory_bytes >= 0
        assert len(usage) + reader.skipped == 1

    one()
