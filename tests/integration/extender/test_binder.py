"""``scheduler_ext.apiclient.Binder`` against a real HTTP server on 127.0.0.1 standing in for the
API server's binding subresource: what it sends, how refusals and dead servers reach the caller,
and that bindings share kept-alive connections. (The real API server's answers are covered by
tests/e2e/test_kube_cluster.py.)"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kubernetes import client

from scheduler_ext.apiclient import Binder, binding_body, status_message
from scheduler_ext.cluster import BindError


def test_binding_body_names_the_pod_the_node_and_the_uid_when_known() -> None:
    body = json.loads(binding_body("ns", "p", "u-1", "n-1"))
    assert body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n-1"},
    }
    assert "uid" not in json.loads(binding_body("ns", "p", "", "n-1"))["metadata"]


def test_status_message_prefers_the_servers_words() -> None:
    status = {"kind": "Status", "reason": "Conflict", "message": "already assigned", "code": 409}
    assert status_message(409, json.dumps(status).encode()) == "409 Conflict: already assigned"
    assert status_message(500, b"{not json") == "500 b'{not json'"
    assert status_message(403, b'{"kind":"Status"}') == '403 b\'{"kind":"Status"}\''


class FakeApi:
    """Records each binding and answers as told; counts the connections made to it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], str]] = []
        self.answer: tuple[int, dict[str, Any]] = (201, {"kind": "Status", "status": "Success"})
        self.peers: set[Any] = set()

    async def bind(self, request: web.Request) -> web.Response:
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        self.seen.append(
            (request.path, await request.json(), request.headers.get("Authorization", ""))
        )
        status, body = self.answer
        return web.json_response(body, status=status)


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeApi, str]]:
    fake = FakeApi()
    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", fake.bind)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield fake, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def _configuration(host: str, token: str = "t0k3n") -> client.Configuration:
    c = client.Configuration()
    c.host = host
    c.api_key = {"BearerToken": token}
    c.api_key_prefix = {"BearerToken": "Bearer"}
    return c


async def test_binds_with_the_token_over_kept_alive_connections(
    api: tuple[FakeApi, str],
) -> None:
    fake, host = api
    binder = Binder(_configuration(host), connections=2)
    try:
        for i in range(10):
            await binder.bind("ns", f"pod-{i}", f"uid-{i}", "node-a")
    finally:
        await binder.close()
    assert [path for path, _, _ in fake.seen] == [
        f"/api/v1/namespaces/ns/pods/pod-{i}/binding" for i in range(10)
    ]
    assert fake.seen[3][1]["metadata"] == {"name": "pod-3", "namespace": "ns", "uid": "uid-3"}
    assert fake.seen[3][1]["target"]["name"] == "node-a"
    assert {auth for _, _, auth in fake.seen} == {"Bearer t0k3n"}
    # one after another: a single connection carries them all
    assert len(fake.peers) == 1


async def test_a_refused_binding_raises_the_servers_message(api: tuple[FakeApi, str]) -> None:
    fake, host = api
    fake.answer = (
        409,
        {"kind": "Status", "reason": "Conflict", "message": 'pod "p" is already assigned'},
    )
    binder = Binder(_configuration(host))
    try:
        with pytest.raises(BindError) as err:
            await binder.bind("ns", "p", "", "node-b")
    finally:
        await binder.close()
    assert str(err.value) == (
        'binding ns/p to node-b failed: 409 Conflict: pod "p" is already assigned'
    )


async def test_an_unreachable_server_is_a_bind_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    binder = Binder(_configuration(f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(BindError, match="binding ns/p to n failed: ClientConnectorError"):
            await binder.bind("ns", "p", "", "n")
    finally:
        await binder.close()
