"""The kube-scheduler emulation on the cluster model, and the extender seam."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from carico_app.simulate.cluster import SUCCEEDED
from carico_app.simulate.params import BPI_2000, ModelParams
from carico_app.simulate.scheduler import KubeScheduler
from carico_app.simulate.schedulers import SchedulerSpec, make_scheduler, parse_spec


def run(cluster, sched, seconds: float) -> None:  # type: ignore[no-untyped-def]
    for _ in range(round(seconds / cluster.params.dt)):
        sched.step(cluster, cluster.now)
        events = cluster.step()
        for pod in events.succeeded:
            sched.pod_terminated(int(pod), cluster.now)


def submit(cluster, sched, n: int, cpu_m: int):  # type: ignore[no-untyped-def]
    pods = []
    for _ in range(n):
        p = cluster.add_pod(BPI_2000.with_requests(cpu_m, 0))
        sched.pod_created(p, cluster.now)
        pods.append(p)
    return pods


def test_spreads_evenly_and_respects_requests(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    params = dataclasses.replace(quiet, startup_min=50.0, startup_max=50.0)  # nothing finishes
    c = make_cluster(params, nodes=4)
    s = KubeScheduler("default", params, 4, np.random.default_rng(0))
    pods = submit(c, s, 20, 1000)
    run(c, s, 1.0)
    bound = c.node[pods]
    # 3750m free per node fits three 1000m pods: 12 bound, 3 per node (LeastAllocated spreads).
    assert np.bincount(bound[bound >= 0], minlength=4).tolist() == [3, 3, 3, 3]
    assert (bound < 0).sum() == 8
    assert s.queue.pending_counts()[2] == 8  # the rest wait as unschedulable


def test_pending_pods_bind_when_pods_finish(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet, nodes=1)
    s = KubeScheduler("default", quiet, 1, np.random.default_rng(0))
    pods = submit(c, s, 6, 1000)
    run(c, s, 60.0)
    # Three at a time; the second three bind after the first finish, all complete.
    assert np.all(c.phase[pods] == SUCCEEDED)
    first, second = np.sort(c.bound_at[pods])[:3], np.sort(c.bound_at[pods])[3:]
    assert second.min() >= np.sort(c.succeeded_at[pods])[0] - 1e-9
    assert first.max() < 0.5


def test_bindings_are_rate_limited_by_the_client(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    params = dataclasses.replace(quiet, scheduler_qps=10.0, scheduler_burst=5.0, startup_min=99)
    params = dataclasses.replace(params, startup_max=99)
    c = make_cluster(params, nodes=4)
    s = KubeScheduler("default", params, 4, np.random.default_rng(0))
    pods = submit(c, s, 25, 10)
    run(c, s, 1.0)
    # A full bucket of 5 in the first step, then one token per 0.1 s step for 9 more steps.
    assert (c.node[pods] >= 0).sum() == 5 + 9


class FakeExtender:
    """A stand-in for Carico's extender: only lets pods onto node-01 and scores it 10."""

    weight = 1

    def __init__(self) -> None:
        self.calls: list[str] = []

    def filter(self, pod: int, nodes: list[str], now: float) -> tuple[list[str], dict[str, str]]:
        self.calls.append("filter")
        return [n for n in nodes if n == "node-01"], {n: "fake" for n in nodes if n != "node-01"}

    def prioritize(self, pod: int, nodes: list[str], now: float) -> dict[str, int]:
        self.calls.append("prioritize")
        return dict.fromkeys(nodes, 10)

    def bind(self, pod: int, node: str, now: float) -> str:
        self.calls.append("bind")
        return ""


def test_extender_seam_narrows_scores_and_binds(quiet: ModelParams, make_cluster) -> None:  # type: ignore[no-untyped-def]
    c = make_cluster(quiet, nodes=3)
    ext = FakeExtender()
    s = KubeScheduler("carico-like", quiet, 3, np.random.default_rng(0), extender=ext)
    pods = submit(c, s, 3, 100)
    run(c, s, 0.5)
    assert c.node[pods].tolist() == [1, 1, 1]
    assert ext.calls[:3] == ["filter", "prioritize", "bind"]


def test_spec_parsing_and_carico_wired() -> None:
    assert parse_spec("default") == SchedulerSpec("default")
    assert parse_spec("default:500m") == SchedulerSpec("default", 500)
    spec = parse_spec("default:200m/750Mi")
    assert (spec.cpu_m, spec.mem, spec.label) == (200, 750 * 1024**2, "default:200m/750Mi")
    assert parse_spec("carico:p=1.5") == SchedulerSpec("carico", prior_per_pod_cost=1.5)
    assert parse_spec("carico:p=1.5").label == "carico:p=1.5"
    for bad in ("kube", "default:500", "default:m", "carico:100m", "carico:p=0", "carico:p=x"):
        with pytest.raises(ValueError):
            parse_spec(bad)
    sched = make_scheduler(parse_spec("carico"), ModelParams(), 2, np.random.default_rng(0))
    assert sched.name == "carico" and isinstance(sched, KubeScheduler)
