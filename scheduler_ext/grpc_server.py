"""The extender's gRPC transport: the ``CapacityIngest`` service the node agents stream into.

Each ``Report`` stream is one agent connection; its reports go to the capacity table in order. A
refused report (invalid, duplicate, out of order) is counted and skipped — the stream stays open,
because one bad sample must not cut a node off — and the final ``ReportSummary`` says how many were
accepted and refused and why the last one was refused. A report that does not even parse as a
``NodeCapacity`` is refused the same way (without the servicer parsing reports itself, gRPC would
end the whole stream with ``UNKNOWN``). Optional mTLS via ``carico.tls``.
Neighbours: ``service`` (ingest), ``capacity`` (ordering and validation rules), ``cli``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError

from protos.carico.v1 import capacity_pb2
from scheduler_ext.capacity import Ingest
from scheduler_ext.service import ExtenderService

log = logging.getLogger(__name__)


class _Stream:
    """Identity of one report stream (hashable by object identity)."""

    __slots__ = ("peer",)

    def __init__(self, peer: str) -> None:
        self.peer = peer


SERVICE_NAME = "carico.v1.CapacityIngest"


class CapacityIngestServicer:
    """``Report``, registered with the reports as bytes: it parses each one itself."""

    def __init__(self, service: ExtenderService) -> None:
        self.service = service

    async def Report(
        self, request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> capacity_pb2.ReportSummary:
        stream = _Stream(context.peer())
        summary = capacity_pb2.ReportSummary()
        gauge = self.service.metrics.streams
        gauge.inc()
        parse = capacity_pb2.NodeCapacity.FromString
        try:
            async for raw in request_iterator:
                try:
                    msg = parse(raw)
                except DecodeError as exc:
                    summary.rejected += 1
                    summary.last_rejection = f"not a carico.v1.NodeCapacity: {exc}"
                    self.service.metrics.reports.labels(Ingest.INVALID.value).inc()
                    log.warning("from %s: %s", stream.peer, summary.last_rejection)
                    continue
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


# ``CapacityIngest.Report``: the stream of a node's reports, each as bytes, to its summary.
ReportMethod = Callable[
    [AsyncIterator[bytes], grpc.aio.ServicerContext], Awaitable[capacity_pb2.ReportSummary]
]


async def start_grpc(
    service: ExtenderService,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
) -> GrpcServer:
    """Serve CapacityIngest on ``address`` (``host:0`` picks a free port)."""
    return await serve_report(CapacityIngestServicer(service).Report, address, credentials)


async def serve_report(
    report: ReportMethod, address: str, credentials: grpc.ServerCredentials | None = None
) -> GrpcServer:
    """Serve ``report`` as CapacityIngest's ``Report`` on ``address`` (the extender's, or a
    benchmark's baseline on the same server)."""
    server = grpc.aio.server()
    handler: grpc.RpcMethodHandler = grpc.stream_unary_rpc_method_handler(
        report,
        request_deserializer=None,  # bytes: Report parses (and refuses) each report itself
        response_serializer=capacity_pb2.ReportSummary.SerializeToString,
    )
    handlers = {"Report": handler}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    if credentials is not None:
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen for gRPC on {address}")
    await server.start()
    return GrpcServer(server, port)
