"""The OpenAPI description of the extender's HTTP API, served at ``GET /api/v1/openapi.json``.

The request and reply bodies of the extender verbs are described by the very msgspec types the
server decodes and encodes (``wire``), so the description cannot drift from what is accepted; the
rest (the JSON API, ``POST /repack``, the ops endpoints) is written here. A test checks that every
route the aiohttp app registers is described and nothing else, and the HTTP fuzz tests generate
their payloads from this document (docs/architecture.md#extender-protocol).

Neighbours: ``http_server`` (serves it and registers the routes it describes), ``wire`` (types).
"""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler_ext import wire
from scheduler_ext.repack.request import RUN_MODES

REF = "#/components/schemas/{name}"
OPENAPI_PATH = "/api/v1/openapi.json"

# The body of POST /repack (``repack.request.parse_run_request`` checks it by hand: it must
# refuse unknown fields, which the wire types of the verbs deliberately skip).
RUN_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "time_limit": {"type": "number", "exclusiveMinimum": 0},
        "dry_run": {"type": "boolean"},
        "mode": {"enum": list(RUN_MODES)},
    },
    "additionalProperties": False,
}
_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"Error": {"type": "string"}},
    "required": ["Error"],
}
_ANY_JSON: dict[str, Any] = {"content": {"application/json": {"schema": {}}}}


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _refusals(*statuses: int) -> dict[str, Any]:
    reasons = {
        400: "the body or a parameter is unusable; Error says why",
        404: "nothing of the kind (or repacking is off); Error says why",
        409: "a repack is already running",
        413: "the body is larger than the limit",
        415: "unsupported Content-Encoding",
        500: "the extender failed; see its log",
        503: "the extender holds its limit of request bodies already; retry",
    }
    return {
        str(s): {"description": reasons[s], **_json_body({"$ref": REF.format(name="Error")})}
        for s in statuses
    }


def _get(summary: str, *refusals: int, params: list[dict[str, Any]] | None = None) -> Any:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {"200": {"description": "OK", **_ANY_JSON}, **_refusals(*refusals)},
    }
    if params:
        op["parameters"] = params
    return {"get": op}


def _ops(summary: str) -> Any:
    text = {"content": {"text/plain": {"schema": {"type": "string"}}}}
    return {
        "get": {
            "summary": summary,
            "responses": {
                "200": {"description": "OK", **text},
                "503": {"description": "not so; the text says why", **text},
            },
        }
    }


def build_openapi(prefix: str) -> dict[str, Any]:
    """The description of an app built with ``http_server.build_app(prefix=prefix)``."""
    # (request, reply) types; filter's reply is one of two shapes (msgspec describes a union of
    # untagged structs only one by one, so the anyOf is made here).
    verbs: dict[str, tuple[Any, ...]] = {
        "filter": (wire.ExtenderArgs, wire.FilterResultNames, wire.FilterResultNodes),
        "prioritize": (wire.ExtenderArgs, list[wire.HostPriority]),
        "bind": (wire.ExtenderBindingArgs, wire.BindingResult),
        "preempt": (wire.ExtenderPreemptionArgs, wire.PreemptionResult),
    }
    types = [t for group in verbs.values() for t in group]
    refs, components = msgspec.json.schema_components(types, ref_template=REF)
    components["Error"] = _ERROR_SCHEMA
    components["RunRequest"] = RUN_REQUEST_SCHEMA
    paths: dict[str, Any] = {}
    at = 0
    for verb, group in verbs.items():
        request, replies = refs[at], refs[at + 1 : at + len(group)]
        at += len(group)
        reply = replies[0] if len(replies) == 1 else {"anyOf": replies}
        paths[f"{prefix}/{verb}"] = {
            "post": {
                "summary": f"kube-scheduler extender v1: {verb}",
                "requestBody": {"required": True, **_json_body(request)},
                "responses": {
                    "200": {"description": "the extender's answer", **_json_body(reply)},
                    **_refusals(400, 413, 415, 500, 503),
                },
            }
        }
    pod = {"name": "pod", "in": "query", "required": True, "schema": {"type": "string"}}
    limit = {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}}
    paths.update(
        {
            "/api/v1/nodes": _get("the capacity table with reservations and data age"),
            "/api/v1/reservations": _get("the open reservations"),
            "/api/v1/explain": _get("a pod's last decisions", 400, 404, params=[pod]),
            "/api/v1/history": _get("each node's recent avail and reserved"),
            "/api/v1/model": _get("the global model's expected workload as reported"),
            "/api/v1/repack": _get("the repacker's mode and trigger state", 404),
            "/api/v1/repack/plans": _get("the last plans, newest first", 400, 404, params=[limit]),
            OPENAPI_PATH: _get("this description"),
            "/repack": {
                "post": {
                    "summary": "compute a repacking plan now",
                    "requestBody": {
                        "required": False,
                        **_json_body({"$ref": REF.format(name="RunRequest")}),
                    },
                    "responses": {
                        "200": {"description": "the run and its plan", **_ANY_JSON},
                        **_refusals(400, 404, 409, 413, 415, 500, 503),
                    },
                }
            },
            f"{prefix}/{{verb}}": {
                "post": {
                    "summary": "any other extender verb",
                    "parameters": [{**pod, "name": "verb", "in": "path"}],
                    "responses": _refusals(404),
                }
            },
            "/": _get("the dashboard (HTML)"),
            "/static/{filename}": _get("the dashboard's files", 404),
            "/metrics": _get("Prometheus metrics (text)"),
            "/healthz": _ops("liveness"),
            "/readyz": _ops("readiness"),
        }
    )
    return {
        "openapi": "3.1.0",
        "info": {"title": "Carico scheduler extender", "version": "v1"},
        "paths": paths,
        "components": {"schemas": components},
    }
