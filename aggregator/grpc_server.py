"""The gRPC transport of the aggregator: serves ``carico.v1.Aggregator`` (grpc.aio).

Two methods with one front: ``Exchange`` (unary: a model in, the global model out) and
``ExchangeStream`` (one long-lived stream per agent: every model read is answered by exactly one
global model, in order). Both parse, validate, answer and count each model alike (one exchange
outcome and one latency observation per model); a refused model ends a stream with the status the
unary call would have got, so an agent sees the same ``INVALID_ARGUMENT`` either way. The stream
exists because grpc.aio spends several times more CPU per unary call than per message on an open
stream, which decides how many agents one machine can serve.

The methods are registered by hand instead of through the generated servicer so that the reply
goes out as the service's cached, already serialised bytes (no per-call serialisation) and so that
a request that does not even parse is answered ``INVALID_ARGUMENT`` like any other bad model.
Oversized messages are refused by gRPC itself (``RESOURCE_EXHAUSTED``, which also ends a stream)
through ``grpc.max_receive_message_length``, as soon as their length prefix arrives, so they are
never buffered. No handler sees them, so ``Exchange`` is registered as a stream-unary method: it
reads its one request itself, and a call that ends before its request arrived is counted as
outcome ``too_large`` (the only other way to get there is a client that cancels before sending,
which a unary client cannot do but within the round trip). A stream counts the same when it ends
before its first message; a refusal later on a stream looks, to the server, exactly like the
client cancelling it (gRPC tells the handler neither) and is not counted
(docs/architecture.md#failure-behaviour). Stopping (:func:`stop_grpc_server`) ends the open
streams at once with ``UNAVAILABLE``, their agents open new ones, while unary calls in flight get
the grace period.

The handlers serve any *front*: the single-process ``AggregatorService``, or a
``worker.WorkerFront`` of a multi-process aggregator, whose answer may have to wait for the merger
(an awaitable).

Neighbours: ``service`` and ``worker`` do the work; ``grpc_client`` is the other end of a parent
link (unary: one call a second); ``cli`` and ``worker`` start this server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf.message import DecodeError

from aggregator.metrics import AggregatorMetrics
from aggregator.service import ExchangeRefused
from carico.tls import grpc_server_credentials
from protos.carico.v1 import aggregator_pb2

SERVICE_NAME = "carico.v1.Aggregator"
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20

_CODES = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "over_capacity": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
}


class ExchangeFront(Protocol):
    """What the handler needs: the metrics it records into and the answer to a parsed request."""

    @property
    def metrics(self) -> AggregatorMetrics: ...

    def answer(
        self, request: aggregator_pb2.LocalModel, raw: bytes
    ) -> bytes | Awaitable[bytes]: ...


class ExchangeContext(Protocol):
    """The part of a call's context an exchange uses (unary and stream contexts alike)."""

    async def abort(self, code: grpc.StatusCode, details: str) -> Any: ...


@dataclass(frozen=True)
class ServerTls:
    """Server certificate and key; with ``client_ca`` clients must present a certificate (mTLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


def _exchange_one(front: ExchangeFront) -> Callable[[bytes, ExchangeContext], Awaitable[bytes]]:
    """One exchange as both methods make it: parse, answer, refuse; one latency per message."""
    metrics = front.metrics
    answer = front.answer
    observe = metrics.exchange_latency.observe
    counts = metrics.exchanges
    parse = aggregator_pb2.LocalModel.FromString
    perf_counter = time.perf_counter

    async def one(request: bytes, context: ExchangeContext) -> bytes:
        start = perf_counter()
        try:
            try:
                message = parse(request)
            except DecodeError as exc:
                counts["invalid"] += 1
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"not a carico.v1.LocalModel: {exc}"
                )
            try:
                reply = answer(message, request)
                if isinstance(reply, bytes):
                    return reply
                return await reply
            except ExchangeRefused as exc:
                await context.abort(_CODES.get(exc.outcome, grpc.StatusCode.INTERNAL), str(exc))
        finally:
            observe(perf_counter() - start)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    return one


def _refused_too_large(front: ExchangeFront, max_message_bytes: int) -> str:
    front.metrics.exchanges["too_large"] += 1
    return (
        f"no message arrived: larger than the limit of {max_message_bytes} bytes "
        "(--max-message-bytes), or the call was cancelled"
    )


def exchange_handler(
    front: ExchangeFront, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
) -> grpc.RpcMethodHandler:
    """``Exchange``: one model in, the serialised global model out."""
    one = _exchange_one(front)
    read_eof = grpc.aio.EOF

    async def exchange(_: object, context: grpc.aio.ServicerContext) -> bytes:
        request = await context.read()
        if request is read_eof:  # gRPC refused it: the status has gone out already
            why = _refused_too_large(front, max_message_bytes)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, why)
        return await one(request, context)

    # No (de)serialisers: the handler parses the request itself and returns ready-made bytes.
    return grpc.stream_unary_rpc_method_handler(exchange)


_STOPPING = "the aggregator is stopping"


class OpenStreams:
    """The ``ExchangeStream`` calls of one server, so that stopping it can end them at once.

    A stream lives as long as its agent, so waiting for streams to finish on their own would always
    take the whole grace period. :meth:`close` ends every stream that waits for its next message
    with ``UNAVAILABLE`` (its agent opens a new one, to another aggregator or to this one once it is
    back); a stream that is busy answering a message sends that reply first, then ends the same way.
    """

    def __init__(self) -> None:
        self.closing = False
        self.waiting: set[asyncio.Task[Any]] = set()  # handlers awaiting their next message

    def close(self) -> None:
        self.closing = True
        for task in list(self.waiting):
            task.cancel(_STOPPING)


def exchange_stream_handler(
    front: ExchangeFront,
    streams: OpenStreams,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> grpc.RpcMethodHandler:
    """``ExchangeStream``: every message read is answered by exactly one reply, in order.

    A refused message ends the stream with the status ``Exchange`` would have answered (the
    metrics count it alike); the stream's earlier models stay as they were.
    """
    one = _exchange_one(front)
    read_eof = grpc.aio.EOF
    waiting = streams.waiting
    metrics = front.metrics

    async def exchange_stream(_: object, context: grpc.aio.ServicerContext) -> None:
        task = asyncio.current_task()
        assert task is not None
        metrics.streams += 1
        first = True
        try:
            while not streams.closing:
                waiting.add(task)
                try:
                    request = await context.read()
                finally:
                    waiting.discard(task)
                if request is read_eof:
                    if first:  # gRPC refused the first message (see the module docstring)
                        _refused_too_large(front, max_message_bytes)
                    return  # or the agent closed its side: end with OK
                first = False
                await context.write(await one(request, context))
        except asyncio.CancelledError as exc:
            if exc.args != (_STOPPING,) or task.cancelling() != 1:
                raise  # gRPC cancelled the call (the peer went away, or the grace ran out)
            task.uncancel()
        finally:
            metrics.streams -= 1
        await context.abort(grpc.StatusCode.UNAVAILABLE, _STOPPING)

    return grpc.stream_stream_rpc_method_handler(exchange_stream)


async def start_grpc_server(
    service: ExchangeFront,
    address: str,
    *,
    tls: ServerTls | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_concurrent_rpcs: int | None = None,
    reuse_port: bool = False,
    streams: OpenStreams | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Start serving on ``address`` (port 0 picks a free one); return the server and its port.

    With ``max_concurrent_rpcs``, calls beyond that many in flight are refused at once with
    ``RESOURCE_EXHAUSTED`` (agents retry on their next round) instead of queueing without bound.
    ``reuse_port`` lets the workers of one multi-process aggregator share the port (the kernel
    spreads connections over them); otherwise two servers never share a port silently.
    ``streams`` (to end them on stop, see :func:`stop_grpc_server`) collects the open streams.

    An open ``ExchangeStream`` counts as one call in flight for as long as it stays open, so with
    streaming agents ``max_concurrent_rpcs`` bounds the agents connected to this process (plus the
    unary calls in flight): a stream beyond it is refused ``RESOURCE_EXHAUSTED`` when it opens and
    its agent tries again after its backoff.
    """
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.so_reuseport", 1 if reuse_port else 0),
        ],
        maximum_concurrent_rpcs=max_concurrent_rpcs,
    )
    handlers = {
        "Exchange": exchange_handler(service, max_message_bytes),
        "ExchangeStream": exchange_stream_handler(
            service, streams or OpenStreams(), max_message_bytes
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    # Registered methods are matched inside gRPC's core instead of by a Python lookup per call.
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        creds = grpc_server_credentials(tls.cert, tls.key, tls.client_ca)
        port = server.add_secure_port(address, creds)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    return server, port


async def stop_grpc_server(
    server: grpc.aio.Server, streams: OpenStreams | None, grace: float | None
) -> None:
    """Stop taking calls, end the open streams (``UNAVAILABLE``), let unary calls in flight finish
    within ``grace`` seconds, then cancel whatever is left."""
    if streams is not None:
        streams.close()
    await server.stop(grace)
