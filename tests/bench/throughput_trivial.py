"""The trivial extender of the throughput benchmark: every node passes, every score is 0, and a
bind binds. It runs on the same stack as Carico's extender — the aiohttp server of
``scheduler_ext.http_server.start_http``, uvloop, the msgspec wire types and the same API client
for bindings (``scheduler_ext.kube.KubernetesCluster``) — so that what Carico costs beyond it is
its decisions, ledger and bookkeeping.

``python throughput_trivial.py KUBECONFIG PORT``; serves ``/scheduler/{filter,prioritize,bind}``
and ``/healthz``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carico.cliargs import event_loop_factory  # noqa: E402
from scheduler_ext import wire  # noqa: E402
from scheduler_ext.http_server import start_http  # noqa: E402
from scheduler_ext.kube import KubernetesCluster  # noqa: E402
from scheduler_ext.pods import PodFacts  # noqa: E402

JSON = "application/json"


def build(cluster: KubernetesCluster | None) -> web.Application:
    """The trivial extender's app; with no cluster it has no bind verb (the extender benchmark's
    baseline, which only filters and prioritizes)."""

    def names_of(args: wire.ExtenderArgs) -> list[str]:
        if args.NodeNames is not None:
            return args.NodeNames
        items = args.Nodes.items if args.Nodes is not None else None
        return [i.metadata.name if i.metadata else "" for i in items or ()]

    async def filter_(request: web.Request) -> web.Response:
        body = await request.read()
        args = wire.decode_args(body)
        if args.NodeNames is not None:
            reply = wire.encode(wire.FilterResultNames(args.NodeNames, {}, {}))
        else:
            reply = wire.encode(wire.FilterResultNodes(wire.decode_nodes_whole(body).Nodes, {}, {}))
        return web.Response(body=reply, content_type=JSON)

    async def prioritize(request: web.Request) -> web.Response:
        args = wire.decode_args(await request.read())
        reply = wire.encode([wire.HostPriority(n, 0) for n in names_of(args)])
        return web.Response(body=reply, content_type=JSON)

    async def bind(request: web.Request) -> web.Response:
        assert cluster is not None
        args = wire.decode_binding(await request.read())
        try:
            await cluster.bind(PodFacts(args.PodNamespace, args.PodName, args.PodUID), args.Node)
            error = ""
        except Exception as exc:
            error = str(exc) or type(exc).__name__
        return web.Response(body=wire.encode(wire.BindingResult(error)), content_type=JSON)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/scheduler/filter", filter_)
    app.router.add_post("/scheduler/prioritize", prioritize)
    if cluster is not None:
        app.router.add_post("/scheduler/bind", bind)
    app.router.add_get("/healthz", healthz)
    return app


async def main(kubeconfig: str, port: int) -> None:
    cluster = KubernetesCluster(kubeconfig)
    server = await start_http(build(cluster), "127.0.0.1", port)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()
        await cluster.close()


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=event_loop_factory("uvloop")) as runner:
        runner.run(main(sys.argv[1], int(sys.argv[2])))
