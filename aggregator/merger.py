"""The merger of a multi-process aggregator: one store, several ``worker`` processes in front.

The merger runs in the main process next to the ``AggregatorService`` it feeds: it starts
``--workers`` worker processes (spawned, not forked: gRPC does not survive a fork) that serve
``Exchange`` on one port, takes the validated models they forward (raw bytes, batched) into the
service exactly as a single-process aggregator would, answers the calls a worker cannot decide
alone, and publishes every new serialised global model back to all workers. The store, TTL,
recompute, checkpoint and parent link stay in this one process, so their behaviour does not
depend on how connections are spread over the workers.

The port: with port 0 the merger picks it by binding a socket of its own (SO_REUSEPORT, never
listening, so it receives no connections) that it holds for its whole life, so that a restarted
worker binds the same port; for a fixed port it first checks that nobody listens there, because
SO_REUSEPORT would otherwise let two aggregators share it silently.

Failure handling: a worker that exits unexpectedly is restarted at once (its counters are kept);
more than ``max_restarts`` exits within ``restart_window`` seconds, or a restart that cannot
serve, set :attr:`Merger.failed`, on which the command stops the whole aggregator with an error —
never a silent half-service. ``/healthz`` answers 503 while any worker is down or silent.

Neighbours: ``worker`` is the other end of each pipe; ``service`` holds the state; ``cli`` starts
the merger for ``--workers`` above 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import socket
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from aggregator.service import AggregatorService, ExchangeRefused
from aggregator.worker import WorkerConfig, watch_pipe, worker_main
from protos.carico.v1 import aggregator_pb2

log = logging.getLogger("carico.aggregator")

# While the store holds more than --max-senders minus this many senders, workers ask the merger
# about every call, so that a new sender beyond the limit is refused exactly as in one process. It
# only has to cover the senders that can arrive within one batch delay.
ASK_HEADROOM = 1024
# A worker this many states behind is not sent more until it catches up: a stuck worker must not
# fill its pipe and block the merger (the state is "latest wins", so skipping loses nothing).
MAX_UNSEEN = 32


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    conn: Connection
    ready: asyncio.Future[int]
    reported_at: float = field(default_factory=time.monotonic)
    seen: int = -1  # the last state it has applied
    skipped: bool = False  # a state was not sent to it because it lagged
    attached: bool = True  # the pipe is still being read


def reserve_port(address: str) -> tuple[socket.socket, str]:
    """Hold the port of ``address`` (HOST:PORT, port 0 picks one); return it and HOST:PORT.

    Raises ``OSError`` when something already listens on a fixed port.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise OSError(f"expected HOST:PORT, got {address!r}")
    host = host.strip("[]")
    port = int(port_text)
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    if port != 0:
        # Without SO_REUSEPORT this bind fails if anyone listens there, SO_REUSEADDR or not.
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
    held = socket.socket(family, socket.SOCK_STREAM)
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind(sockaddr)
    except OSError:
        held.close()
        raise
    chosen = held.getsockname()[1]
    return held, f"[{host}]:{chosen}" if ":" in host else f"{host}:{chosen}"


class Merger:
    def __init__(
        self,
        service: AggregatorService,
        address: str,
        workers: int,
        template: WorkerConfig,
        *,
        max_restarts: int = 5,
        restart_window: float = 60.0,
        start_timeout: float = 60.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.service = service
        self.address = address
        self.count = workers
        self.template = template
        self.max_restarts = max_restarts
        self.restart_window = restart_window
        self.start_timeout = start_timeout
        self.failed = asyncio.Event()
        self.port = 0
        self._workers: dict[int, _Worker] = {}
        self._held: socket.socket | None = None
        self._published: tuple[Any, ...] | None = None
        self._state_number = 0
        self._exits: list[float] = []
        self._stopping = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._context = multiprocessing.get_context("spawn")
        self._parse = aggregator_pb2.LocalModel.FromString
        service.on_reply = lambda _: self._publish()
        service.metrics.workers.set_function(
            lambda: sum(1 for w in self._workers.values() if w.process.is_alive())
        )

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> int:
        """Start the workers and wait until every one serves; return the port."""
        self._held, worker_address = reserve_port(self.address)
        self.port = self._held.getsockname()[1]
        self.template = replace(self.template, address=worker_address)
        try:
            await asyncio.gather(*(self._spawn(i) for i in range(self.count)))
        except BaseException:
            await self.stop()
            raise
        return self.port

    async def _spawn(self, index: int) -> None:
        loop = asyncio.get_running_loop()
        here, there = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=worker_main,
            args=(replace(self.template, index=index), there),
            name=f"carico-aggregator-worker-{index}",
            daemon=True,  # never outlive the merger, even if it is killed
        )
        process.start()
        there.close()
        worker = _Worker(index, process, here, loop.create_future())
        self._workers[index] = worker
        here.send(("state", self._state_number, *self._state()))
        watch_pipe(here, self._on_readable, worker)
        loop.add_reader(process.sentinel, self._on_exit, worker)
        try:
            await asyncio.wait_for(asyncio.shield(worker.ready), self.start_timeout)
        except TimeoutError:
            raise OSError(f"worker {index} did not start within {self.start_timeout:g} s") from None

    async def stop(self) -> None:
        """Stop every worker (in-flight calls finish) and take their last models and counts."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for worker in self._workers.values():
            if worker.attached:
                with contextlib.suppress(OSError):
                    worker.conn.send(("stop",))
        deadline = time.monotonic() + self.template.grace + 10.0
        while any(w.process.is_alive() for w in self._workers.values()):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)  # the pipes are read meanwhile
        for worker in self._workers.values():
            if worker.process.is_alive():
                log.error("worker did not stop: killed", extra={"worker": worker.index})
                worker.process.kill()
                worker.process.join(5.0)
            self._detach(worker)
        if self._held is not None:
            self._held.close()
            self._held = None

    def health(self) -> str | None:
        """None when every worker runs and reports, else why not (for ``/healthz``)."""
        if self.failed.is_set():
            return "worker processes keep failing"
        silent = max(10.0, 20 * self.template.report_interval)
        now = time.monotonic()
        for index in range(self.count):
            worker = self._workers.get(index)
            if worker is None or not worker.process.is_alive() or not worker.ready.done():
                return f"worker {index} is not running"
            if now - worker.reported_at > silent:
                return f"worker {index} silent for {now - worker.reported_at:.0f} s"
        return None

    def processes(self) -> list[BaseProcess]:
        """The current worker processes, by index."""
        return [self._workers[i].process for i in sorted(self._workers)]

    def in_sync(self) -> bool:
        """Whether every worker serves the state published last."""
        return all(w.seen == self._state_number for w in self._workers.values() if w.attached)

    # -- messages from the workers ------------------------------------------------------------

    def _on_readable(self, worker: _Worker) -> None:
        try:
            # A bounded number per wake-up: one busy worker must not starve the others.
            for _ in range(64):
                if not worker.conn.poll():
                    break
                self._handle(worker, worker.conn.recv())
        except (EOFError, OSError):
            self._detach(worker)
        self._publish()

    def _handle(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "models":
            exchange, parse = self.service.exchange, self._parse
            for raw in message[1]:
                # Validated by the worker; the store decides (and the service counts) whether it
                # is accepted or stale.
                with contextlib.suppress(ExchangeRefused):
                    exchange(parse(raw), True, raw)
        elif kind == "ask":
            _, call, raw = message
            try:
                answer: tuple[Any, ...] = (
                    "answer",
                    call,
                    None,
                    "",
                    self.service.exchange(self._parse(raw), raw=raw),
                )
            except ExchangeRefused as exc:
                answer = ("answer", call, exc.outcome, str(exc), b"")
            self._send(worker, answer)
        elif kind == "seen":
            worker.seen = message[1]
            if self._state_number - worker.seen >= MAX_UNSEEN:
                pass  # still behind: more is sent when it catches up
            elif worker.skipped:
                worker.skipped = False
                assert self._published is not None
                self._send(worker, ("state", self._state_number, *self._published))
        elif kind == "metrics":
            self.service.metrics.worker_totals.report(worker.index, message[1])
            worker.reported_at = time.monotonic()
        elif kind == "ready":
            if not worker.ready.done():
                worker.ready.set_result(int(message[1]))
        elif kind == "failed":
            if not worker.ready.done():
                worker.ready.set_exception(OSError(f"worker {worker.index}: {message[1]}"))
        else:
            log.error("unknown message from a worker", extra={"kind": str(kind)})

    def _detach(self, worker: _Worker) -> None:
        if not worker.attached:
            return
        worker.attached = False
        loop = asyncio.get_running_loop()
        loop.remove_reader(worker.conn.fileno())
        with contextlib.suppress(EOFError, OSError):
            while worker.conn.poll():  # what it sent before it went
                self._handle(worker, worker.conn.recv())
        worker.conn.close()

    def _on_exit(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(worker.process.sentinel)
        self._detach(worker)
        worker.process.join(1.0)
        self.service.metrics.worker_totals.retire(worker.index)
        if not worker.ready.done():
            worker.ready.set_exception(
                OSError(f"worker {worker.index} exited with {worker.process.exitcode} on start")
            )
            return
        if self._stopping or worker.ready.exception() is not None:
            return  # stopping, or it never served: whoever awaited its start handles that
        log.error(
            "worker exited unexpectedly",
            extra={"worker": worker.index, "exitcode": worker.process.exitcode},
        )
        now = time.monotonic()
        self._exits = [t for t in self._exits if now - t < self.restart_window] + [now]
        if len(self._exits) > self.max_restarts:
            log.error(
                "workers keep exiting: stopping the aggregator",
                extra={"exits": len(self._exits), "window_s": self.restart_window},
            )
            self.failed.set()
            return
        task = asyncio.create_task(self._restart(worker.index))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart(self, index: int) -> None:
        self.service.metrics.worker_restarts.inc()
        try:
            await self._spawn(index)
        except OSError as exc:
            log.error("worker restart failed", extra={"worker": index, "error": str(exc)})
            self.failed.set()
            return
        log.warning("worker restarted", extra={"worker": index})

    # -- state to the workers -----------------------------------------------------------------

    def _state(self) -> tuple[Any, ...]:
        store = self.service.store
        ask = (
            store.feature_names is None
            or len(store) + ASK_HEADROOM >= self.service.config.max_senders
        )
        return (self.service.reply, store.feature_names, ask, self.service.cost_band)

    def _publish(self) -> None:
        state = self._state()
        if state == self._published:
            return
        self._published = state
        self._state_number += 1
        for worker in self._workers.values():
            if self._state_number - worker.seen > MAX_UNSEEN:
                worker.skipped = True
            else:
                self._send(worker, ("state", self._state_number, *state))

    def _send(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        if worker.attached:
            try:
                worker.conn.send(message)
            except OSError:  # it has exited; _on_exit deals with it
                self._detach(worker)
