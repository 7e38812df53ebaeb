"""A real extender (aiohttp and gRPC on 127.0.0.1, free ports) for the fuzz tests, with the
repacker on, over an in-memory cluster; started on a :class:`conftest.LoopThread`.

Its clock is a fixed number (reservations never expire and data never ages during a run), so two
state snapshots differ only when a request changed something.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from protos.carico.v1 import capacity_pb2
from scheduler_ext.cluster import InMemoryCluster
from scheduler_ext.grpc_server import GrpcServer, start_grpc
from scheduler_ext.http_server import BUDGET, HttpServer, build_app, start_http
from scheduler_ext.repack.service import RepackService, RepackSettings
from scheduler_ext.service import ExtenderService

PAYLOADS = Path(__file__).parents[1] / "integration" / "extender" / "payloads"
POD = json.loads((PAYLOADS / "pod.json").read_text())
NODE = json.loads((PAYLOADS / "node.json").read_text().replace("NODE_NAME", "n1"))
NODES = ("n1", "n2", "n3")
MAX_BODY = 64 << 10  # small, so that oversized bodies cost little to send
TIMEOUT = 10.0  # seconds a request may take before it counts as a hang


T = TypeVar("T")


class LoopThread:
    """An asyncio loop running in a daemon thread; :meth:`run` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="servers")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.run(self._cancel_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    @staticmethod
    async def _cancel_rest() -> None:
        """Cancel what the servers left running (connections closing) and let it unwind."""
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)


class ErrorRecords(logging.Handler):
    """Every record at ERROR or above, from any logger: a server's traceback (its own or
    aiohttp's "Error handling request") is a failure even when the client never sees a 500."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


class FixedClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def node_report(node: str, avail: float, sequence: int) -> capacity_pb2.NodeCapacity:
    msg = capacity_pb2.NodeCapacity(
        node=node,
        avail=avail,
        k=avail * 0.1,
        capacity=2.0,
        per_pod_cost=0.1,
        pods=3,
        mode=capacity_pb2.CAPACITY_MODE_LIVE,
        sequence=sequence,
        timestamp=1.7e9,
    )
    msg.health.psi_available = True
    return msg


@dataclass
class Extender:
    service: ExtenderService
    repack: RepackService
    http: HttpServer
    grpc: GrpcServer
    pool: ThreadPoolExecutor
    error_log: ErrorRecords

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc.port}"

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """One request on a new connection; a hang past TIMEOUT raises ``TimeoutError``."""
        conn = http.client.HTTPConnection("127.0.0.1", self.http.port, timeout=TIMEOUT)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def raw(self, data: bytes) -> bytes:
        """Send ``data`` as is, close the sending side, and return all the server answered."""
        with socket.create_connection(("127.0.0.1", self.http.port), timeout=TIMEOUT) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)

    def state(self) -> dict[str, Any]:
        """What a refused input must leave as it was: the JSON API's nodes and reservations, the
        ledger, the cluster's bindings, the explained decisions and the repacker's plans."""
        views = {}
        for path in ("/api/v1/nodes", "/api/v1/reservations", "/api/v1/repack/plans"):
            status, body = self.request("GET", path)
            assert status == 200, (path, body[:200])
            views[path] = json.loads(body)
        return {
            **views,
            "open": self.service.ledger.open_count(),
            "bindings": len(self.service.cluster.bindings)
            if isinstance(self.service.cluster, InMemoryCluster)
            else None,
            "explained": len(self.service.explain),
        }

    def settled(self) -> int:
        """The request bytes still held once the server has finished with the last request (a
        handler may still be unwinding when its client has already gone)."""
        budget = self.http.runner.app[BUDGET]
        deadline = time.monotonic() + TIMEOUT
        while budget.held and time.monotonic() < deadline:
            time.sleep(0.005)
        return budget.held

    def failures(self) -> tuple[float, list[str]]:
        """The requests answered (or dropped) as the extender's own failure so far (outcome
        ``error`` of filter, prioritize and preempt; bind counts a refusal of the API server
        so too, and logs its own failures), and what was logged at ERROR since the last call."""
        registry = self.service.metrics.registry
        errors = sum(
            registry.get_sample_value(
                "carico_extender_requests_total", {"verb": verb, "outcome": "error"}
            )
            or 0.0
            for verb in ("filter", "prioritize", "preempt")
        )
        records, self.error_log.records[:] = list(self.error_log.records), []
        return errors, records


async def start_extender(error_log: ErrorRecords) -> Extender:
    clock = FixedClock()
    service = ExtenderService(InMemoryCluster(), clock=clock, wall=clock)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solve")
    repack = RepackService(
        # one CP-SAT worker and a short budget: an empty cluster solves at once anyway
        RepackSettings(time_limit=1.0, max_time_limit=2.0, workers=1),
        service.cluster.list_for_repack,  # type: ignore[attr-defined]
        service.metrics,
        executor=lambda: pool,
        clock=clock,
        wall=clock,
    )
    grpc_server = await start_grpc(service, "127.0.0.1:0")
    service.readiness.capacity_listening = True
    app = build_app(service, max_body=MAX_BODY, repack=repack)
    http = await start_http(app, "127.0.0.1", 0)
    for i, node in enumerate(NODES):
        outcome, why = service.ingest(node_report(node, 5.0 + i, 1), object())
        assert outcome.value == "accepted", why
    return Extender(service, repack, http, grpc_server, pool, error_log)


async def stop_extender(ext: Extender) -> None:
    await ext.repack.close()
    await ext.http.close()
    await ext.grpc.close(None)
    ext.pool.shutdown(wait=True)
