"""The trivial extender of the throughput benchmark: every node passes, every score is 0, and a
bind binds. It runs on the same stack as Carico's extender — the aiohttp server of
``scheduler_ext.http_server.start_http``, uvloop, the msgspec wire types and the same API client
for bindings (``scheduler_ext.kube.KubernetesCluster``) — so that what Carico costs beyond it is
its decisions, ledger and bookkeeping.

With a GRPC_PORT it also takes the inputs any extender deciding on reported capacity must take, and
does nothing with them: every node's capacity reports over a ``CapacityIngest`` stream like
Carico's (each report parsed, counted and dropped) and the pod watch the reservation ledger needs
(bound Pending pods, the same watch code as Carico's, each event decoded and dropped). That is the
floor of the throughput benchmark: what being a telemetry-driven extender costs before any of
Carico's logic.

With a WORK_US too, the floor also spends that many microseconds of CPU per pod doing nothing
useful (half in the filter, a fifth in the prioritize, the rest in the bind, about as Carico's own
work is spread): how much per-pod work an extender can afford (``--floor-work-us`` of the
benchmark).

``python throughput_trivial.py KUBECONFIG PORT [GRPC_PORT [WORK_US]]``; serves
``/scheduler/{filter,prioritize,bind}``, ``/healthz`` and ``/reports`` (reports taken so far).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carico.cliargs import event_loop_factory  # noqa: E402
from protos.carico.v1 import capacity_pb2  # noqa: E402
from scheduler_ext import wire  # noqa: E402
from scheduler_ext.cli import SWITCH_INTERVAL_S  # noqa: E402
from scheduler_ext.grpc_server import GrpcServer, serve_report  # noqa: E402
from scheduler_ext.http_server import start_http  # noqa: E402
from scheduler_ext.kube import KubernetesCluster  # noqa: E402
from scheduler_ext.pods import PodFacts  # noqa: E402

JSON = "application/json"


class Work:
    """CPU time spent per pod on purpose (the thread's own time: what it costs, whatever else
    runs on the machine meanwhile)."""

    def __init__(self, per_pod_us: float = 0.0) -> None:
        self.per_pod_s = per_pod_us * 1e-6

    def spend(self, share: float) -> None:
        if self.per_pod_s <= 0:
            return
        end = time.thread_time() + self.per_pod_s * share
        while time.thread_time() < end:
            pass


class Inputs:
    """The floor's inputs: reports parsed and dropped, pod watch events decoded and dropped."""

    def __init__(self) -> None:
        self.reports = 0
        self.pod_events = 0

    async def report(
        self, request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> capacity_pb2.ReportSummary:
        parse = capacity_pb2.NodeCapacity.FromString
        async for raw in request_iterator:
            parse(raw)
            self.reports += 1
        return capacity_pb2.ReportSummary(accepted=self.reports)

    def on_list(self, pods: object) -> None:
        self.pod_events += 1

    def on_event(self, pod: object) -> None:
        self.pod_events += 1

    async def serve_grpc(self, port: int) -> GrpcServer:
        """``CapacityIngest`` on the extender's own gRPC server (reports as bytes)."""
        return await serve_report(self.report, f"127.0.0.1:{port}")


def build(
    cluster: KubernetesCluster | None, inputs: Inputs | None = None, work: Work | None = None
) -> web.Application:
    """The trivial extender's app; with no cluster it has no bind verb (the extender benchmark's
    baseline, which only filters and prioritizes). ``work``: CPU spent per pod on purpose."""
    spend = (work or Work()).spend

    def names_of(args: wire.ExtenderArgs) -> list[str]:
        if args.NodeNames is not None:
            return args.NodeNames
        items = args.Nodes.items if args.Nodes is not None else None
        return [i.metadata.name if i.metadata else "" for i in items or ()]

    async def filter_(request: web.Request) -> web.Response:
        body = await request.read()
        spend(0.5)
        args = wire.decode_args(body)
        if args.NodeNames is not None:
            reply = wire.encode(wire.FilterResultNames(args.NodeNames, {}, {}))
        else:
            reply = wire.encode(wire.FilterResultNodes(wire.decode_nodes_whole(body).Nodes, {}, {}))
        return web.Response(body=reply, content_type=JSON)

    async def prioritize(request: web.Request) -> web.Response:
        args = wire.decode_args(await request.read())
        spend(0.2)
        reply = wire.encode([wire.HostPriority(n, 0) for n in names_of(args)])
        return web.Response(body=reply, content_type=JSON)

    async def bind(request: web.Request) -> web.Response:
        assert cluster is not None
        args = wire.decode_binding(await request.read())
        spend(0.3)
        try:
            await cluster.bind(PodFacts(args.PodNamespace, args.PodName, args.PodUID), args.Node)
            error = ""
        except Exception as exc:
            error = str(exc) or type(exc).__name__
        return web.Response(body=wire.encode(wire.BindingResult(error)), content_type=JSON)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def reports(_: web.Request) -> web.Response:
        return web.Response(text=str(inputs.reports if inputs is not None else 0))

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/scheduler/filter", filter_)
    app.router.add_post("/scheduler/prioritize", prioritize)
    if cluster is not None:
        app.router.add_post("/scheduler/bind", bind)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/reports", reports)
    return app


async def main(kubeconfig: str, port: int, grpc_port: int | None, work_us: float = 0.0) -> None:
    cluster = KubernetesCluster(kubeconfig)
    inputs = Inputs() if grpc_port is not None else None
    server = await start_http(build(cluster, inputs, Work(work_us)), "127.0.0.1", port)
    grpc_server = watch = None
    if inputs is not None and grpc_port is not None:
        grpc_server = await inputs.serve_grpc(grpc_port)
        watch = asyncio.create_task(cluster.run_pod_watch(inputs.on_list, inputs.on_event))
    try:
        await asyncio.Event().wait()
    finally:
        if watch is not None:
            watch.cancel()
        if grpc_server is not None:
            await grpc_server.close(1.0)
        await server.close()
        await cluster.close()


if __name__ == "__main__":
    grpc_port = int(sys.argv[3]) if sys.argv[3:] else None
    work_us = float(sys.argv[4]) if sys.argv[4:] else 0.0
    if grpc_port is not None:  # gRPC's poller thread takes the GIL: as Carico's extender does
        sys.setswitchinterval(SWITCH_INTERVAL_S)
    with asyncio.Runner(loop_factory=event_loop_factory("uvloop")) as runner:
        runner.run(main(sys.argv[1], int(sys.argv[2]), grpc_port, work_us))
