"""The node model: fair share, pressure, utilisation, start-up, bursts, OOM, telemetry."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from carico_app.simulate.cluster import EXITED, PENDING, RUNNING, STARTING, SUCCEEDED
from carico_app.simulate.params import GI, MI, ModelParams, Workload


def cpu_pod(work: float = 10.0, threads: float = 1.0, memory: float = 10 * MI) -> Workload:
    return Workload("w", cpu_work=work, threads=threads, memory=memory)


def start_now(cluster, pods, node=0):  # type: ignore[no-untyped-def]
    for p in pods:
        cluster.bind(p, node, startup=0.0)


def test_fair_share_below_and_above_core_count(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet)
    pods = [c.add_pod(cpu_pod(work=100.0)) for _ in range(8)]
    start_now(c, pods)
    c.step()
    # 8 single-threaded pods on 4 cores: each runs at half a core for one 0.1 s step.
    assert c.share[0] == pytest.approx(0.5)
    assert c.work_left[pods] == pytest.approx(np.full(8, 100.0 - 0.05))
    assert c.util[0] == pytest.approx(1.0)


def test_multithreaded_pod_progress_is_capped_by_threads(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet)
    wide = c.add_pod(cpu_pod(work=100.0, threads=4))
    narrow = c.add_pod(cpu_pod(work=100.0, threads=1))
    start_now(c, [wide, narrow])
    c.step()
    # 5 runnable threads on 4 cores: share 0.8 per thread; the 4-thread pod gets 3.2 cores.
    assert c.work_left[wide] == pytest.approx(100.0 - 3.2 * 0.1)
    assert c.work_left[narrow] == pytest.approx(100.0 - 0.8 * 0.1)


@pytest.mark.parametrize(
    ("threads", "util", "psi"),
    [
        (0, 0.0, 0.0),
        (2, 0.5, 0.0),  # half the cores busy, nobody waits
        (4, 1.0, 0.0),  # saturated but no thread waits: PSI some stays 0
        (5, 1.0, 0.25),  # one thread delayed over min(5, 4) = 4 non-idle: 1/4
        (6, 1.0, 0.5),
        (8, 1.0, 1.0),  # at least one waiting per CPU: capped at 1
        (20, 1.0, 1.0),
    ],
)
def test_utilisation_and_psi_some(quiet: ModelParams, make_cluster, threads, util, psi) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet)
    start_now(c, [c.add_pod(cpu_pod(work=100.0)) for _ in range(threads)])
    c.step()
    assert c.util[0] == pytest.approx(util)
    assert c.psi_cpu[0] == pytest.approx(psi)
    t = c.telemetry(0)
    assert (t.util, t.psi_cpu_some, t.pods_running) == (
        pytest.approx(util),
        pytest.approx(psi),
        threads,
    )


def test_pod_finishes_at_interpolated_time_and_is_reported_later(
    quiet: ModelParams, make_cluster
) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet)
    p = c.add_pod(cpu_pod(work=0.25))
    start_now(c, [p])
    phases = []
    for _ in range(30):
        c.step()
        phases.append(int(c.phase[p]))
    # Alone it runs at one core: exits at 0.25 s exactly, inside the third step.
    assert c.exited_at[p] == pytest.approx(0.25)
    assert RUNNING in phases and phases[-1] == SUCCEEDED
    # The kubelet reports within one PLEG period (status_delay_max = 1 s).
    assert 0.25 <= c.succeeded_at[p] <= 0.25 + quiet.status_delay_max


def test_contention_overhead_slows_oversubscribed_nodes(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    params = dataclasses.replace(quiet, contention_overhead=0.1)
    c = make_cluster(params)
    pods = [c.add_pod(cpu_pod(work=100.0)) for _ in range(8)]
    start_now(c, pods)
    c.step()
    # 2 processes per core: one extra per core costs 10 %: rate 0.5 / 1.1 per pod.
    assert c.work_left[pods[0]] == pytest.approx(100.0 - 0.1 * 0.5 / 1.1)


def test_startup_latency_is_within_bounds_and_seeded(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    def delays(seed: int) -> np.ndarray:
        c = make_cluster(quiet, seed=seed)
        pods = [c.add_pod(cpu_pod()) for _ in range(200)]
        for p in pods:
            c.bind(p, 0)
        assert all(c.phase[p] == STARTING for p in pods)
        return c.start_at[pods] - c.bound_at[pods]

    a, b, other = delays(1), delays(1), delays(2)
    assert a.min() >= quiet.startup_min and a.max() <= quiet.startup_max
    # 200 uniform draws on [1, 4] cover most of the range (P(miss a 0.5 s end) ~ 1e-15).
    assert a.min() < 1.5 and a.max() > 3.5
    assert np.array_equal(a, b)
    assert not np.array_equal(a, other)


def test_container_starts_only_after_its_startup_latency(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet)
    p = c.add_pod(cpu_pod(work=100.0))
    c.bind(p, 0, startup=1.0)
    for _ in range(10):
        c.step()
        assert c.phase[p] == STARTING
        assert c.util[0] == 0.0
    c.step()
    assert c.phase[p] == RUNNING
    assert c.running_at[p] == pytest.approx(1.0)


def test_bursts_at_create_and_delete_last_their_duration(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    params = dataclasses.replace(quiet, burst_cores=2.0, burst_seconds=0.2)
    c = make_cluster(params)
    p = c.add_pod(cpu_pod(work=0.5))
    start_now(c, [p])
    utils = []
    for _ in range(12):
        c.step()
        utils.append(float(c.util[0]))
    # Step 0 the container starts (1 core); the 2-core create burst shows in steps 1 and 2.
    assert utils[0] == pytest.approx(0.25)
    assert utils[1] == pytest.approx(0.75) and utils[2] == pytest.approx(0.75)
    assert utils[3] == pytest.approx(0.25)
    # It exits during step 4 (0.5 s of work at one core): the delete burst follows for 0.2 s.
    assert c.phase[p] in (EXITED, SUCCEEDED)
    assert utils[5] == pytest.approx(0.5) and utils[6] == pytest.approx(0.5)
    assert utils[7] == pytest.approx(0.0)


def test_oom_kills_the_largest_pod_which_restarts_from_scratch(
    quiet: ModelParams, make_cluster
) -> None:  # type: ignore[no-untyped-def]
    node = dataclasses.replace(quiet.node, memory=2 * GI)
    params = dataclasses.replace(quiet, node=node)
    c = make_cluster(params)
    small = c.add_pod(cpu_pod(work=100.0, memory=600 * MI))
    big = c.add_pod(cpu_pod(work=100.0, memory=900 * MI))
    start_now(c, [small, big])
    c.step()
    assert c.oom_kills == 0
    late = c.add_pod(cpu_pod(work=100.0, memory=700 * MI))
    start_now(c, [late])
    for _ in range(5):
        c.step()
    # 2200 MiB > 2048 MiB: the kernel picks the highest oom_score, the 900 MiB pod.
    assert c.oom_kills == 1
    assert c.restarts[big] == 1 and c.restarts[small] == 0 and c.restarts[late] == 0
    assert c.phase[big] == STARTING
    assert c.work_left[big] == pytest.approx(100.0)  # its work is lost
    assert c.start_at[big] == pytest.approx(0.2 + params.restart_backoff)
    assert c.mem_used[0] == pytest.approx(1300 / 2048)


def test_oom_restart_back_off_doubles(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    node = dataclasses.replace(quiet.node, memory=1 * GI)
    params = dataclasses.replace(quiet, node=node, restart_backoff=1.0)
    c = make_cluster(params)
    hog = c.add_pod(cpu_pod(work=100.0, memory=2 * GI))
    start_now(c, [hog])
    kills = []
    for _ in range(80):
        c.step()
        if c.restarts[hog] > len(kills):
            kills.append(c.now)
    # Killed at once, then after 1 s, 2 s, 4 s of back-off (plus the step it ran in).
    gaps = np.diff(kills)
    assert len(kills) >= 4
    assert gaps[:3] == pytest.approx([1.1, 2.1, 4.1], abs=1e-6)


def test_telemetry_noise_has_the_configured_spread(make_cluster) -> None:  # type: ignore[no-untyped-def]
    params = ModelParams()
    c = make_cluster(params, nodes=1, seed=3)
    start_now(c, [c.add_pod(cpu_pod(work=1e9)) for _ in range(2)])
    for _ in range(10):  # past the create bursts
        c.step()
    samples = []
    for _ in range(2000):
        c.step()
        samples.append(c.telemetry(0).util)
    # True utilisation is (2 + 0.1 background) / 4; 2000 samples estimate the noise std within
    # a few percent (standard error of a std estimate ~ 1/sqrt(2n) = 1.6 %).
    assert np.mean(samples) == pytest.approx(2.1 / 4, abs=0.003)
    assert np.std(samples) == pytest.approx(params.noise_util, rel=0.1)


def test_binding_rejects_bad_requests(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet, nodes=2)
    p = c.add_pod(cpu_pod())
    assert c.phase[p] == PENDING
    with pytest.raises(ValueError, match="no node"):
        c.bind(p, 5)
    c.bind(p, 1)
    with pytest.raises(ValueError, match="not pending"):
        c.bind(p, 0)


def test_pod_arrays_grow_beyond_initial_capacity(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet)
    pods = [c.add_pod(cpu_pod(work=1.0)) for _ in range(300)]
    assert pods == list(range(300))
    assert np.all(c.phase[:300] == PENDING) and math.isnan(c.bound_at[299])


def test_memory_telemetry_and_pressure_proxy(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    node = dataclasses.replace(quiet.node, memory=1000 * MI)
    c = make_cluster(dataclasses.replace(quiet, node=node))
    first = c.add_pod(cpu_pod(work=100.0, memory=500 * MI))
    start_now(c, [first])
    c.step()
    t = c.telemetry(0)
    assert t.mem_used == pytest.approx(0.5) and t.psi_mem_some == 0.0
    second = c.add_pod(cpu_pod(work=100.0, memory=450 * MI))
    start_now(c, [second])
    c.step()
    # 95 % used: half-way into the last 10 % where the reclaim-stall proxy rises from 0 to 1.
    t = c.telemetry(0)
    assert t.mem_used == pytest.approx(0.95) and t.psi_mem_some == pytest.approx(0.5)
    assert c.oom_kills == 0
