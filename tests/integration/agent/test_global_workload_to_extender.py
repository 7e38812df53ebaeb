"""Two agents, the real aggregator and the real extender on loopback: the global model's
expected-workload vector travels aggregator → agent → extender and matches the agent's model."""

from __future__ import annotations

import asyncio

import numpy as np

from agent.pipeline import PipelineConfig
from agent.service import AgentService, ServiceConfig
from aggregator.grpc_server import start_grpc_server
from aggregator.service import AggregatorConfig, AggregatorService
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.grpc_server import start_grpc
from scheduler_ext.service import ExtenderService, Settings

from .conftest import ScriptedSource, cancel_all, wait_for


async def test_the_extender_holds_the_aggregators_expected_workload() -> None:
    aggregator = AggregatorService(AggregatorConfig(name="agg-w", recompute_interval=0.02))
    await aggregator.start()
    agg_server, agg_port = await start_grpc_server(aggregator, "127.0.0.1:0")
    extender = ExtenderService(InMemoryCluster(), Settings())
    ext_server = await start_grpc(extender, "127.0.0.1:0")
    agents = [
        AgentService(
            ServiceConfig(
                node=f"node-{i}",
                pipeline=PipelineConfig(sample_hz=50.0, batch=5),
                aggregator=f"127.0.0.1:{agg_port}",
                extender=f"127.0.0.1:{ext_server.port}",
                exchange_interval=0.2,
                rpc_timeout=1.0,
                backoff_max=0.5,
            ),
            ScriptedSource(y=y, pods=1),
        )
        for i, y in enumerate([(0.6, 0.1), (0.1, 0.6)])
    ]
    tasks = [asyncio.create_task(a.run()) for a in agents]
    try:

        def fleet_model_at_extender() -> bool:
            # The model changes with every exchange: wait for a moment when each node's last
            # report carries the fleet model the agent holds now (no await between this check
            # and the assertions below, so that state cannot move under them).
            for a in agents:
                r = extender.table.report(a.config.node)
                held = a.global_workload
                if r is None or r.global_workload is None or held is None:
                    return False
                if (r.global_workload.version, held.contributing_nodes) != (held.version, 2):
                    return False
            return True

        await wait_for(fleet_model_at_extender)
        for a in agents:
            r = extender.table.report(a.config.node)
            assert r is not None and r.global_workload is not None
            g = r.global_workload
            assert g.aggregator == "agg-w" and g.contributing_nodes == 2
            assert g.feature_names == ("cpu", "memory")
            # Reference: the agent's merged-in global model by numpy's eigen-decomposition of
            # its second moment (not SubspaceModel.top).
            view = a.pipeline.global_view
            assert view is not None
            values, vectors = np.linalg.eigh(view.model.second_moment())
            w_ref = np.sqrt(values[-1]) * np.abs(vectors[:, -1])
            # float64 on a 2x2: agreement to ~1e-12 is expected; 1e-8 is slack.
            np.testing.assert_allclose(g.expected_workload, w_ref, rtol=1e-8, atol=1e-10)
            # Both resources are used by the fleet's typical workload (one CPU-heavy and one
            # memory-heavy node), unlike either node's own model.
            assert min(g.expected_workload) > 0.1
    finally:
        await cancel_all(tasks)
        await ext_server.close(None)
        await agg_server.stop(None)
        await aggregator.stop()
