"""The extender's HTTP transport (aiohttp): extender verbs, the JSON API and the ops endpoints.

* ``POST <prefix>/filter|prioritize|bind|preempt`` — kube-scheduler's extender v1 calls;
  an unknown verb is a 404, a body over the limit a 413, an unusable body a 400 whose text says
  what is wrong (and whose JSON ``Error`` carries the same message).
* ``GET /api/v1/nodes`` — the capacity table with reservations and data age;
  ``GET /api/v1/reservations`` — the open reservations;
  ``GET /api/v1/explain?pod=NS/NAME`` — the last filter/prioritize decisions for a pod;
  ``GET /api/v1/history`` — each node's recent avail and reserved (``history``);
  ``GET /api/v1/model`` — the global model's expected-workload vector as the agents report it
  (``workload``);
  ``GET /api/v1/openapi.json`` — the OpenAPI description of all of this (``openapi``).
* ``POST /repack`` — compute a repacking plan now (optional body ``{"time_limit": s,
  "dry_run": bool, "mode": "place" | "balance" | "defragment" | "consolidate"}``);
  ``GET /api/v1/repack/plans?limit=N`` — the last plans, newest first;
  ``GET /api/v1/repack`` — the repacker's mode and trigger state (``repack.service``).
* ``GET /`` — the read-only dashboard: static files from ``static/`` polling the JSON API.
* ``/metrics``, ``/healthz``, ``/readyz`` from ``carico.http_ops``.

Bodies are read by ``bodies`` (size limits before and after decompression, one budget for all
requests), so the app must be served with aiohttp's own decompression off, as ``start_http`` does.
A request refused as the client's fault is logged as one line, never with a traceback; that
includes a request aiohttp cannot even parse (a malformed chunk size, say), which aiohttp itself
answers 400 and would log at ERROR with its traceback (``_client_faults``).

Neighbours: ``service`` (all the logic), ``bodies`` (request bodies), ``cli`` (starts it).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from carico.http_ops import add_ops_routes
from scheduler_ext.bodies import BodyBudget, BodyRefused, read_body
from scheduler_ext.class_fit import NodeClasses
from scheduler_ext.openapi import OPENAPI_PATH, build_openapi
from scheduler_ext.repack.request import MAX_REQUEST_BYTES, parse_run_request
from scheduler_ext.repack.service import TRIGGER_HTTP, RunInProgress
from scheduler_ext.service import BadRequest, ExtenderService
from scheduler_ext.wire import Body
from scheduler_ext.workload import model_view

if TYPE_CHECKING:
    from scheduler_ext.repack.service import RepackService

log = logging.getLogger(__name__)

BUDGET = web.AppKey("body_budget", BodyBudget)

DEFAULT_PREFIX = "/scheduler"
DEFAULT_MAX_BODY = 64 << 20  # a full NodeList of 500 sampled nodes is ~10 MB
# Request bodies all requests may hold at once, in bodies of the largest size: kube-scheduler
# sends one filter or prioritize at a time per profile, and binds are small.
BODIES_IN_FLIGHT = 4
JSON = "application/json"
STATIC = Path(__file__).parent / "static"
SYNC_VERBS = ("filter", "prioritize", "preempt")
LOGGED_REASON = 300  # characters of a refusal's reason in its log line


def one_line(text: str, limit: int = LOGGED_REASON) -> str:
    """``text`` cut to ``limit`` characters, with newlines, other control characters and
    anything not ASCII escaped: a client's bytes must not forge log lines."""
    cut = text[:limit].encode("unicode_escape").decode("ascii")
    return cut + ("..." if len(text) > limit else "")


def _client_faults(record: logging.LogRecord) -> bool:
    """A filter for aiohttp's server log: a request it could not parse (the client's fault,
    answered 400 by aiohttp) becomes one warning line instead of an error with a traceback."""
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 400) < 500:
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        record.msg = "malformed HTTP request from %s refused (%d): %s"
        record.args = (remote, exc.code or 400, one_line(str(exc.message)))
        record.exc_info = record.exc_text = None
    return True


_PROTOCOL_LOG = logging.getLogger(f"{__name__}.protocol")
_PROTOCOL_LOG.addFilter(_client_faults)


def _error(status: int, message: str) -> web.Response:
    # A message may quote the client's strings, lone surrogates included, which UTF-8 (and so
    # msgspec) cannot encode: they go out escaped.
    safe = message.encode("utf-8", "backslashreplace").decode("utf-8")
    body = msgspec.json.encode({"Error": safe})
    return web.Response(status=status, body=body, content_type=JSON)


def _refused(request: web.Request, status: int, message: str) -> web.Response:
    """A client error: answered with the reason and logged as one line."""
    log.warning(
        "%s %s from %s refused (%d): %s",
        request.method,
        one_line(request.path, 80),
        request.remote,
        status,
        one_line(message),
    )
    return _error(status, message)


def normalise_prefix(prefix: str) -> str:
    """``scheduler/`` -> ``/scheduler``; ``/`` -> ``""``."""
    stripped = prefix.strip().strip("/")
    return f"/{stripped}" if stripped else ""


def build_app(
    service: ExtenderService,
    *,
    prefix: str = DEFAULT_PREFIX,
    max_body: int = DEFAULT_MAX_BODY,
    repack: RepackService | None = None,
) -> web.Application:
    app = web.Application(client_max_size=max_body)
    prefix = normalise_prefix(prefix)
    latency = service.metrics.latency_of
    budget = BodyBudget(BODIES_IN_FLIGHT * max_body)
    app[BUDGET] = budget

    def verb_handler(
        verb: str, call: Callable[[Body], bytes | Awaitable[bytes]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        observe = latency[verb].observe

        async def handle(request: web.Request) -> web.Response:
            start = time.perf_counter()
            try:
                async with read_body(request, max_body, budget) as body:
                    result = call(body)
                    reply = result if isinstance(result, bytes) else await result
            except BodyRefused as exc:
                service.count_request(verb, "too_large" if exc.status == 413 else "bad_request")
                return _refused(request, exc.status, f"{verb}: {exc}")
            except BadRequest as exc:
                service.count_request(verb, "bad_request")
                return _refused(request, 400, f"{verb}: {exc}")
            except Exception:
                log.exception("%s failed", verb)
                service.count_request(verb, "error")
                return _error(500, f"{verb}: internal error (see the extender's log)")
            finally:
                observe(time.perf_counter() - start)
            return web.Response(body=reply, content_type=JSON)

        return handle

    for verb in SYNC_VERBS:
        app.router.add_post(f"{prefix}/{verb}", verb_handler(verb, getattr(service, verb)))
    app.router.add_post(f"{prefix}/bind", verb_handler("bind", service.bind))
    # before the catch-all of unknown verbs, which an empty prefix would stretch over /repack
    add_repack_routes(app, repack)

    async def unknown_verb(request: web.Request) -> web.Response:
        verb = request.match_info["verb"]
        return _error(
            404, f"unknown extender verb {verb!r}: use filter, prioritize, bind or preempt"
        )

    app.router.add_post(f"{prefix}/{{verb:.*}}", unknown_verb)

    async def nodes(_: web.Request) -> web.Response:
        return web.Response(body=msgspec.json.encode(nodes_view(service)), content_type=JSON)

    async def reservations(_: web.Request) -> web.Response:
        now = service.clock()
        view = [
            {
                "pod": r.key,
                "uid": r.uid,
                "node": r.node,
                "age_seconds": round(now - r.created_at, 3),
                # seconds since the pod left Pending, waiting for a report to count it
                "handed_over_seconds": (
                    None if r.handed_over_at is None else round(now - r.handed_over_at, 3)
                ),
            }
            for r in sorted(service.ledger.reservations(), key=lambda r: r.key)
        ]
        return web.Response(body=msgspec.json.encode(view), content_type=JSON)

    async def explain(request: web.Request) -> web.Response:
        pod = request.query.get("pod", "")
        if pod.count("/") != 1 or not all(pod.split("/")):
            return _error(400, "give the pod as ?pod=NAMESPACE/NAME")
        found = service.explain.explain(pod, service.wall())
        if found is None:
            return _error(404, f"no recent decision for pod {pod}")
        return web.Response(body=msgspec.json.encode(found), content_type=JSON)

    app.router.add_get("/api/v1/nodes", nodes)
    app.router.add_get("/api/v1/reservations", reservations)
    app.router.add_get("/api/v1/explain", explain)

    async def history(request: web.Request) -> web.StreamResponse:
        settings = service.settings
        head = msgspec.json.encode(
            {
                "now": service.wall(),
                "stale_after_seconds": settings.stale_after,
                "stale_policy": settings.stale_policy.value,
                "threshold": settings.threshold,
            }
        )
        # Streamed a few nodes at a time, so that what one request holds stays small whatever
        # the number of nodes (docs/architecture.md#observability).
        response = web.StreamResponse(headers={"Content-Type": JSON})
        await response.prepare(request)
        await response.write(head[:-1] + b',"nodes":{')
        for i, chunk in enumerate(service.history.json_chunks()):
            await response.write(b"," + chunk if i else chunk)
        await response.write(b"}}")
        await response.write_eof()
        return response

    async def model(_: web.Request) -> web.Response:
        table = service.table
        view = model_view(table.reports(), service.clock(), table.is_fresh)
        return web.Response(body=msgspec.json.encode(view), content_type=JSON)

    async def dashboard(_: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    described = msgspec.json.encode(build_openapi(prefix))

    async def openapi(_: web.Request) -> web.Response:
        return web.Response(body=described, content_type=JSON)

    app.router.add_get("/api/v1/history", history)
    app.router.add_get("/api/v1/model", model)
    app.router.add_get(OPENAPI_PATH, openapi)
    app.router.add_get("/", dashboard)
    app.router.add_static("/static/", STATIC)
    add_ops_routes(app, service.metrics.registry, service.readiness.reason)
    return app


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=msgspec.json.encode(body), content_type=JSON)


def add_repack_routes(app: web.Application, repack: RepackService | None) -> None:
    """``POST /repack`` and the repack API; 404 with a reason when repacking is off."""
    off = "repacking is off in this extender (--repack-mode off)"

    async def run_now(request: web.Request) -> web.Response:
        if repack is None:
            return _error(404, off)
        try:
            async with read_body(request, MAX_REQUEST_BYTES, request.app[BUDGET]) as body:
                ask = parse_run_request(body, repack.settings.max_time_limit)
        except BodyRefused as exc:
            return _refused(request, exc.status, f"repack: {exc}")
        except ValueError as exc:
            return _refused(request, 400, f"repack: {exc}")
        try:
            record = await repack.run(
                TRIGGER_HTTP, time_limit=ask.time_limit, dry_run=ask.dry_run, mode=ask.mode
            )
        except RunInProgress as exc:
            return _error(409, f"repack: {exc}; retry when it has finished")
        assert record is not None  # only automatic runs skip an unchanged state
        if record.plan is None:
            return _json({"Error": f"repack: {record.error}", "run": record.to_dict()}, 500)
        return _json(record.to_dict())

    async def plans(request: web.Request) -> web.Response:
        if repack is None:
            return _error(404, off)
        raw = request.query.get("limit")
        limit = None
        if raw is not None:
            try:
                limit = int(raw)
            except ValueError:
                limit = -1
            if limit < 1:
                return _error(400, "limit must be a positive integer")
        return _json(repack.plans(limit))

    async def state(_: web.Request) -> web.Response:
        if repack is None:
            return _error(404, off)
        return _json(repack.status())

    app.router.add_post("/repack", run_now)
    app.router.add_get("/api/v1/repack/plans", plans)
    app.router.add_get("/api/v1/repack", state)


def nodes_view(service: ExtenderService) -> list[dict[str, Any]]:
    now = service.clock()
    table = service.table
    reserved = table.reserved_counts()
    reports = {r.node: r for r in table.reports()}
    view: list[dict[str, Any]] = []
    for name in sorted(set(reports) | set(reserved)):
        r = reports.get(name)
        held = reserved.get(name, 0)
        if r is None:
            view.append({"name": name, "reserved": held, "stale": True, "reported": False})
            continue
        age = max(0.0, now - r.received_at)
        view.append(
            {
                "name": name,
                # what the filter decides this node by: its per-class fits, or avail − reserved
                "decided_by": "class" if r.classes is not None else "avail",
                "avail": r.avail,
                "reserved": held,
                "free": r.avail - held,
                "k": r.k,
                "capacity": r.capacity,
                "per_pod_cost": r.per_pod_cost,
                "pods": r.pods,
                "mode": r.mode,
                "data_age_seconds": round(age, 3),
                "stale": age >= table.thresholds.stale_after,
                "reported": True,
                "sequence": r.sequence,
                "health": {
                    "psi_available": r.psi_available,
                    "churn_hold": r.churn_hold,
                    "model_age_seconds": r.model_age_seconds,
                    "global_model": r.global_model,
                    "samples_missing": r.samples_missing,
                },
                "classes": _classes_view(r.classes),
            }
        )
    return view


def _classes_view(c: NodeClasses | None) -> dict[str, Any] | None:
    """A node's per-class data as the dashboard shows it (None: an agent without it)."""
    if c is None:
        return None
    return {
        "full_level": c.full_level,
        "headroom": dict(zip(c.feature_names, map(float, c.headroom), strict=True)),
        "cores": c.cores,
        "memory_bytes": c.memory_bytes,
        "classes": [
            {
                "class": name,
                "pods": c.pods.get(name, 0),
                "cpu_cores": fp.footprint.cpu,
                "memory_bytes": fp.footprint.memory,
                "source": fp.source,
            }
            for name, fp in sorted(c.classes.items())
        ],
    }


@dataclass
class HttpServer:
    runner: web.AppRunner
    port: int

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_http(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> HttpServer:
    """Serve ``app`` on ``host:port`` (0 picks a free port) until ``close()``."""
    # Bodies are decompressed by ``bodies.read_body``, within the limit, not by aiohttp.
    runner = web.AppRunner(app, access_log=None, auto_decompress=False, logger=_PROTOCOL_LOG)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context, backlog=1024)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    bound = int(sockets[0].getsockname()[1]) if sockets else port
    return HttpServer(runner, bound)
