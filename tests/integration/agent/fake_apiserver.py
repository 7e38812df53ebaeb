"""A fake Kubernetes API server for the pod list/watch calls only (a fake: the real control plane
joins the end-to-end suite). Serves ``GET /api/v1/pods`` as a list, or as a chunked watch stream of
JSON lines with ``watch=true``; tests change pods, expire watches (410) and inspect the requests.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web


def pod(uid: str, phase: str = "Running", owner: str | None = "ReplicaSet") -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": uid, "namespace": "default"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "uid": "o", "apiVersion": "v1"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": {"phase": phase}}


class FakeApiServer:
    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.rv = 100
        self.requests: list[dict[str, str]] = []
        self._watchers: list[asyncio.Queue[dict[str, Any] | None]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._pods)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for q in self._watchers:
            q.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    def put(self, obj: dict[str, Any], event: str | None = None) -> None:
        """Create or update a pod; ``event`` None changes state without telling any watcher."""
        self._stamp(obj)
        uid = obj["metadata"]["uid"]
        kind = event or ("MODIFIED" if uid in self.pods else "ADDED")
        self.pods[uid] = obj
        if event != "silent":
            self._send({"type": kind, "object": obj})

    def delete(self, uid: str, silent: bool = False) -> None:
        obj = self._stamp(self.pods.pop(uid))
        if not silent:
            self._send({"type": "DELETED", "object": obj})

    def expire_watches(self) -> None:
        status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        self._send({"type": "ERROR", "object": status})

    def _send(self, event: dict[str, Any]) -> None:
        for q in self._watchers:
            q.put_nowait(event)

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(dict(request.query))
        if request.query.get("watch") not in ("true", "1", "True"):
            return web.json_response(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": list(self.pods.values()),
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._watchers.append(queue)
        try:
            while (event := await queue.get()) is not None:
                await resp.write(json.dumps(event).encode() + b"\n")
                if event["type"] == "ERROR":
                    break
        finally:
            self._watchers.remove(queue)
        await resp.write_eof()
        return resp
