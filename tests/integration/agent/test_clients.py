"""The agent against real gRPC servers on loopback: outages, backoff, reconnection, metrics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import numpy as np
import pytest

from agent.pipeline import PipelineConfig
from agent.report_gate import GateConfig
from agent.service import AgentService, ServiceConfig
from protos.carico.v1 import aggregator_pb2_grpc, capacity_pb2, capacity_pb2_grpc

from .conftest import (
    RecordingAggregator,
    RecordingIngest,
    ScriptedSource,
    Server,
    free_port,
    global_model,
    wait_for,
)

# 50 Hz and batches of 5: a report every 0.1 s keeps these tests short; the logic is the same.
FAST = PipelineConfig(sample_hz=50.0, batch=5)


@contextlib.asynccontextmanager
async def running(service: AgentService) -> AsyncIterator[asyncio.Task[int]]:
    task = asyncio.create_task(service.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def make_service(**kwargs: object) -> AgentService:
    # Every report goes out (keepalive 0) unless a test says otherwise: these tests count them.
    config = ServiceConfig(
        node="node-a",
        pipeline=FAST,
        exchange_interval=0.2,
        rpc_timeout=1.0,
        backoff_max=0.8,
        report_gate=GateConfig(keepalive_s=0.0),
    )
    for key, value in kwargs.items():
        setattr(config, key, value)
    return AgentService(config, ScriptedSource(pods=2))


async def test_aggregator_down_then_up_agent_keeps_working_and_reconnects() -> None:
    aggregator = RecordingAggregator(global_model())
    server = Server(lambda s: aggregator_pb2_grpc.add_AggregatorServicer_to_server(aggregator, s))
    server.port = free_port()  # nothing listens there yet
    service = make_service(aggregator=server.target)
    async with running(service):
        await wait_for(lambda: service.exchange is not None and service.exchange.errors >= 3)
        # Unreachable aggregator: reports continue on the local model alone.
        reports_while_down = service.reports
        await wait_for(lambda: service.reports >= reports_while_down + 3)
        assert service.last_report is not None and not service.last_report.global_model
        # Retries back off: the delay grew beyond the healthy interval (0.2 s) after failures.
        assert service.exchange.backoff.failures >= 3
        await server.start()
        try:
            await wait_for(lambda: len(aggregator.received) >= 2)
            await wait_for(
                lambda: service.last_report is not None and service.last_report.global_model
            )
            assert service.exchange.backoff.failures == 0  # reset after success
            first, second = aggregator.received[:2]
            assert first.node == "node-a" and first.weight == 1
            assert list(first.model.feature_names) == ["cpu", "memory"]
            assert second.sequence > first.sequence
            assert len(first.model.u) == first.model.d * first.model.r
            assert list(first.per_pod_costs) == []  # nothing learned yet
            # The fleet prior (0.05) seeds the cold-start per-pod cost in place of the configured
            # 0.1. Once seeded, p̂ follows the unit of k as the model moves (rescale): a few
            # percent by the time this runs, so 20 % separates the fleet's 0.05 from 0.1.
            estimator = service.pipeline.estimator
            assert estimator.cost_source == "fleet"
            assert estimator.per_pod_cost == pytest.approx(0.05, rel=0.2)
            assert service.pipeline.global_view is not None
            assert service.pipeline.global_view.contributing_nodes == 3
            # Aggregator goes away again: the agent keeps reporting.
            await server.stop()
            errors = service.exchange.errors
            await wait_for(lambda: service.exchange.errors > errors)
            reports = service.reports
            await wait_for(lambda: service.reports >= reports + 3)
        finally:
            await server.stop()


async def test_a_global_model_with_other_features_is_refused() -> None:
    aggregator = RecordingAggregator(global_model(names=("cpu", "io_pressure")))
    server = Server(lambda s: aggregator_pb2_grpc.add_AggregatorServicer_to_server(aggregator, s))
    await server.start()
    try:
        service = make_service(aggregator=server.target)
        async with running(service):
            await wait_for(lambda: service.global_refused >= 2)
            assert service.pipeline.global_view is None
            assert service.last_report is not None and not service.last_report.global_model
    finally:
        await server.stop()


async def test_capacity_stream_survives_extender_restarts_with_increasing_sequence() -> None:
    ingest = RecordingIngest()
    server = Server(lambda s: capacity_pb2_grpc.add_CapacityIngestServicer_to_server(ingest, s))
    await server.start()
    service = make_service(extender=server.target)
    try:
        async with running(service):
            await wait_for(lambda: len(ingest.received) >= 3)
            await server.stop()
            await wait_for(lambda: service.reporter.errors >= 1)
            count = len(ingest.received)
            reports = service.reports
            await wait_for(lambda: service.reports >= reports + 3)  # sampling never stopped
            await server.start()
            await wait_for(lambda: len(ingest.received) >= count + 3)
            assert service.reporter.streams >= 2 and ingest.streams >= 2
    finally:
        await server.stop()
    seqs = [m.sequence for m in ingest.received]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    m = ingest.received[-1]
    assert m.node == "node-a" and m.pods == 2
    assert m.mode in (capacity_pb2.CAPACITY_MODE_LIVE, capacity_pb2.CAPACITY_MODE_ESTIMATE)
    assert list(m.feature_names) == ["cpu", "memory"]
    assert np.allclose(list(m.features), [0.3, 0.2], atol=0.05)  # the scripted level ± noise
    assert m.health.psi_available and m.k > 0 and m.avail > 0


async def test_unchanged_reports_go_as_keepalives() -> None:
    ingest = RecordingIngest()
    server = Server(lambda s: capacity_pb2_grpc.add_CapacityIngestServicer_to_server(ingest, s))
    await server.start()
    # A steady node: a report every 0.1 s, none changing materially, so one goes every 1 s.
    service = make_service(extender=server.target, report_gate=GateConfig(keepalive_s=1.0))
    try:
        async with running(service):
            await wait_for(lambda: service.reports >= 30)
    finally:
        await server.stop()
    made, sent = service.reports, len(ingest.received)
    reasons = service.gate.sent
    # The keepalive goes by the reports' own clock: 30 reports span at least 3 s, so at least
    # the first and 2 keepalives; a change while the scripted estimate settles may add a few.
    assert reasons.get("first") == 1 and reasons.get("keepalive", 0) >= 2, reasons
    # The last one let through may still be on its way when the agent stops.
    passed = sum(reasons.values())
    assert passed - 1 <= sent <= passed and service.gate.held == made - passed
    assert passed <= made // 3, (made, passed, reasons)


async def test_metrics_and_health_endpoints() -> None:
    ingest = RecordingIngest()
    server = Server(lambda s: capacity_pb2_grpc.add_CapacityIngestServicer_to_server(ingest, s))
    server.port = free_port()  # nothing listens: the report error counter must show it
    service = make_service(
        metrics_host="127.0.0.1", metrics_port=free_port(), extender=server.target
    )
    async with running(service):
        await wait_for(lambda: service.reports >= 2 and service.reporter.errors >= 1)
        base = f"http://127.0.0.1:{service.config.metrics_port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 200
            async with http.get(f"{base}/metrics") as resp:
                text = await resp.text()
    for name in (
        'carico_agent_feature{feature="cpu",node="node-a"}',
        'carico_agent_k{node="node-a"}',
        'carico_agent_avail{node="node-a"}',
        'carico_agent_capacity{node="node-a"}',
        'carico_agent_per_pod_cost{node="node-a"}',
        'carico_agent_pods{node="node-a"} 2.0',
        'carico_agent_mode{mode="live",node="node-a"}',
        'carico_agent_samples_missing_total{node="node-a"} 0.0',
        'carico_agent_reports_sent_total{node="node-a"} 0.0',
        'carico_agent_report_connected{node="node-a"} 0.0',
    ):
        assert name in text, name
    errors = [ln for ln in text.splitlines() if ln.startswith("carico_agent_report_errors_total")]
    assert errors and float(errors[0].split()[-1]) >= 1
    # Every metric family appears once (no two collectors' names collide).
    types = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")]
    assert len(types) == len(set(types))


class HangingAggregator(aggregator_pb2_grpc.AggregatorServicer):
    """Accepts the call and never answers (a wedged server)."""

    def __init__(self) -> None:
        self.calls = 0

    async def Exchange(self, request: object, context: object) -> object:
        self.calls += 1
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_a_hanging_aggregator_never_stalls_sampling() -> None:
    hanging = HangingAggregator()
    server = Server(lambda s: aggregator_pb2_grpc.add_AggregatorServicer_to_server(hanging, s))
    await server.start()
    try:
        service = make_service(aggregator=server.target)
        async with running(service):
            await wait_for(lambda: service.exchange is not None and service.exchange.errors >= 2)
            # Each call waited for its 1 s timeout; reports kept coming all along.
            assert hanging.calls >= 2
            reports = service.reports
            await wait_for(lambda: service.reports >= reports + 5)
            assert service.pipeline.global_view is None
    finally:
        await server.stop()
