"""The service's sampling tick with an injected clock: pod state, JSON output, skipped ticks."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from agent.pipeline import PipelineConfig
from agent.service import AgentService, ServiceConfig
from agent.telemetry import PodUsage, Sample
from carico.footprint import Footprint
from carico.pods import PodClass, Requests
from protos.carico.v1 import aggregator_pb2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ConstantSource:
    feature_names = ("cpu", "memory")

    def read(self, now: float) -> Sample:
        return Sample(np.array([0.4, 0.3]), psi_available=False)


def service(kube: bool, out: io.StringIO | None = None) -> tuple[AgentService, Clock]:
    clock = Clock()
    svc = AgentService(
        ServiceConfig(node="n1", pipeline=PipelineConfig(), kube=kube),
        ConstantSource(),
        monotonic=clock,
        wall=lambda: 1.7e9 + clock.now,
        out=out,
    )
    return svc, clock


def run_ticks(svc: AgentService, clock: Clock, n: int) -> None:
    for _ in range(n):
        svc.tick()
        clock.now += 0.1


def test_no_report_until_the_pod_watch_has_listed() -> None:
    svc, clock = service(kube=True)
    run_ticks(svc, clock, 30)
    assert svc.reports == 0 and svc.pipeline.local is not None  # the model learns meanwhile
    assert svc.ready() == "pod watch has not listed this node's pods yet"
    svc.pods.update(3, changed=True)
    run_ticks(svc, clock, 10)
    assert svc.last_report is not None and svc.last_report.pods == 3
    assert svc.ready() is None


def test_without_kube_pods_are_zero_and_reports_print_as_json() -> None:
    out = io.StringIO()
    svc, clock = service(kube=False, out=out)
    run_ticks(svc, clock, 30)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    report = json.loads(lines[-1])
    assert report["node"] == "n1" and report["pods"] == 0 and report["psi_available"] is False
    assert report["y"] == {"cpu": 0.4, "memory": 0.3}
    assert report["mode"] == "live" and report["k"] > 0


def test_a_stalled_loop_skips_ticks_and_keeps_its_phase() -> None:
    svc, clock = service(kube=False)
    next_at, delay = svc._next_tick(clock.now, 0.1)
    assert abs(delay - 0.1) < 1e-9 and svc.ticks_skipped == 0
    clock.now += 0.35  # the host stalled for 350 ms
    next_at, delay = svc._next_tick(next_at, 0.1)
    assert svc.ticks_skipped == 2  # the ticks due at +0.2 s and +0.3 s
    assert abs(next_at - (1000.0 + 0.4)) < 1e-9 and 0 < delay <= 0.1


GI = 2**30
WEB = PodClass("shop/Deployment/web", Requests(0.25, 64 * 2**20))


class PodsSource:
    """A 4-core, 8 GiB node at a constant load whose pods each keep one core busy and hold
    0.5 GiB; their usage is read every fifth sample, as ProcSource reads the cgroups."""

    feature_names = ("cpu", "memory")

    def __init__(self, uids: tuple[str, ...]) -> None:
        self.uids = uids
        self.reads = 0

    def read(self, now: float) -> Sample:
        usage = None
        if self.reads % 5 == 0:
            usage = {uid: PodUsage(1.0 * now, 0.5 * GI) for uid in self.uids}
        self.reads += 1
        return Sample(
            np.array([0.3, 0.2]),
            psi_available=True,
            cpu_util=0.5,
            psi_cpu=0.0,
            cores=4.0,
            memory_bytes=8.0 * GI,
            pod_usage=usage,
        )


def test_the_watched_pods_classes_reach_the_pipeline_and_their_usage_is_learned() -> None:
    out = io.StringIO()
    clock = Clock()
    svc = AgentService(
        ServiceConfig(node="n1", kube=True),
        PodsSource(("u1", "u2")),
        monotonic=clock,
        wall=lambda: 1.7e9 + clock.now,
        out=out,
    )
    # What the pod watch's thread hands over (on the loop) when the pods change.
    svc.pods.update(2, changed=True, classes={"u1": WEB, "u2": WEB})
    run_ticks(svc, clock, 1)
    assert svc.pipeline.classes.running == {"u1": WEB, "u2": WEB}
    svc.pods.update(2, changed=False)  # no change of classes: nothing handed over again
    assert svc.pods.take_classes() is None
    run_ticks(svc, clock, 39)
    learned = svc.pipeline.classes.learner.learned(WEB.name)
    assert learned is not None
    assert learned.footprint == Footprint(pytest.approx(1.0), pytest.approx(0.5 * GI))
    # The standalone line carries the per-class view: headroom per feature, running classes.
    line = json.loads(out.getvalue().splitlines()[-1])
    per_class = line["per_class"]
    assert set(per_class["headroom"]) == {"cpu", "memory"}
    assert per_class["classes"] == [
        {
            "class": WEB.name,
            "cpu_cores": pytest.approx(1.0),
            "memory_bytes": pytest.approx(0.5 * GI),
            "source": "learned",
            "pods": 2,
        }
    ]
    # The learned class goes to the aggregator with the local model.
    message = svc.build_local_model()
    assert [c.workload_class for c in message.class_footprints] == [WEB.name]
    assert message.class_footprints[0].cpu_cores == pytest.approx(1.0)


def test_a_reply_without_per_class_priors_gives_an_empty_fleet_view() -> None:
    svc, _ = service(kube=False)
    priors = aggregator_pb2.FleetPriors(cpu_request_ratio=4.0)
    priors.class_medians.add(workload_class=WEB.name, cpu_cores=1.0, memory_bytes=0.5 * GI)
    svc.apply_global(aggregator_pb2.GlobalModel(has_model=False, priors=priors))
    fleet = svc.pipeline.classes.fleet
    assert fleet.classes == {WEB.name: Footprint(1.0, 0.5 * GI)} and fleet.cpu_ratio == 4.0
    svc.apply_global(aggregator_pb2.GlobalModel(has_model=False))
    fleet = svc.pipeline.classes.fleet
    assert fleet.classes == {} and fleet.typical is None and fleet.cpu_ratio is None


def test_without_the_node_size_the_json_has_no_per_class_view() -> None:
    out = io.StringIO()
    svc, clock = service(kube=False, out=out)
    run_ticks(svc, clock, 10)
    assert "per_class" not in json.loads(out.getvalue().splitlines()[-1])
