"""The running aggregator: the store, the cached reply, and the background work (asyncio).

``exchange`` is the hot path: validate, keep the model as the sender's latest, answer with the
cached serialised global model — no merging on the caller's time. A background task recomputes the
global model when something changed, at most once per ``recompute_interval``; another drops entries
past the TTL; another writes the checkpoint. With a checkpoint, every accepted model also goes to
the ``journal``, so that a crash loses at most the models of one event-loop turn; at start the
checkpoint is loaded, then the journal replayed. With a parent (``grpc_client.ParentLink``) the
reply is the parent's fleet-wide model while it is fresh, else this aggregator's own.

Neighbours: ``grpc_server`` adapts gRPC calls to :meth:`AggregatorService.exchange`; ``store`` and
``validate`` hold the pure logic; ``checkpoint`` and ``journal`` read and write the files; ``cli``
wires it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from aggregator import checkpoint, journal
from aggregator.journal import Journal
from aggregator.metrics import AggregatorMetrics
from aggregator.store import OUTCOME_ACCEPTED, OUTCOME_OVER_CAPACITY, GlobalView, ModelStore
from aggregator.validate import (
    LEAVES_ONLY,
    CostBand,
    SenderPolicy,
    ValidationError,
    check_claim,
    checked_entry,
    cost_band,
    validate_local_model,
)
from aggregator.wire import global_message
from protos.carico.v1 import aggregator_pb2

log = logging.getLogger("carico.aggregator")

Clock = Callable[[], float]


@dataclass(frozen=True)
class AggregatorConfig:
    name: str
    ttl: float = 30.0
    feature_names: tuple[str, ...] | None = None
    recompute_interval: float = 0.05
    expire_interval: float = 1.0
    max_senders: int = 100_000
    checkpoint_path: Path | None = None
    checkpoint_interval: float = 30.0
    policy: SenderPolicy = LEAVES_ONLY  # who may stand for more than one node
    class_interval: float = 1.0  # seconds between rebuilds of the per-class summary at most


class ExchangeRefused(Exception):
    """The model was refused; ``outcome`` is a metrics label, the message says why."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def _cut(exc: Exception) -> str:
    """An error for a log line: one line, short (a damaged file can make a long one)."""
    return " ".join(str(exc).split())[:300]


def invalid(request: aggregator_pb2.LocalModel, problem: ValidationError) -> ExchangeRefused:
    """The refusal of a model that failed validation (its node name, then the problem)."""
    message = f"{request.node[:253] or '?'}: {problem}"
    # Debug only: one broken agent must not flood the logs; the metric counts them.
    log.debug("model refused", extra={"reason": message})
    return ExchangeRefused("invalid", message)


class AggregatorService:
    def __init__(
        self,
        config: AggregatorConfig,
        metrics: AggregatorMetrics | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else AggregatorMetrics()
        self.clock = clock
        self.store = ModelStore(config.ttl, config.feature_names, config.class_interval)
        self._local: GlobalView | None = None
        self._parent: aggregator_pb2.GlobalModel | None = None
        self._parent_at = -math.inf
        self._version = 0
        self._served_at: float | None = None
        self._reply = global_message(None, 0, config.name, clock()).SerializeToString()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._journal: Journal | None = None  # opened by ``restore``
        self._band: CostBand = None  # the costs the fleet accepts (from the last recompute)
        self._journal_failing = False
        # Called with every new serialised reply (a multi-process aggregator publishes it).
        self.on_reply: Callable[[bytes], None] | None = None
        self.metrics.global_model_age.set_function(self._model_age)

    # -- the hot path -------------------------------------------------------------------------

    def exchange(
        self, request: aggregator_pb2.LocalModel, checked: bool = False, raw: bytes | None = None
    ) -> bytes:
        """Fold ``request`` in (as its sender's latest model) and return the serialised reply.

        ``checked``: a worker process has validated it already; the store still refuses a
        feature set other than its own (it may have changed since). ``raw``: the request's bytes
        as they came (what the journal keeps; serialised again when not given).
        """
        outcomes = self.metrics.exchanges
        now = self.clock()
        store = self.store
        try:
            if checked:
                entry, names = checked_entry(request, now)
            else:
                entry, names = validate_local_model(
                    request, store.feature_names, now, store.known, self.config.policy, self._band
                )
            learning = store.feature_names is None
            outcome = store.offer(entry, names, self.config.max_senders)
            if learning:
                log.info(
                    "feature set learned", extra={"features": list(names), "from_node": entry.node}
                )
        except ValidationError as exc:
            outcomes["invalid"] += 1
            raise invalid(request, exc) from None
        outcomes[outcome] += 1
        if outcome == OUTCOME_OVER_CAPACITY:
            raise ExchangeRefused(
                outcome, f"aggregator holds its maximum of {self.config.max_senders} senders"
            )
        if outcome == OUTCOME_ACCEPTED:
            if self._journal is not None:
                self._journal.append(now, raw if raw is not None else request.SerializeToString())
            if not self._wake.is_set():
                self._wake.set()
        return self._reply

    def answer(self, request: aggregator_pb2.LocalModel, raw: bytes) -> bytes:
        """``exchange`` as the gRPC handler calls it (with the request's bytes)."""
        return self.exchange(request, raw=raw)

    @property
    def cost_band(self) -> CostBand:
        """The per-pod costs the fleet accepts now (None while its median is not known)."""
        return self._band

    @property
    def reply(self) -> bytes:
        """The serialised ``GlobalModel`` every caller gets right now."""
        return self._reply

    # -- views --------------------------------------------------------------------------------

    @property
    def local_view(self) -> GlobalView | None:
        """This aggregator's own merged model (what it forwards to a parent)."""
        return self._local

    def served(self) -> aggregator_pb2.GlobalModel:
        return aggregator_pb2.GlobalModel.FromString(self._reply)

    def _model_age(self) -> float:
        return math.nan if self._served_at is None else max(0.0, self.clock() - self._served_at)

    def recompute(self) -> None:
        """Recompute the global model from the store and refresh the cached reply."""
        now = self.clock()
        self._local = local = self.store.compute(now)
        self._band = (
            cost_band(local.median_per_pod_cost, local.nodes_with_cost)
            if local is not None
            else None
        )
        self.metrics.recomputes.inc()
        self.metrics.senders.set(len(self.store))
        self.metrics.nodes_contributing.set(
            self._local.contributing_nodes if self._local is not None else 0
        )
        self._refresh_reply(now)

    def set_parent_view(self, reply: aggregator_pb2.GlobalModel) -> None:
        """Serve the parent's fleet-wide model (while fresh) instead of this aggregator's own."""
        if reply.has_model and tuple(reply.model.feature_names) != self.store.feature_names:
            log.warning(
                "parent model ignored: its feature set differs",
                extra={"parent_features": list(reply.model.feature_names)},
            )
            return
        self._parent = reply if reply.has_model else None
        self._parent_at = self.clock()
        self._refresh_reply(self._parent_at)

    def _refresh_reply(self, now: float) -> None:
        self._version += 1
        if self._parent is not None and now - self._parent_at <= self.config.ttl:
            reply = aggregator_pb2.GlobalModel()
            reply.CopyFrom(self._parent)
            reply.version = self._version
            self._served_at = self._parent.timestamp
        else:
            self._parent = None
            reply = global_message(self._local, self._version, self.config.name, now)
            self._served_at = self._local.computed_at if self._local is not None else None
        self._reply = reply.SerializeToString()
        if self.on_reply is not None:
            self.on_reply(self._reply)

    def expire(self) -> list[str]:
        now = self.clock()
        gone = self.store.expire(now)
        if gone:
            self.metrics.expired.inc(len(gone))
            log.info("nodes expired", extra={"nodes": gone[:20], "count": len(gone)})
        stale_parent = self._parent is not None and now - self._parent_at > self.config.ttl
        # A dirty store here holds a per-class summary withheld by its interval (or models the
        # recompute task is about to take): recomputing now is harmless either way.
        if gone or stale_parent or self.store.dirty:
            self.recompute()
        return gone

    # -- checkpoint ---------------------------------------------------------------------------

    def restore(self) -> int:
        """Load the checkpoint, then replay the journal, and open the journal for what comes.

        Whatever the files hold, nothing here stops the start: a damaged checkpoint (of any
        shape) is logged and ignored, a damaged journal record ends its segment's replay, and
        temporary files left by a write that was killed are deleted. Returns the entries kept.
        """
        path = self.config.checkpoint_path
        if path is None:
            return 0
        for orphan in checkpoint.remove_orphans(path):
            log.warning("orphan checkpoint file removed", extra={"file": orphan})
        kept = 0
        if path.exists():
            try:
                kept = self._restore_checkpoint(path)
            except Exception as exc:  # any shape of damage; the file is data, never trusted
                log.warning("checkpoint ignored", extra={"path": str(path), "error": _cut(exc)})
        replayed = self._replay_journal(path)
        self._journal = Journal(path, self._journal_error)
        if kept or replayed:
            self.recompute()
        return len(self.store)

    def _restore_checkpoint(self, path: Path) -> int:
        try:
            names, entries, skipped = checkpoint.load(path)
        except checkpoint.CheckpointError as exc:
            log.warning("checkpoint ignored", extra={"path": str(path), "error": _cut(exc)})
            return 0
        for problem in skipped[:20]:
            log.warning("checkpoint entry skipped", extra={"path": str(path), "error": problem})
        if names is None:
            return 0
        if self.config.feature_names is not None and names != self.config.feature_names:
            log.warning(
                "checkpoint ignored: its feature set differs from --features",
                extra={"path": str(path), "features": list(names)},
            )
            return 0
        claimed = []
        for entry in entries:
            try:
                check_claim(entry.node, entry.weight, self.config.policy, len(entry.classes))
            except ValidationError as exc:
                log.warning(
                    "checkpoint entry skipped", extra={"path": str(path), "error": _cut(exc)}
                )
                continue
            claimed.append(entry)
        kept = self.store.restore(claimed, names, self.clock())
        log.info("checkpoint restored", extra={"path": str(path), "entries": kept})
        return kept

    def _replay_journal(self, path: Path) -> int:
        """Offer the journal's models to the store, each as at its arrival; the nodes kept."""
        found = journal.replay(path)
        for problem in found.problems[:20]:
            log.warning("journal record ignored", extra={"error": problem})
        if not found.records:
            return 0
        cutoff = self.clock() - self.config.ttl
        nodes: set[str] = set()
        skipped = 0
        store = self.store
        for received_at, raw in found.records:
            if received_at < cutoff:
                continue
            try:
                message = aggregator_pb2.LocalModel.FromString(raw)
                entry, names = validate_local_model(
                    message, store.feature_names, received_at, (), self.config.policy
                )
                if store.offer(entry, names) == OUTCOME_ACCEPTED:
                    nodes.add(entry.node)
            except (DecodeError, ValidationError):
                skipped += 1
        log.info(
            "journal replayed",
            extra={"records": len(found.records), "kept": len(nodes), "skipped": skipped},
        )
        return len(nodes)

    def _journal_error(self, exc: OSError) -> None:
        self.metrics.checkpoints.labels("journal_error").inc()
        if not self._journal_failing:  # once, not at every event-loop turn of a full disk
            log.error("journal write failed", extra={"error": str(exc)})
        self._journal_failing = True

    def _checkpoint_bytes(self) -> bytes:
        return checkpoint.encode(self.store.feature_names, self.store.entries(), self.clock())

    def _written(self, path: Path, done: int | None, exc: OSError | None) -> bool:
        if exc is not None:
            self.metrics.checkpoints.labels("error").inc()
            log.error("checkpoint write failed", extra={"path": str(path), "error": str(exc)})
            return False
        self.metrics.checkpoints.labels("written").inc()
        if done is not None and self._journal is not None:
            self._journal.drop_through(done)  # the checkpoint holds what they held
            self._journal_failing = False
        return True

    def save_checkpoint(self) -> bool:
        path = self.config.checkpoint_path
        if path is None:
            return False
        data = self._checkpoint_bytes()
        done = self._journal.rotate() if self._journal is not None else None
        try:
            checkpoint.write_atomic(path, data)
        except OSError as exc:
            return self._written(path, done, exc)
        return self._written(path, done, None)

    async def _save_checkpoint_async(self) -> None:
        path = self.config.checkpoint_path
        assert path is not None
        # Snapshot and journal rotation on the loop, together: every model is in one or the
        # other. The write (fsync) runs off the loop.
        data = self._checkpoint_bytes()
        done = self._journal.rotate() if self._journal is not None else None
        try:
            await asyncio.to_thread(checkpoint.write_atomic, path, data)
        except OSError as exc:
            self._written(path, done, exc)
            return
        self._written(path, done, None)

    # -- background tasks ---------------------------------------------------------------------

    async def _recompute_loop(self) -> None:
        while True:
            await self._wake.wait()
            # Let a burst of exchanges accumulate: one recompute serves them all.
            await asyncio.sleep(self.config.recompute_interval)
            self._wake.clear()
            self.recompute()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.expire_interval)
            self.expire()

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.checkpoint_interval)
            await self._save_checkpoint_async()

    async def start(self) -> None:
        """Restore the checkpoint and start the background tasks."""
        self.restore()
        self.expire()
        self._tasks = [
            asyncio.create_task(self._recompute_loop()),
            asyncio.create_task(self._expire_loop()),
        ]
        if self.config.checkpoint_path is not None:
            self._tasks.append(asyncio.create_task(self._checkpoint_loop()))

    async def stop(self) -> None:
        """Stop the background tasks and write the final checkpoint."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        saved = self.save_checkpoint()
        if self._journal is not None:
            self._journal.close()
            if saved:  # the segment started for the final checkpoint is empty
                self._journal.drop_through(self._journal.number)
            self._journal = None
