"""One worker process of a multi-process aggregator: serves ``Exchange`` and ``ExchangeStream``
on the shared port.

A single Python process saturates at roughly 3,000 gRPC calls a second even with an empty handler
(the time goes to grpc.aio's own machinery, not to the aggregator's work), so a large fleet is
served by several of these workers on one port (SO_REUSEPORT: the kernel spreads connections over
them) in front of one ``merger`` that owns the store. Each worker parses and validates every call
itself, answers at once with the global model the merger published last, and forwards the models
that passed as their raw bytes, batched every few milliseconds. The merger therefore sees every
node's reports, whichever worker they came through, and "latest per node" stays exact.

Two answers depend on state only the merger holds: the feature set of a fresh aggregator (learned
from the first model) and whether a new sender still fits under ``--max-senders``. While the merger
says either is in doubt (no feature set yet, or the store close to full) the worker asks the merger
for each call and waits for its verdict, so those answers are the single-process ones too.

Messages on the pipe (pickled tuples). From the merger: ``("state", n, reply, features, ask,
band)`` (band: the per-pod costs the fleet accepts),
``("answer", call, outcome, message, reply)``, ``("stop",)``. To the merger: ``("ready", port)``,
``("failed", message)``, ``("seen", n)``, ``("models", [raw, ...])``, ``("ask", call, raw)``,
``("metrics", report)``.

Neighbours: ``merger`` starts these processes and is the other end of the pipe; ``grpc_server``
adapts gRPC calls to :meth:`WorkerFront.answer`; ``validate`` holds the checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from aggregator.grpc_server import (
    DEFAULT_MAX_MESSAGE_BYTES,
    OpenStreams,
    ServerTls,
    start_grpc_server,
    stop_grpc_server,
)
from aggregator.metrics import AggregatorMetrics
from aggregator.service import ExchangeRefused, invalid
from aggregator.validate import (
    LEAVES_ONLY,
    CostBand,
    SenderPolicy,
    ValidationError,
    validate_local_model,
)
from carico.cliargs import event_loop_factory
from carico.logs import configure_logging
from protos.carico.v1 import aggregator_pb2

log = logging.getLogger("carico.aggregator.worker")

# Names that passed validation are not matched against the DNS-1123 pattern again; past this many
# the cache starts over rather than grow without bound.
MAX_KNOWN_NAMES = 200_000


@dataclass(frozen=True)
class WorkerConfig:
    """How to run a worker; the merger fills in ``index`` and ``address`` for each."""

    index: int = 0
    address: str = ""  # HOST:PORT, the port already chosen by the merger
    tls: ServerTls | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_concurrent_rpcs: int | None = None
    log_level: str = "warning"
    log_format: str = "text"
    batch_delay: float = 0.005  # seconds a model may wait before its batch goes to the merger
    batch_size: int = 256  # models per batch at most
    report_interval: float = 0.5  # seconds between metrics reports
    grace: float = 2.0  # seconds in-flight calls get to finish on stop (streams end at once)
    policy: SenderPolicy = LEAVES_ONLY  # who may stand for more than one node
    event_loop: str = "asyncio"  # or "uvloop"


class WorkerFront:
    """The worker's side of ``Exchange``: validate, queue for the merger, answer."""

    def __init__(self, conn: Connection, config: WorkerConfig) -> None:
        self.conn = conn
        self.config = config
        self.metrics = AggregatorMetrics()
        self.reply = b""
        self.features: tuple[str, ...] | None = None
        self.band: CostBand = None
        self.ask = True  # until the merger says otherwise, every call waits for its verdict
        self.stopping = asyncio.Event()
        self._gone = False  # the merger's end of the pipe is closed
        self._known: set[str] = set()
        self._batch: list[bytes] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self._calls: dict[int, asyncio.Future[bytes]] = {}
        self._next_call = 0

    # -- the hot path -------------------------------------------------------------------------

    def answer(self, request: aggregator_pb2.LocalModel, raw: bytes) -> bytes | Awaitable[bytes]:
        if self.ask:
            return self._ask(raw)
        try:
            # The clock value is not used: the merger stamps arrival when it stores the model.
            validate_local_model(
                request,
                self.features,
                0.0,
                self._known,
                self.config.policy,
                self.band,
                keep_classes=False,  # the merger builds them (checked_entry)
            )
        except ValidationError as exc:
            self.metrics.exchanges["invalid"] += 1
            raise invalid(request, exc) from None
        known = self._known
        if len(known) >= MAX_KNOWN_NAMES:
            known.clear()
        known.add(request.node)
        batch = self._batch
        batch.append(raw)
        if len(batch) >= self.config.batch_size:
            self.flush()
        elif self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(
                self.config.batch_delay, self.flush
            )
        return self.reply

    def _ask(self, raw: bytes) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if self._gone:
            future.set_exception(ExchangeRefused("unavailable", "the aggregator is stopping"))
            return future
        self.flush()  # the merger sees this worker's models in the order they came
        self._next_call += 1
        self._calls[self._next_call] = future
        self._send(("ask", self._next_call, raw))
        return future

    def flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._batch:
            batch, self._batch = self._batch, []
            self._send(("models", batch))

    def report(self) -> None:
        # Models first: once the merger has a report, it has every model counted in it.
        self.flush()
        self._send(("metrics", self.metrics.own_report()))

    def _send(self, message: tuple[Any, ...]) -> None:
        # A blocking write: should the merger fall behind, the workers slow down with it instead
        # of queueing models without bound.
        if self._gone:
            return
        try:
            self.conn.send(message)
        except OSError:
            self._lost()

    # -- messages from the merger -------------------------------------------------------------

    def apply(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "state":
            _, seen, self.reply, self.features, self.ask, self.band = message
            self._send(("seen", seen))
        elif kind == "answer":
            _, call, outcome, text, reply = message
            future = self._calls.pop(call, None)
            if future is not None and not future.done():
                if outcome is None:
                    future.set_result(reply)
                else:
                    future.set_exception(ExchangeRefused(outcome, text))
        elif kind == "stop":
            # Calls in flight (asks included: the merger still answers) get the grace period.
            self.stopping.set()
        else:
            log.error("unknown message from the merger", extra={"kind": str(kind)})

    def on_readable(self) -> None:
        try:
            while self.conn.poll():
                self.apply(self.conn.recv())
        except (EOFError, OSError):
            self._lost()

    def _lost(self) -> None:
        if self._gone:
            return
        log.warning("merger gone: stopping", extra={"worker": self.config.index})
        self._gone = True
        self.stopping.set()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(ExchangeRefused("unavailable", "the aggregator is stopping"))
        self._calls.clear()


async def serve_worker(config: WorkerConfig, conn: Connection) -> int:
    loop = asyncio.get_running_loop()
    front = WorkerFront(conn, config)
    # The first message is the current state: never answer with anything older.
    front.apply(await loop.run_in_executor(None, conn.recv))
    watch_pipe(conn, front.on_readable)
    streams = OpenStreams()
    try:
        server, port = await start_grpc_server(
            front,
            config.address,
            tls=config.tls,
            max_message_bytes=config.max_message_bytes,
            max_concurrent_rpcs=config.max_concurrent_rpcs,
            reuse_port=True,
            streams=streams,
        )
    except (OSError, RuntimeError, ValueError) as exc:
        front._send(("failed", f"{type(exc).__name__}: {exc}"))
        return 1
    front._send(("ready", port))
    log.debug("worker serving", extra={"worker": config.index, "grpc_port": port})

    async def report_loop() -> None:
        while True:
            await asyncio.sleep(config.report_interval)
            front.report()

    reporter = asyncio.create_task(report_loop())
    await front.stopping.wait()
    await stop_grpc_server(server, streams, config.grace)
    reporter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reporter
    front.flush()
    front.report()
    loop.remove_reader(conn.fileno())
    conn.close()
    return 0


def watch_pipe(conn: Connection, callback: Callable[..., None], *args: Any) -> None:
    """Call ``callback(*args)`` on the running loop whenever ``conn`` has something to read.

    The pipe stays blocking: uvloop (libuv) switches a watched descriptor to non-blocking mode,
    and then a send into a full pipe fails with EAGAIN and a message that arrives in parts fails
    half read — both taken for the other end being gone — where the design is that a busy merger
    slows its workers down (both sides' sends wait) and a read takes a whole message.
    """
    asyncio.get_running_loop().add_reader(conn.fileno(), callback, *args)
    os.set_blocking(conn.fileno(), True)


def worker_main(config: WorkerConfig, conn: Connection) -> None:
    """Entry point of a worker process (started by the merger with the spawn method)."""
    # Ctrl-C, or a SIGTERM sent to the whole process group, reaches the workers too; the merger
    # decides when they stop (it tells them through the pipe, or they see its end close).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    configure_logging(config.log_level, config.log_format)
    with asyncio.Runner(loop_factory=event_loop_factory(config.event_loop)) as runner:
        code = runner.run(serve_worker(config, conn))
    raise SystemExit(code)
