"""``GET /api/v1/openapi.json`` describes exactly the routes the app registers, with the request
and reply schemas of the very types the server decodes."""

from __future__ import annotations

import msgspec
from aiohttp import web

from scheduler_ext import wire
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.http_server import build_app
from scheduler_ext.openapi import REF, build_openapi
from scheduler_ext.service import ExtenderService

from .conftest import Extender


def _routes(app: web.Application) -> set[tuple[str, str]]:
    found = set()
    for route in app.router.routes():
        if route.method == "HEAD":  # aiohttp adds one to every GET
            continue
        resource = route.resource
        assert resource is not None
        path = resource.canonical
        if isinstance(resource, web.StaticResource):
            path += "/{filename}"
        found.add((route.method.lower(), path.replace("{verb:.*}", "{verb}")))
    return found


def _described(doc: dict[str, object]) -> set[tuple[str, str]]:
    paths = doc["paths"]
    assert isinstance(paths, dict)
    return {(method, path) for path, ops in paths.items() for method in ops}


async def test_the_served_description_matches_the_registered_routes(extender: Extender) -> None:
    status, doc = await extender.get("/api/v1/openapi.json")
    assert status == 200
    app = extender.http.runner.app
    assert _described(doc) == _routes(app)
    # the verbs' bodies are the wire types' own schemas
    filter_op = doc["paths"]["/scheduler/filter"]["post"]
    ref = filter_op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/ExtenderArgs"
    _, components = msgspec.json.schema_components([wire.ExtenderArgs], ref_template=REF)
    assert doc["components"]["schemas"]["Pod"] == msgspec.json.decode(
        msgspec.json.encode(components["Pod"])
    )


def test_another_prefix_is_described_under_that_prefix() -> None:
    app = build_app(ExtenderService(InMemoryCluster()), prefix="/carico/")
    doc = build_openapi("/carico")
    assert _described(doc) == _routes(app)
    assert "/carico/bind" in doc["paths"] and "/scheduler/bind" not in doc["paths"]
