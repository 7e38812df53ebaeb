"""The service's sampling tick with an injected clock: pod state, JSON output, skipped ticks."""

from __future__ import annotations

import io
import json

import numpy as np

from agent.pipeline import PipelineConfig
from agent.service import AgentService, ServiceConfig
from agent.telemetry import Sample


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
