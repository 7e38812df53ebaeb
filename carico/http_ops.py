"""The operations HTTP endpoint of a component: ``/metrics``, ``/healthz`` and ``/readyz``.

The agent and the aggregator run this next to their main work; the extender mounts the same
handlers on its own HTTP server with :func:`add_ops_routes`. Health answers 200 while the process
serves (and the optional ``healthy`` callback, for a component made of several processes, finds
nothing wrong; else 503 with its reason); readiness answers 200 only while the ``ready`` callback
says so, else 503 with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

# ready() returns None when ready, else a short reason for the 503 body.
ReadyCheck = Callable[[], str | None]


def add_ops_routes(
    app: web.Application,
    registry: CollectorRegistry,
    ready: ReadyCheck | None = None,
    healthy: ReadyCheck | None = None,
) -> None:
    """Mount /metrics, /healthz and /readyz on ``app``."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        problem = healthy() if healthy is not None else None
        if problem is not None:
            return web.Response(status=503, text=f"unhealthy: {problem}\n")
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        reason = ready() if ready is not None else None
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


@dataclass
class OpsServer:
    """A running ops endpoint; ``port`` is the bound port (useful when started on port 0)."""

    runner: web.AppRunner
    host: str
    port: int

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_ops_server(
    host: str,
    port: int,
    registry: CollectorRegistry,
    ready: ReadyCheck | None = None,
    healthy: ReadyCheck | None = None,
) -> OpsServer:
    """Serve the ops endpoints on ``host:port`` (port 0 picks a free one) until ``close()``."""
    app = web.Application()
    add_ops_routes(app, registry, ready, healthy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    # aiohttp exposes the bound socket only through the site's asyncio server.
    sockets = getattr(site._server, "sockets", None) or []
    bound = int(sockets[0].getsockname()[1]) if sockets else port
    return OpsServer(runner, host, bound)
