"""The extender's gRPC transport: the ``CapacityIngest`` service the node agents stream into.

Each ``Report`` stream is one agent connection; its reports go to the capacity table in order. A
refused report (invalid, duplicate, out of order) is counted and skipped — the stream stays open,
because one bad sample must not cut a node off — and the final ``ReportSummary`` says how many were
accepted and refused and why the last one was refused. Optional mTLS via ``carico.tls``.
Neighbours: ``service`` (ingest), ``capacity`` (ordering and validation rules), ``cli``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from protos.carico.v1 import capacity_pb2, capacity_pb2_grpc
from scheduler_ext.capacity import Ingest
from scheduler_ext.service import ExtenderService

log = logging.getLogger(__name__)


class _Stream:
    """Identity of one report stream (hashable by object identity)."""

    __slots__ = ("peer",)

    def __init__(self, peer: str) -> None:
        self.peer = peer


class CapacityIngestServicer(capacity_pb2_grpc.CapacityIngestServicer):
    def __init__(self, service: ExtenderService) -> None:
        self.service = service

    async def Report(
        self,
        request_iterator: AsyncIterator[capacity_pb2.NodeCapacity],
        context: grpc.aio.ServicerContext,
    ) -> capacity_pb2.ReportSummary:
        stream = _Stream(context.peer())
        summary = capacity_pb2.ReportSummary()
        gauge = self.service.metrics.streams
        gauge.inc()
        try:
            async for msg in request_iterator:
                outcome, why = self.service.ingest(msg, stream)
                if outcome is Ingest.ACCEPTED:
                    summary.accepted += 1
                    summary.last_sequence = msg.sequence
                else:
                    summary.rejected += 1
                    summary.last_rejection = why
                    if outcome is Ingest.INVALID:
                        log.warning("from %s: %s", stream.peer, why)
        finally:
            gauge.dec()
        return summary


@dataclass
class GrpcServer:
    server: grpc.aio.Server
    port: int

    async def close(self, grace: float | None = 1.0) -> None:
        await self.server.stop(grace)


async def start_grpc(
    service: ExtenderService,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
) -> GrpcServer:
    """Serve CapacityIngest on ``address`` (``host:0`` picks a free port)."""
    server = grpc.aio.server()
    capacity_pb2_grpc.add_CapacityIngestServicer_to_server(CapacityIngestServicer(service), server)
    if credentials is not None:
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen for gRPC on {address}")
    await server.start()
    return GrpcServer(server, port)
