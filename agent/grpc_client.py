"""The agent's gRPC clients: model exchange with the aggregator, capacity stream to the extender.

Both run as their own asyncio tasks and never block the sampling loop: every call has a timeout,
failures are counted and retried with exponential backoff and jitter
(:class:`agent.backoff.Backoff`),
and a failed channel is closed and rebuilt so no stale connection state survives an outage.

* :class:`ExchangeClient` sends the local model every ``interval`` seconds and hands each valid
  global model to ``on_global``; while the aggregator is unreachable the pipeline simply keeps using
  its local model. It keeps one ``ExchangeStream`` open (one message and one reply per round, far
  cheaper for the aggregator than a call each) and reopens it when it ends (an aggregator that
  stops ends it with ``UNAVAILABLE``, a refused model with the refusal). An aggregator without
  the stream (``UNIMPLEMENTED``: an older version) gets unary ``Exchange`` calls instead, the
  same round, and the stream is tried again ``stream_retry`` seconds later.
* :class:`CapacityReporter` keeps one ``Report`` stream open and sends the latest report whenever
  :meth:`CapacityReporter.publish` is called (every batch, and at once on a mode change). Reports
  produced while disconnected are not queued: only the newest unsent one goes out on reconnection
  (one already delivered is not repeated: the extender would refuse it as not newer). Sequence
  numbers increase across reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable

import grpc

from agent.backoff import Backoff
from protos.carico.v1 import aggregator_pb2, aggregator_pb2_grpc, capacity_pb2, capacity_pb2_grpc

log = logging.getLogger(__name__)

ExchangeCall = grpc.aio.StreamStreamCall[aggregator_pb2.LocalModel, aggregator_pb2.GlobalModel]


def open_channel(
    target: str, credentials: grpc.ChannelCredentials | None, max_backoff: float
) -> grpc.aio.Channel:
    options = [
        # grpc's own reconnect backoff must not outgrow ours (its default maximum is 120 s).
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", int(max_backoff * 1000)),
    ]
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, credentials, options=options)


class ExchangeClient:
    """Periodic model exchange: over one ``Aggregator.ExchangeStream``, else ``Exchange`` calls."""

    def __init__(
        self,
        target: str,
        build: Callable[[], aggregator_pb2.LocalModel | None],
        on_global: Callable[[aggregator_pb2.GlobalModel], None],
        *,
        credentials: grpc.ChannelCredentials | None = None,
        interval: float = 5.0,
        timeout: float = 2.0,
        backoff: Backoff | None = None,
        stream_retry: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self._build = build
        self._on_global = on_global
        self._credentials = credentials
        self.interval = interval
        self.timeout = timeout
        self.backoff = backoff or Backoff(initial=min(1.0, interval), maximum=max(30.0, interval))
        self.stream_retry = stream_retry
        self._clock = clock
        self._call: ExchangeCall | None = None
        self._unary_until = -math.inf  # the aggregator lacked the stream: unary until then
        self.exchanges = 0
        self.errors = 0
        self.streams = 0  # streams opened
        self.connected = False
        self.waiting_for_model = False
        self.last_delay = 0.0

    @property
    def streaming(self) -> bool:
        """Whether the next exchange goes over the stream (False: unary calls for now)."""
        return self._clock() >= self._unary_until

    async def exchange_once(self, channel: grpc.aio.Channel) -> bool:
        """One exchange; True on success (raises nothing)."""
        message = self._build()
        if message is None:  # no local model yet: try again soon, not a whole interval later
            self.waiting_for_model = True
            return True
        self.waiting_for_model = False
        try:
            reply = None
            if self.streaming:
                reply = await self._over_stream(channel, message)
            if reply is None:
                stub = aggregator_pb2_grpc.AggregatorStub(channel)
                reply = await stub.Exchange(message, timeout=self.timeout)
        except (TimeoutError, grpc.aio.AioRpcError) as exc:
            self.errors += 1
            self.connected = False
            self.drop_stream()
            code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else "timeout"
            detail = f" ({exc.details()})" if isinstance(exc, grpc.aio.AioRpcError) else ""
            log.warning("model exchange with %s failed: %s%s", self.target, code, detail)
            return False
        self.exchanges += 1
        self.connected = True
        try:
            self._on_global(reply)
        except ValueError as exc:
            log.warning("refusing the global model from %s: %s", self.target, exc)
        return True

    async def _over_stream(
        self, channel: grpc.aio.Channel, message: aggregator_pb2.LocalModel
    ) -> aggregator_pb2.GlobalModel | None:
        """The reply over the stream, or None when the aggregator has no stream (fall back)."""
        call = self._call
        if call is not None and call.done():
            # Ended between rounds: the aggregator stopped, or restarted. A new stream, quietly.
            log.info("exchange stream to %s ended: %s", self.target, await call.code())
            call = None
        if call is None:
            call = self._call = aggregator_pb2_grpc.AggregatorStub(channel).ExchangeStream()
            self.streams += 1
        try:
            async with asyncio.timeout(self.timeout):
                await call.write(message)
                reply = await call.read()
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            self.drop_stream()
            self._unary_until = self._clock() + self.stream_retry
            log.info(
                "aggregator %s has no exchange stream: unary calls for %.0f s",
                self.target,
                self.stream_retry,
            )
            return None
        if reply is grpc.aio.EOF:  # ended without answering: counts as a failed exchange
            raise grpc.aio.AioRpcError(
                await call.code(),
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                await call.details() or "exchange stream ended without a reply",
            )
        assert isinstance(reply, aggregator_pb2.GlobalModel)
        return reply

    def drop_stream(self) -> None:
        """Cancel the open stream (if any); the next exchange opens a new one."""
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def run(self) -> None:
        channel = open_channel(self.target, self._credentials, self.backoff.maximum)
        try:
            while True:
                if await self.exchange_once(channel):
                    self.backoff.reset()
                    # At start the first model comes after one batch; the fleet prior it brings
                    # back is most useful then.
                    delay = min(self.interval, 0.5) if self.waiting_for_model else self.interval
                else:
                    await channel.close()
                    channel = open_channel(self.target, self._credentials, self.backoff.maximum)
                    delay = self.backoff.next_delay()
                self.last_delay = delay
                await asyncio.sleep(delay)
        finally:
            self.drop_stream()
            await channel.close()


class CapacityReporter:
    """One long-lived ``CapacityIngest.Report`` stream, rebuilt with backoff when it breaks."""

    def __init__(
        self,
        target: str,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        connect_timeout: float = 2.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.target = target
        self._credentials = credentials
        self.connect_timeout = connect_timeout
        self.backoff = backoff or Backoff(initial=0.5, maximum=30.0)
        self._latest: capacity_pb2.NodeCapacity | None = None
        self._pending = False  # the latest report has not been sent yet
        self._wake = asyncio.Event()
        self.sequence = 0
        self.sent = 0
        self.errors = 0
        self.streams = 0
        self.connected = False

    def publish(self, report: capacity_pb2.NodeCapacity) -> None:
        """Send ``report`` as soon as the stream allows (replaces any unsent one)."""
        self._latest = report
        self._pending = True
        self._wake.set()

    async def _requests(self) -> AsyncIterator[capacity_pb2.NodeCapacity]:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._latest is None or not self._pending:
                continue
            self._pending = False
            message = capacity_pb2.NodeCapacity()
            message.CopyFrom(self._latest)
            self.sequence += 1
            message.sequence = self.sequence
            self.sent += 1
            yield message

    async def _stream_once(self) -> bool:
        """One connection; returns True if it got connected (even if it broke later)."""
        channel = open_channel(self.target, self._credentials, self.backoff.maximum)
        try:
            try:
                await asyncio.wait_for(channel.channel_ready(), self.connect_timeout)
            except TimeoutError:
                self.errors += 1
                log.warning("capacity stream: cannot connect to %s", self.target)
                return False
            self.streams += 1
            self.connected = True
            self.backoff.reset()
            if self._latest is not None:
                # The latest report goes out on the fresh stream at once, sent before or not:
                # the extender may have restarted, and the agent's next report may be a
                # keepalive away (agent/report_gate.py).
                self._pending = True
                self._wake.set()
            stub = capacity_pb2_grpc.CapacityIngestStub(channel)
            try:
                summary = await stub.Report(self._requests())
                log.info("capacity stream closed by %s: %s", self.target, summary)
            except grpc.aio.AioRpcError as exc:
                self.errors += 1
                log.warning("capacity stream to %s broke: %s", self.target, exc.code())
            return True
        finally:
            self.connected = False
            await channel.close()

    async def run(self) -> None:
        while True:
            connected = await self._stream_once()
            delay = self.backoff.next_delay()
            if connected:
                log.info("reconnecting the capacity stream in %.1f s", delay)
            await asyncio.sleep(delay)
