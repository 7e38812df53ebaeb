"""Per-pod usage from fixture cgroup trees: both cgroup versions and drivers, broken pods."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.cgroup_usage import (
    CgroupUsageReader,
    find_layout,
    list_pods,
    pod_uid,
    stat_value,
    usage_v1,
    usage_v2,
)
from agent.files import read_bytes
from agent.telemetry import PodUsage

from .conftest import FakeCgroups

UIDS = (
    "3f1c2a4e-5b6d-4c7e-8f9a-0b1c2d3e4f5a",
    "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d",
    "11111111-2222-3333-4444-555555555555",
)
GI = 2**30


def test_uids_come_back_from_both_drivers_directory_names() -> None:
    uid = UIDS[0]
    escaped = uid.replace("-", "_")
    assert pod_uid(f"pod{uid}") == uid
    assert pod_uid(f"kubepods-burstable-pod{escaped}.slice") == uid
    assert pod_uid(f"kubepods-besteffort-pod{escaped}.slice") == uid
    assert pod_uid(f"kubepods-pod{escaped}.slice") == uid  # Guaranteed, systemd
    # A static pod's uid is its manifest's hash: 32 hex digits.
    assert pod_uid("pod6a3b9c1d2e4f5a6b7c8d9e0f1a2b3c4d") == "6a3b9c1d2e4f5a6b7c8d9e0f1a2b3c4d"
    for other in (
        "burstable",
        "kubepods-burstable.slice",
        "cri-containerd-0123456789abcdef.scope",
        "memory.stat",
        "pod",
        "podzz111111-2222",
        f"pod{escaped}",  # '_' belongs to the systemd driver's names only
        f"xpod{uid}",
    ):
        assert pod_uid(other) is None, other


def test_parsers_take_the_kernels_units_and_the_working_set() -> None:
    stat_v1 = (
        b"cache 10768384\nrss 8626176\ninactive_file 131072\nactive_file 1568768\n"
        b"total_cache 3953635328\ntotal_inactive_file 1563340800\ntotal_active_file 2381103104\n"
    )
    assert stat_value(stat_v1, b"inactive_file") == 131072
    assert stat_value(stat_v1, b"total_inactive_file") == 1563340800
    got = usage_v1(b"6090234165194\n", b"4855717888\n", stat_v1)
    assert got == PodUsage(6090.234165194, 4855717888 - 1563340800)
    stat_v2 = b"anon 1000\nfile 9000\ninactive_file 4000\nactive_file 5000\n"
    got = usage_v2(
        b"usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n", b"9000\n", stat_v2
    )
    assert got == PodUsage(1.5, 5000.0)
    # More inactive cache than usage (the counters are read one after the other): not below 0.
    assert usage_v2(b"usage_usec 1\n", b"100\n", b"inactive_file 300\n").memory_bytes == 0.0


@pytest.mark.parametrize(
    "files",
    [
        (b"", b"1\n", b"inactive_file 0\n"),
        (b"usage_usec -5\n", b"1\n", b"inactive_file 0\n"),
        (b"user_usec 5\n", b"1\n", b"inactive_file 0\n"),  # no usage_usec
        (b"usage_usec 5\n", b"max\n", b"inactive_file 0\n"),
        (b"usage_usec 5\n", b"1\n", b"active_file 3\n"),  # no inactive_file
        (b"usage_usec 5\n", b"1\n", b"inactive_file\n"),  # cut short
        (b"usage_usec 5\n", b"1\n", b"xinactive_file 3\n"),
    ],
)
def test_malformed_v2_files_raise_value_error(files: tuple[bytes, bytes, bytes]) -> None:
    with pytest.raises(ValueError):
        usage_v2(*files)


def test_malformed_v1_files_raise_value_error() -> None:
    good_stat = b"total_inactive_file 0\n"
    for files in (
        (b"12.5\n", b"1\n", good_stat),
        (b"12\n", b"\n", good_stat),
        (b"12\n", b"1\n", b"inactive_file 4\n"),  # the pod's own figure, not the hierarchy's
    ):
        with pytest.raises(ValueError):
            usage_v1(*files)


@pytest.mark.parametrize(
    ("version", "driver"), [(1, "cgroupfs"), (1, "systemd"), (2, "cgroupfs"), (2, "systemd")]
)
def test_the_reader_finds_every_pod_of_every_qos_class(
    tmp_path: Path, version: int, driver: str
) -> None:
    tree = FakeCgroups(tmp_path, version, driver)
    tree.add_pod(UIDS[0], "guaranteed", cpu_seconds=12.5, memory=2 * GI, inactive=GI // 2)
    tree.add_pod(UIDS[1], "burstable", cpu_seconds=0.25, memory=GI, inactive=0)
    tree.add_pod(UIDS[2], "besteffort", cpu_seconds=3.0, memory=GI // 4, inactive=GI)
    layout = find_layout(str(tmp_path))
    assert layout is not None and layout.version == version
    assert set(list_pods(layout.cpu_top)) == set(UIDS)
    reader = CgroupUsageReader(str(tmp_path))
    usage = reader.read(0.0)
    assert usage == {
        UIDS[0]: PodUsage(12.5, 1.5 * GI),
        UIDS[1]: PodUsage(0.25, float(GI)),
        UIDS[2]: PodUsage(3.0, 0.0),
    }
    assert reader.skipped == 0 and reader.pods == 3
    # The files stay open between readings and still show the new counters.
    tree.set_usage(UIDS[1], cpu_seconds=0.75, memory=GI, inactive=GI // 4)
    usage = reader.read(0.5)
    assert usage is not None and usage[UIDS[1]] == PodUsage(0.75, 0.75 * GI)
    assert reader.open_files == 9
    # A pod that is gone is forgotten, its descriptors closed.
    tree.remove_pod(UIDS[2])
    usage = reader.read(1.0)
    assert usage is not None and set(usage) == {UIDS[0], UIDS[1]}
    assert reader.open_files == 6 and reader.skipped == 0


@pytest.mark.parametrize("version", [1, 2])
def test_broken_pods_are_skipped_and_counted_never_raised(tmp_path: Path, version: int) -> None:
    tree = FakeCgroups(tmp_path, version, "systemd")
    for uid in UIDS:
        tree.add_pod(uid, "burstable", cpu_seconds=1.0, memory=GI, inactive=0)
    cpu_file = "cpuacct.usage" if version == 1 else "cpu.stat"
    tree.write(UIDS[0], cpu_file, b"garbage\n")  # malformed
    os.remove(tree.pod_dir(UIDS[1], "memory") / "memory.stat")  # missing
    reader = CgroupUsageReader(str(tmp_path), reader=read_bytes)
    usage = reader.read(0.0)
    assert usage == {UIDS[2]: PodUsage(1.0, float(GI))}
    assert reader.skipped == 2
    # Repaired, the pods are read again.
    tree.set_usage(UIDS[0], cpu_seconds=2.0, memory=GI, inactive=0)
    usage = reader.read(0.5)
    assert usage is not None and usage[UIDS[0]] == PodUsage(2.0, float(GI))
    assert UIDS[1] not in usage and reader.skipped == 3


def test_an_unreadable_file_is_skipped_with_kept_open_descriptors(tmp_path: Path) -> None:
    tree = FakeCgroups(tmp_path, 2, "cgroupfs")
    tree.add_pod(UIDS[0], "burstable", cpu_seconds=1.0, memory=GI, inactive=0)
    tree.add_pod(UIDS[1], "burstable", cpu_seconds=1.0, memory=GI, inactive=0)
    (tree.pod_dir(UIDS[0], "memory") / "memory.current").unlink()
    (tree.pod_dir(UIDS[0], "memory") / "memory.current").mkdir()  # read() fails: EISDIR
    reader = CgroupUsageReader(str(tmp_path))
    usage = reader.read(0.0)
    assert usage is not None and set(usage) == {UIDS[1]} and reader.skipped == 1


def test_without_a_kubepods_tree_nothing_is_read_and_it_is_looked_for_again(
    tmp_path: Path,
) -> None:
    reader = CgroupUsageReader(str(tmp_path))
    assert reader.read(0.0) is None and reader.layout is None
    tree = FakeCgroups(tmp_path, 2, "systemd")
    tree.add_pod(UIDS[0], "besteffort", cpu_seconds=1.0, memory=GI, inactive=0)
    assert reader.read(1.0) is None  # not looked for again yet
    usage = reader.read(10.0)  # LOCATE_EVERY later
    assert usage == {UIDS[0]: PodUsage(1.0, float(GI))}


def test_a_tree_that_goes_away_pauses_the_reading(tmp_path: Path) -> None:
    tree = FakeCgroups(tmp_path, 2, "cgroupfs")
    tree.add_pod(UIDS[0], "burstable", cpu_seconds=1.0, memory=GI, inactive=0)
    reader = CgroupUsageReader(str(tmp_path))
    assert reader.read(0.0) is not None
    tree.remove_all()
    assert reader.read(0.5) is None and reader.open_files == 0
