"""The fake procfs and cgroup trees read, through the agent's own ProcSource and cgroup reader, as
the contention model says."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import pytest
from fake_procfs import GI, FakeProcfs, PodLoadModel

from agent.cgroup_usage import CgroupUsageReader
from agent.proc_source import ProcSource
from carico_app.simulate.cluster import Cluster
from carico_app.simulate.params import BPI_2000, ModelParams


def _sample(source: ProcSource) -> tuple[float, ...]:
    """One sample over a 100 ms+ interval in which the writer has written.

    A NaN feature means the counters did not move since the last read: on a loaded machine the
    writer thread (50 writes/s) can miss a whole interval. That is no answer, not a wrong one, so
    read again (a liveness bound, not a timing)."""
    deadline = time.monotonic() + 30
    while True:
        time.sleep(0.1)
        sample = source.read(time.monotonic())
        assert not sample.missing, sample.problems
        got = tuple(float(v) for v in sample.features)
        if not any(math.isnan(v) for v in got):
            return got
        assert time.monotonic() < deadline, f"the counters never moved: {got}"


def _reaches(source: ProcSource, want: tuple[float, ...], abs_tol: float) -> tuple[float, ...]:
    """Sample until the features match ``want`` (the writer may lag on a loaded machine: a
    liveness bound, not a timing), then once more: the value must stay."""
    deadline = time.monotonic() + 30
    got = _sample(source)
    while got != pytest.approx(want, abs=abs_tol):
        assert time.monotonic() < deadline, f"features {got}, model {want}"
        got = _sample(source)
    return _sample(source)


UIDS = [f"0000000{i}-5b6d-4c7e-8f9a-0b1c2d3e4f5a" for i in range(3)]


def test_agent_reads_the_modelled_load(tmp_path: Path) -> None:
    running: dict[str, list[str]] = {"n": []}
    procfs = FakeProcfs(tmp_path, ["n"], lambda: dict(running))
    procfs.start()
    try:
        source = ProcSource(str(procfs.proc_root("n")), ("cpu", "memory", "cpu_pressure"))
        source.read(time.monotonic())  # the first sample has no interval yet
        model = procfs.model
        for pods in (0, 3):
            running["n"] = UIDS[:pods]
            # Below saturation the counters give the model's value up to 1 µs rounding, and no
            # CPU pressure.
            got = _reaches(source, (*model.features(pods), 0.0), 1e-4)
            assert got == pytest.approx((*model.features(pods), 0.0), abs=1e-4)
        # 6 background threads + 1 + 2·3 = 13 runnable threads on 8 cores: saturated, PSI some
        # = 5/8. The PSI total is up to one write (20 ms) older than the 100 ms+ interval read,
        # and the writer may lag more on a loaded machine: a loose bound, not the exact value.
        procfs.set_background("n", threads=6)
        got = _reaches(source, (13 / 16, model.features(3)[1], 5 / 8), 0.25)
        assert got[2] == pytest.approx(5 / 8, abs=0.25)
        assert procfs.errors == []
    finally:
        procfs.stop()


def test_the_pods_cgroups_show_each_pods_share(tmp_path: Path) -> None:
    """Each running pod has a cgroup whose CPU time grows at its fair share of the busy cores and
    whose working set is the pod's memory; a pod that stops takes its cgroup along."""
    running: dict[str, list[str]] = {"n": UIDS[:2]}
    procfs = FakeProcfs(tmp_path, ["n"], lambda: dict(running))
    procfs.start()
    try:
        reader = CgroupUsageReader(str(procfs.cgroup_root("n")))
        model = procfs.model

        def rates(pods: int) -> dict[str, float]:
            """Cores per pod over ~1 s of the writer's counters (a loose liveness-bounded read:
            the writer may lag a loaded machine by tens of ms)."""
            first, t0 = reader.read(0.0), time.monotonic()
            assert first is not None and set(first) == set(UIDS[:pods])
            assert all(u.memory_bytes == model.pod_memory for u in first.values())
            time.sleep(1.0)
            second, t1 = reader.read(1.0), time.monotonic()
            assert second is not None
            return {
                uid: (second[uid].cpu_seconds - first[uid].cpu_seconds) / (t1 - t0) for uid in first
            }

        time.sleep(0.1)  # the pods' first counters
        # 1 + 2·2 threads on 8 cores: each pod gets its 2 cores. The writer writes every 20 ms
        # and may lag on a loaded machine: 10 % over 1 s is a loose bound, not the exact share.
        assert rates(2) == pytest.approx({u: 2.0 for u in UIDS[:2]}, rel=0.1)
        # 6 background threads + 1 + 2·2 = 11 threads on 8 cores: 8/11 of each thread's demand.
        procfs.set_background("n", threads=6)
        time.sleep(0.1)
        assert rates(2) == pytest.approx({u: 2 * 8 / 11 for u in UIDS[:2]}, rel=0.1)
        running["n"] = UIDS[:1]
        time.sleep(0.2)
        assert set(reader.read(2.0) or {}) == {UIDS[0]}
        assert not (procfs.cgroup_root("n") / "kubepods" / "besteffort" / f"pod{UIDS[1]}").exists()
        assert procfs.errors == []
    finally:
        procfs.stop()


def test_room_is_left_in_pods() -> None:
    model = PodLoadModel()
    # The legacy avail at the agents' full level: k = (0.85 − 1/16)/(1/16), p = 2.
    assert model.expected_avail(0) == pytest.approx(6.3)
    assert model.expected_avail(3) == pytest.approx(3.3)
    # The room per class: (0.85 − y_cpu) / (2/16), cpu-bound on an idle node.
    assert model.expected_room(0) == pytest.approx(6.3)
    assert model.expected_room(3) == pytest.approx(3.3)
    full = PodLoadModel(background_memory=model.background_memory_full())
    assert full.background_memory == 31 * GI and full.expected_room(0) == 0.0
    for pods, room in ((0, 4.0), (0, 1.0), (1, 2.0)):
        some = PodLoadModel(background_memory=model.background_memory_for(room, pods))
        assert some.expected_room(pods) == pytest.approx(room)


def test_the_simulator_can_drive_the_files(tmp_path: Path) -> None:
    """``telemetry=``: the simulator's own node model in place of PodLoadModel."""
    params = dataclasses.replace(ModelParams(), noise_util=0.0, noise_psi=0.0, noise_mem=0.0)
    cluster = Cluster(params, 1, np.random.default_rng(0))
    for _ in range(2):
        cluster.bind(cluster.add_pod(BPI_2000), 0, startup=0.0)
    cluster.step()
    sim = cluster.telemetry(0)
    assert sim.util > 0  # two pods run: the node is busy
    procfs = FakeProcfs(tmp_path, ["n"], dict, telemetry=lambda node, pods, now: sim)
    procfs.start()
    try:
        source = ProcSource(str(procfs.proc_root("n")), ("cpu", "memory"))
        source.read(time.monotonic())
        want = ((sim.util + sim.psi_cpu_some) / 2, sim.mem_used)
        assert _reaches(source, want, 1e-4) == pytest.approx(want, abs=1e-4)
    finally:
        procfs.stop()
