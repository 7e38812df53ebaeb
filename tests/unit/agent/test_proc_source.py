"""ProcSource on a fake procfs: exact features, PSI fallbacks, malformed files never raise."""

from __future__ import annotations

import errno
import logging
import math
import os
from pathlib import Path

import psutil
import pytest

from agent.proc_source import PSI_GIVE_UP, ProcSource, procfs_root, read_bytes
from agent.telemetry import PodUsage, parse_cpu_line

from .conftest import FIXTURES, FakeCgroups, FakeProc


def test_features_follow_the_design_formulas(fake_proc: FakeProc) -> None:
    src = ProcSource(str(fake_proc.root))
    first = src.read(100.0)
    assert math.isnan(first.features[0]) and not first.missing  # no interval yet: warm-up
    assert first.features[1] == pytest.approx(0.25)  # 1 - 6 GB / 8 GB
    # 100 ms later: busy +150 ticks of 200, cpu PSI +25 ms of 100 ms.
    fake_proc.set_cpu(1100, 0, 550, 8050)
    fake_proc.set_psi("cpu", 25_000)
    fake_proc.set_memory(8_000_000, 2_000_000)
    s = src.read(100.1)
    assert s.psi_available and not s.missing
    assert s.features[0] == pytest.approx((0.75 + 0.25) / 2)
    assert s.features[1] == pytest.approx(0.75)


def test_guest_time_inside_user_is_not_added_again(fake_proc: FakeProc) -> None:
    fake_proc.set_cpu(1000, 0, 0, 1000, guest=0)
    src = ProcSource(str(fake_proc.root), ("cpu",))
    src.read(0.0)
    # All 100 user ticks were guest ticks: 100 busy of 200, not 200 of 300.
    fake_proc.set_cpu(1100, 0, 0, 1100, guest=100)
    fake_proc.set_psi("cpu", 0)
    assert src.read(0.1).features[0] == pytest.approx(0.5 / 2)


def test_psi_absent_falls_back_to_utilisation_and_logs_once(
    fake_proc: FakeProc, caplog: pytest.LogCaptureFixture
) -> None:
    for resource in ("cpu", "memory", "io"):
        os.remove(fake_proc.root / "pressure" / resource)
    src = ProcSource(str(fake_proc.root), ("cpu", "memory", "io_pressure"))
    with caplog.at_level(logging.WARNING, logger="agent.proc_source"):
        src.read(0.0)
        fake_proc.set_cpu(1100, 0, 550, 8050)
        s = src.read(0.1)
        src.read(0.2)
    assert not s.psi_available and not s.missing
    assert s.features[0] == pytest.approx(0.75)  # utilisation alone
    assert s.features[2] == 0.0  # no PSI: no evidence of io stall
    assert sum("pressure stall information unusable" in r.message for r in caplog.records) == 1


def test_psi_disabled_eopnotsupp_falls_back(fake_proc: FakeProc) -> None:
    def reader(path: str) -> bytes:
        if "/pressure/" in path:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP), path)
        return read_bytes(path)

    src = ProcSource(str(fake_proc.root), reader=reader)
    src.read(0.0)
    fake_proc.set_cpu(1050, 0, 500, 8050)
    s = src.read(0.1)
    assert not s.psi_available and not s.missing
    assert s.features[0] == pytest.approx(0.5)


@pytest.mark.parametrize("broken", ["garbage\n", "", "some avg10=0.00 avg60=0.00 avg3"])
def test_malformed_psi_marks_the_sample_missing(fake_proc: FakeProc, broken: str) -> None:
    src = ProcSource(str(fake_proc.root))
    src.read(0.0)
    fake_proc.write("pressure/cpu", broken)
    fake_proc.set_cpu(1100, 0, 550, 8050)
    s = src.read(0.1)
    assert s.missing and s.psi_available and math.isnan(s.features[0])
    assert s.features[1] == pytest.approx(0.25)  # memory still read
    # The next good file recovers, with the pressure delta taken over the longer interval.
    fake_proc.set_psi("cpu", 20_000)
    fake_proc.set_cpu(1200, 0, 600, 8100)
    good = src.read(0.2)
    assert not good.missing
    assert good.features[0] == pytest.approx((150 / 200 + 20_000 / 200_000) / 2)


def test_psi_that_stays_broken_is_given_up(fake_proc: FakeProc) -> None:
    src = ProcSource(str(fake_proc.root))
    src.read(0.0)
    fake_proc.write("pressure/cpu", "some format from the future\n")
    samples = [src.read(0.1 * i) for i in range(1, PSI_GIVE_UP + 1)]
    assert all(s.missing and s.psi_available for s in samples[:-1])
    fake_proc.set_cpu(1100, 0, 550, 8050)
    last = src.read(0.1 * (PSI_GIVE_UP + 1))
    assert not last.psi_available and not last.missing
    assert last.features[0] == pytest.approx(0.75)  # utilisation alone


def test_forbidden_psi_falls_back(fake_proc: FakeProc) -> None:
    def reader(path: str) -> bytes:
        if "/pressure/" in path:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return read_bytes(path)

    src = ProcSource(str(fake_proc.root), reader=reader)
    assert not src.read(0.0).psi_available


def test_cpu_file_without_full_line_is_fine(fake_proc: FakeProc) -> None:
    fake_proc.set_psi("cpu", 0, full_us=None)
    src = ProcSource(str(fake_proc.root))
    src.read(0.0)
    fake_proc.set_psi("cpu", 10_000, full_us=None)
    fake_proc.set_cpu(1100, 0, 500, 8100)
    s = src.read(0.1)
    assert not s.missing and s.features[0] == pytest.approx((0.5 + 0.1) / 2)


@pytest.mark.parametrize(
    "stat",
    ["", "cpu  12 x 3\n", "cpu  1 2\n", "intr 5\n"],
    ids=["empty", "garbage", "short", "no-cpu"],
)
def test_malformed_stat_marks_missing_without_raising(fake_proc: FakeProc, stat: str) -> None:
    src = ProcSource(str(fake_proc.root))
    src.read(0.0)
    fake_proc.write("stat", stat)
    s = src.read(0.1)
    assert s.missing and math.isnan(s.features[0])


def test_missing_and_malformed_meminfo(fake_proc: FakeProc) -> None:
    # The simple reader: this test deletes the file, which procfs never does under an open fd.
    src = ProcSource(str(fake_proc.root), ("memory",), reader=read_bytes)
    fake_proc.write("meminfo", "MemFree: 12 kB\n")  # no MemTotal
    s = src.read(0.0)
    assert s.missing and math.isnan(s.features[0])
    os.remove(fake_proc.root / "meminfo")
    s = src.read(0.1)
    assert s.missing and math.isnan(s.features[0])
    fake_proc.set_memory(1000, 250)
    assert src.read(0.2).features[0] == pytest.approx(0.75)


def test_meminfo_without_memavailable_uses_psutils_estimate(fake_proc: FakeProc) -> None:
    # A pre-3.14 kernel: no MemAvailable line, and no /proc/zoneinfo in this fake root, so psutil
    # estimates available memory as MemFree + Cached.
    fake_proc.write(
        "meminfo",
        "MemTotal: 1000 kB\nMemFree: 200 kB\nBuffers: 0 kB\nCached: 300 kB\n"
        "Active: 100 kB\nInactive: 100 kB\nShmem: 0 kB\nSlab: 0 kB\n",
    )
    s = ProcSource(str(fake_proc.root), ("memory",)).read(0.0)
    assert not s.missing
    assert s.features[0] == pytest.approx(1 - 500 / 1000)


def test_kept_open_descriptors_see_fresh_content(fake_proc: FakeProc) -> None:
    src = ProcSource(str(fake_proc.root), ("memory",))
    assert src.read(0.0).features[0] == pytest.approx(0.25)
    fake_proc.set_memory(8_000_000, 4_000_000)  # rewritten in place, like procfs regenerates it
    assert src.read(0.1).features[0] == pytest.approx(0.5)


def test_procfs_root_is_restored_for_other_psutil_users(fake_proc: FakeProc) -> None:
    before = psutil.PROCFS_PATH
    with procfs_root(str(fake_proc.root)):
        assert str(fake_proc.root) == psutil.PROCFS_PATH
    assert before == psutil.PROCFS_PATH
    ProcSource(str(fake_proc.root)).read(0.0)
    assert before == psutil.PROCFS_PATH


def test_the_real_proc_gives_features_in_range() -> None:
    src = ProcSource("/proc", ("cpu", "memory", "cpu_pressure", "memory_pressure", "io_pressure"))
    src.read(0.0)
    s = src.read(0.5)  # a nominal interval; the fractions are clipped to [0, 1] anyway
    assert len(s.features) == 5
    # cpu may be NaN: two immediate reads can fall within one USER_HZ tick.
    assert all(math.isnan(v) or 0.0 <= v <= 1.0 for v in s.features)
    assert 0.0 < s.features[1] < 1.0  # a running machine uses some memory, not all of it


def test_stat_parser_agrees_with_psutil(fake_proc: FakeProc) -> None:
    fake_proc.set_cpu(123, 4, 56, 7890, iowait=12, irq=3, softirq=9, steal=2, guest=50)
    ours = parse_cpu_line((fake_proc.root / "stat").read_bytes())
    with procfs_root(str(fake_proc.root)):
        theirs = psutil.cpu_times()  # seconds: ticks / USER_HZ
    hz = os.sysconf("SC_CLK_TCK")
    for name in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"):
        assert getattr(ours, name) == pytest.approx(getattr(theirs, name) * hz), name
    real = parse_cpu_line((FIXTURES / "stat_head").read_bytes())
    assert real.user == 101216 and real.steal == 400


def test_cpu_utilisation_and_pressure_come_with_every_sample(fake_proc: FakeProc) -> None:
    src = ProcSource(str(fake_proc.root))
    first = src.read(0.0)
    assert math.isnan(first.cpu_util) and math.isnan(first.psi_cpu)
    fake_proc.set_cpu(1100, 0, 550, 8050)
    fake_proc.set_psi("cpu", 25_000)
    s = src.read(0.1)
    assert (s.cpu_util, s.psi_cpu) == (pytest.approx(0.75), pytest.approx(0.25))
    # No kubepods tree (no cgroup root at all): no node size and no pods' usage, as before.
    assert math.isnan(s.cores) and math.isnan(s.memory_bytes) and s.pod_usage is None


def test_with_a_kubepods_tree_the_node_size_and_the_pods_usage_are_read(
    fake_proc: FakeProc, tmp_path: Path
) -> None:
    uid = "3f1c2a4e-5b6d-4c7e-8f9a-0b1c2d3e4f5a"
    tree = FakeCgroups(tmp_path / "cgroup", 2, "systemd")
    tree.add_pod(uid, "burstable", cpu_seconds=1.0, memory=2**30, inactive=0)
    fake_proc.cores = 4
    fake_proc.set_cpu(1000, 0, 500, 8000)
    src = ProcSource(str(fake_proc.root), cgroup_root=str(tmp_path / "cgroup"))
    # Ten ticks a second, each a little early or late: the pods are read every 0.5 s.
    times = [0.1 * i + (0.004 if i % 2 else -0.003) for i in range(21)]
    samples = [src.read(t) for t in times]
    read_at = [round(t, 1) for t, s in zip(times, samples, strict=True) if s.pod_usage is not None]
    assert read_at == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert samples[0].pod_usage == {uid: PodUsage(1.0, float(2**30))}
    assert all(s.cores == 4.0 and s.memory_bytes == 8_000_000 * 1024 for s in samples)
    # Without the memory feature, MemTotal is still read for the node's size.
    cpu_only = ProcSource(str(fake_proc.root), ("cpu",), cgroup_root=str(tmp_path / "cgroup"))
    assert cpu_only.read(0.0).memory_bytes == 8_000_000 * 1024
    # An interval of 0 turns the reading off.
    off = ProcSource(
        str(fake_proc.root), cgroup_root=str(tmp_path / "cgroup"), pod_usage_interval=0
    )
    assert off.read(0.0).pod_usage is None and math.isnan(off.read(0.1).cores)


def test_cores_fall_back_to_psutil_when_stat_lists_no_cpu(
    fake_proc: FakeProc, tmp_path: Path
) -> None:
    FakeCgroups(tmp_path / "cgroup", 1, "cgroupfs").add_pod(
        "3f1c2a4e-5b6d-4c7e-8f9a-0b1c2d3e4f5a", "besteffort", 0.0, 0, 0
    )
    fake_proc.cores = 0
    fake_proc.set_cpu(1000, 0, 500, 8000)
    src = ProcSource(str(fake_proc.root), cgroup_root=str(tmp_path / "cgroup"))
    assert src.read(0.0).cores == psutil.cpu_count()
