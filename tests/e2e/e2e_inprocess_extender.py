"""The Carico extender served from the test process, for e2e tests that drive its parts directly.

``InProcessExtender`` runs the real ``ExtenderService`` with the real ``KubernetesCluster`` and
the real aiohttp app (``build_app`` / ``start_http``) on a free loopback port, in an event loop
on its own thread, so kube-scheduler calls it over HTTP exactly as it calls the subprocess
extender; the test can additionally run coroutines on that loop (``call``), which is how the
repack executor is handed a plan. No capacity reports are fed: with the default fail-open policy
every node passes on capacity, so only plan slots (and kube-scheduler's own filters) decide.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from e2e_controlplane import wait_for
from e2e_extender import metric_sample

from scheduler_ext.http_server import HttpServer, build_app, start_http
from scheduler_ext.kube import KubernetesCluster
from scheduler_ext.service import ExtenderService

T = TypeVar("T")


class InProcessExtender:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="ext")
        self.service: ExtenderService | None = None
        self._http: HttpServer | None = None
        self._background: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url_prefix(self) -> str:
        return f"{self.base}/scheduler"

    def call(self, make: Callable[[], Awaitable[T]], timeout_s: float = 300.0) -> T:
        """Run ``make()`` on the extender's loop and wait for its result."""

        async def wrapped() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result(timeout_s)

    def start(self) -> None:
        self._thread.start()

        async def setup() -> None:
            self.service = ExtenderService(KubernetesCluster(str(self.kubeconfig)))
            self.service.readiness.capacity_listening = True  # no agents in this bed
            self._http = await start_http(build_app(self.service), "127.0.0.1", 0)
            self.port = self._http.port
            self._background = asyncio.create_task(self.service.run_background(0.5))

        self.call(setup, 60)
        wait_for(lambda: self.svc.readiness.ledger_rebuilt, 60, "extender ledger rebuilt")

    @property
    def svc(self) -> ExtenderService:
        assert self.service is not None
        return self.service

    def stop(self) -> None:
        async def teardown() -> None:
            if self._background is not None:
                self._background.cancel()
                await asyncio.gather(self._background, return_exceptions=True)
            if self._http is not None:
                await self._http.close()
            await self.svc.cluster.close()

        try:
            self.call(teardown, 30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def metric(self, name: str) -> float | None:
        """One sample of ``/metrics`` over HTTP (None when absent)."""
        return metric_sample(self.base, name)

    def filter(self, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
        """POST a filter call for ``pod`` as kube-scheduler would (nodeCacheCapable form)."""
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": nodes}).encode()
        req = urllib.request.Request(
            f"{self.url_prefix}/filter", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            reply: dict[str, Any] = json.loads(resp.read())
            return reply
