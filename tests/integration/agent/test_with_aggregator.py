"""Two agents and the real aggregator service on loopback: each ends up merging the fleet model."""

from __future__ import annotations

import asyncio

from agent.pipeline import PipelineConfig
from agent.service import AgentService, ServiceConfig
from aggregator.grpc_server import start_grpc_server
from aggregator.service import AggregatorConfig, AggregatorService

from .conftest import ScriptedSource, cancel_all, wait_for


async def test_agents_exchange_models_through_the_real_aggregator() -> None:
    aggregator = AggregatorService(AggregatorConfig(name="agg-it", recompute_interval=0.02))
    await aggregator.start()
    server, port = await start_grpc_server(aggregator, "127.0.0.1:0")
    agents = [
        AgentService(
            ServiceConfig(
                node=f"node-{i}",
                pipeline=PipelineConfig(sample_hz=50.0, batch=5),
                aggregator=f"127.0.0.1:{port}",
                exchange_interval=0.2,
                rpc_timeout=1.0,
                backoff_max=0.5,
            ),
            ScriptedSource(y=y, pods=1),
        )
        for i, y in enumerate([(0.6, 0.1), (0.1, 0.6)])  # a CPU-heavy and a memory-heavy node
    ]
    tasks = [asyncio.create_task(a.run()) for a in agents]
    try:

        def both_see_the_fleet() -> bool:
            views = [a.pipeline.global_view for a in agents]
            return all(v is not None and v.contributing_nodes == 2 for v in views)

        await wait_for(both_see_the_fleet)
        await wait_for(
            lambda: all(a.last_report is not None and a.last_report.global_model for a in agents)
        )
        for a in agents:
            assert a.exchange.errors == 0 and a.global_refused == 0
        # The global model is the fleet's mean second moment: its top direction uses both
        # resources, unlike either node's own model.
        view = agents[0].pipeline.global_view
        assert view is not None
        _, u1 = view.model.top()
        assert u1[0] > 0.3 and u1[1] > 0.3
    finally:
        await cancel_all(tasks)
        await server.stop(None)
        await aggregator.stop()
