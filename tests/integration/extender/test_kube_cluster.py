"""KubernetesCluster through the real ``kubernetes`` client against a FAKE API server on loopback.

The fake (aiohttp, below) implements only the three calls the extender makes — list pods, watch
pods, create pods/binding — so the client wiring (kubeconfig, field selectors, resourceVersion,
raw decoding, the binding body, error messages, relisting after 410 Gone) is exercised here. The
behaviour against a real kube-apiserver is covered by the end-to-end suite.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scheduler_ext.cluster import BindError
from scheduler_ext.kube import BOUND_PENDING, KubernetesCluster
from scheduler_ext.ledger import PodState
from scheduler_ext.pods import PodFacts

# Importing the kubernetes client's CoreV1Api alone takes seconds on a busy machine.
pytestmark = pytest.mark.slow


def _pod(name: str, node: str, phase: str = "Pending", rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": phase},
    }


@dataclass
class FakeApiServer:
    """A FAKE kube-apiserver: list/watch pods and pods/binding, scripted by the test."""

    pods: list[dict[str, Any]] = field(default_factory=list)
    list_version: str = "10"
    watch_events: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    bindings: list[dict[str, Any]] = field(default_factory=list)
    binding_status: int = 201

    async def pods_handler(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(("watch" if query.get("watch") else "list", query))
        if not query.get("watch"):
            body = {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": self.list_version},
                "items": self.pods,
            }
            return web.json_response(body)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        while True:
            event = await self.watch_events.get()
            if event is None:  # end this watch as the server's timeout would
                break
            await resp.write(json.dumps(event).encode() + b"\n")
        await resp.write_eof()
        return resp

    async def binding_handler(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bindings.append({"path": request.path, "body": body})
        if self.binding_status != 201:
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": f'pods "{request.match_info["name"]}" is already assigned to node "n0"',
                "reason": "Conflict",
                "code": 409,
            }
            return web.json_response(status, status=self.binding_status)
        return web.json_response({"kind": "Status", "status": "Success", "code": 201}, status=201)


@pytest.fixture
async def fake_api(tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, Path]]:
    fake = FakeApiServer()
    app = web.Application()
    app.router.add_get("/api/v1/pods", fake.pods_handler)
    app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", fake.binding_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    yield fake, kubeconfig
    for _ in range(4):
        fake.watch_events.put_nowait(None)  # let open watches end
    await runner.cleanup()


async def test_bind_posts_the_binding_and_reports_conflicts(
    fake_api: tuple[FakeApiServer, Path],
) -> None:
    fake, kubeconfig = fake_api
    cluster = KubernetesCluster(str(kubeconfig), workers=2)
    try:
        await cluster.bind(PodFacts("shop", "web-1", "uid-1"), "n7")
        assert fake.bindings == [
            {
                "path": "/api/v1/namespaces/shop/pods/web-1/binding",
                "body": {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": "web-1", "namespace": "shop", "uid": "uid-1"},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": "n7"},
                },
            }
        ]
        fake.binding_status = 409
        with pytest.raises(BindError) as info:
            await cluster.bind(PodFacts("shop", "web-2", "uid-2"), "n7")
        assert str(info.value) == (
            'binding shop/web-2 to n7 failed: 409 Conflict: pods "web-2" is already assigned'
            ' to node "n0"'
        )
    finally:
        await cluster.close()


async def test_list_then_watch_and_relist_after_gone(
    fake_api: tuple[FakeApiServer, Path],
) -> None:
    fake, kubeconfig = fake_api
    fake.pods = [_pod("a", "n1"), _pod("b", "n2")]
    lists: list[list[PodState]] = []
    events: list[PodState] = []
    got = asyncio.Event()

    def on_list(pods: list[PodState]) -> None:
        lists.append(pods)
        got.set()

    def on_event(pod: PodState) -> None:
        events.append(pod)
        got.set()

    async def until(predicate: Any) -> None:
        async with asyncio.timeout(20):  # generous: the client runs in threads on a busy box
            while not predicate():
                got.clear()
                await got.wait()

    cluster = KubernetesCluster(str(kubeconfig), workers=2)
    task = asyncio.create_task(cluster.run_pod_watch(on_list, on_event))
    try:
        await until(lambda: len(lists) == 1)
        assert [(p.facts.key, p.node, p.phase) for p in lists[0]] == [
            ("shop/a", "n1", "Pending"),
            ("shop/b", "n2", "Pending"),
        ]
        await fake.watch_events.put({"type": "ADDED", "object": _pod("c", "n1", rv="11")})
        # Leaving the selection (Running) arrives as DELETED with the new state.
        await fake.watch_events.put(
            {"type": "DELETED", "object": _pod("a", "n1", "Running", rv="12")}
        )
        await until(lambda: len(events) == 2)
        assert [(e.facts.key, e.phase, e.deleted) for e in events] == [
            ("shop/c", "Pending", False),
            ("shop/a", "Running", True),
        ]
        kinds = [
            (kind, q.get("fieldSelector"), q.get("resourceVersion")) for kind, q in fake.requests
        ]
        assert kinds[:2] == [("list", BOUND_PENDING, None), ("watch", BOUND_PENDING, "10")]
        # The watch history expired: the cluster must relist, then watch from the new version.
        fake.pods = [_pod("c", "n1")]
        fake.list_version = "20"
        gone = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
        await fake.watch_events.put({"type": "ERROR", "object": gone, "message": "too old"})
        await until(lambda: len(lists) == 2)
        assert [p.facts.key for p in lists[1]] == ["shop/c"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cluster.close()
