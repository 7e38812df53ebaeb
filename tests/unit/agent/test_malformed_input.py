"""Arbitrary file contents never crash the telemetry readers (property-based, derandomised)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.cgroup_usage import usage_v1, usage_v2
from agent.proc_source import ProcSource, read_bytes
from agent.psi import PsiParseError, parse_psi
from agent.telemetry import parse_meminfo_head

REAL = (
    "some avg10=0.12 avg60=0.34 avg300=0.56 total=123456\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)

# Kernel-like text cut at any point, or mangled, or arbitrary.
psi_texts = st.one_of(
    st.integers(0, len(REAL)).map(lambda n: REAL[:n]),
    st.text(alphabet="somefulavg0123456789.=total \n-x", max_size=120),
    st.text(max_size=80),
)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(psi_texts)
def test_parse_psi_either_parses_or_raises_its_own_error(text: str) -> None:
    try:
        totals = parse_psi(text)
    except PsiParseError:
        return
    assert totals.some >= 0 and (totals.full is None or totals.full >= 0)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_parse_meminfo_head_raises_only_value_errors(data: bytes) -> None:
    try:
        head = parse_meminfo_head(data)
    except ValueError:
        return
    assert head is None or len(head) == 2


@settings(
    derandomize=True,
    max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,  # file I/O on a loaded machine
)
@given(stat=st.binary(max_size=120), meminfo=st.binary(max_size=120), psi=st.binary(max_size=120))
def test_proc_source_never_raises_on_arbitrary_files(
    tmp_path: Path, stat: bytes, meminfo: bytes, psi: bytes
) -> None:
    root = tmp_path / "proc"
    (root / "pressure").mkdir(parents=True, exist_ok=True)
    (root / "stat").write_bytes(b"cpu  1 0 1 10 0 0 0 0 0 0\n")
    (root / "meminfo").write_bytes(b"MemTotal: 100 kB\nMemFree: 1 kB\nMemAvailable: 50 kB\n")
    (root / "pressure" / "cpu").write_bytes(REAL.encode())
    src = ProcSource(str(root), ("cpu", "memory", "cpu_pressure"), reader=read_bytes)
    src.read(0.0)
    (root / "stat").write_bytes(stat)
    (root / "meminfo").write_bytes(meminfo)
    (root / "pressure" / "cpu").write_bytes(psi)
    s = src.read(0.1)
    assert len(s.features) == 3
    assert all(math.isnan(v) or 0.0 <= v <= 1.0 for v in s.features)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.binary(max_size=60), st.binary(max_size=60), st.binary(max_size=120))
def test_cgroup_parsers_raise_only_value_errors(cpu: bytes, memory: bytes, stat: bytes) -> None:
    for parse in (usage_v1, usage_v2):
        try:
            usage = parse(cpu, memory, stat)
        except ValueError:
            continue
        assert usage.cpu_seconds >= 0 and usage.memory_bytes >= 0


# Found by the fuzz tier: a number of hundreds of digits passed the digit checks and then
# overflowed a float (OverflowError, which no reader caught), so ProcSource.read and
# CgroupUsageReader.read raised. A kernel counter has at most 20 digits.
HUGE = b"1" * 400


def test_a_counter_of_hundreds_of_digits_is_malformed_not_an_overflow(tmp_path: Path) -> None:
    with pytest.raises(PsiParseError):
        parse_psi(f"some avg10=0 avg60=0 avg300=0 total={HUGE.decode()}\n")
    with pytest.raises(ValueError, match="bad meminfo value"):
        parse_meminfo_head(b"MemTotal: " + HUGE + b" kB\nMemAvailable: 1 kB\n")
    with pytest.raises(ValueError, match="not a counter"):
        usage_v2(b"usage_usec 1\n", HUGE + b"\n", b"inactive_file 0\n")
    with pytest.raises(ValueError, match="not a counter"):
        usage_v2(b"usage_usec " + HUGE + b"\n", b"1\n", b"inactive_file 0\n")
    root = tmp_path / "proc"
    (root / "pressure").mkdir(parents=True)
    (root / "stat").write_bytes(b"cpu  1 0 1 10 0 0 0 0 0 0\n")
    (root / "meminfo").write_bytes(b"MemTotal: " + HUGE + b" kB\nMemAvailable: 50 kB\n")
    (root / "pressure" / "cpu").write_bytes(REAL.encode())
    sample = ProcSource(str(root), ("cpu", "memory"), reader=read_bytes).read(0.0)
    assert sample.missing and math.isnan(sample.features[1])
    assert any(p.startswith("meminfo:") for p in sample.problems)
