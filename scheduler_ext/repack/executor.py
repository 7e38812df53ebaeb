"""Apply mode: carry out a checked Plan's steps in the cluster, safely or not at all.

Design: docs/architecture.md#repack-execution.

``PlanExecutor.run`` walks the plan's sequenced steps one at a time:

1. read the live objects (``list_for_repack``, merged by ``live.merge_lists``) and re-check the
   step (``recheck.drift``): the pod is still the planned one on the planned node and may still
   be moved (defence in depth:
   ``carico.io/do-not-move``, DaemonSet, static/mirror and bare pods are refused even though the
   snapshot already excludes them), and the target still exists, accepts the pod and has room;
2. for ``move`` / ``evict-first`` open a *replacement* slot on the target (the controller's new
   pod is steered there by the extender's filter), for ``evict`` a *hold* (the replacement of a
   pod evicted for good stays pending until the plan ends), then evict through the Eviction
   API. A 429
   (a PodDisruptionBudget, or the API's rate limit) pauses the plan: retry with exponential
   backoff, re-checking the live state before each try, until ``blocked_timeout``;
3. wait until the pod has left its node and, for ``move`` / ``land`` / ``place``, until the pod
   the step waits for is bound to its planned node; only then the next step runs.

Slots for the formerly pending pods are opened before the first step, so those pods are held to
their planned nodes from the start. Drift, a refused eviction, a step taking longer than
``step_timeout`` or the plan taking longer than ``plan_timeout`` abort the plan: nothing further
is evicted, every slot of the plan is released, and the outcome is recorded (metrics
``carico_repack_executions{outcome}``, the ``recent`` list, the log). Steps already done stay
done: each of them left the cluster in a state where no node is over capacity.

The decisions are in ``recheck`` (pure); this module does the waiting and the calls. The clock and
the sleep are parameters, so tests run it on fast fake time. Neighbours: ``cluster`` (evictions,
objects), ``slots`` (the plan slots), ``plan`` (steps).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from carico.pods import DEFAULT_EXCLUDED_NAMESPACES
from repack.problem.plan import Plan, Step
from repack.problem.snapshot import Pod, Snapshot
from scheduler_ext.repack import recheck
from scheduler_ext.repack.evictions import Evicted, EvictionReply
from scheduler_ext.repack.live import merge_lists
from scheduler_ext.repack.recheck import LiveView, live_view
from scheduler_ext.repack.service import ExecutionReport
from scheduler_ext.slots import SlotEnd, SlotKind, SlotTable

log = logging.getLogger(__name__)

COMPLETED = "completed"
ABORTED = "aborted"
RECENT_EXECUTIONS = 20


@dataclass(frozen=True)
class ExecutorOptions:
    plan_timeout: float = 600.0  # the whole plan, seconds
    step_timeout: float = 180.0  # one step: eviction accepted, pod gone, replacement bound
    blocked_timeout: float = 120.0  # how long 429s may pause one eviction before the plan aborts
    poll_seconds: float = 1.0  # how often the live state is read while waiting
    backoff_initial: float = 1.0  # first pause after a 429; doubles up to backoff_max
    backoff_max: float = 16.0

    def __post_init__(self) -> None:
        for name in ("plan_timeout", "step_timeout", "blocked_timeout", "poll_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise ValueError("backoff needs 0 < backoff_initial <= backoff_max")


@dataclass
class Execution:
    """The record of one plan run in apply mode."""

    plan_id: str
    steps_total: int
    started_at: float  # wall clock
    outcome: str = "running"  # completed or aborted once finished
    reason: str = ""
    steps_done: int = 0
    finished_at: float | None = None
    events: list[str] = field(default_factory=list)


class Aborted(Exception):
    """The plan cannot go on; the message says why."""


def backoff_delay(initial: float, maximum: float, failures: int) -> float:
    """Pause before the next try after ``failures`` refusals: doubling, capped.

    >>> [backoff_delay(1.0, 8.0, n) for n in range(5)]
    [1.0, 2.0, 4.0, 8.0, 8.0]
    """
    return float(min(maximum, initial * 2 ** min(failures, 32)))


@runtime_checkable
class ApplyCluster(Protocol):
    """What apply mode needs of a cluster (``KubernetesCluster``, ``InMemoryCluster``)."""

    async def evict(self, namespace: str, name: str, uid: str) -> EvictionReply: ...

    async def list_for_repack(self) -> list[bytes]: ...


Sleep = Callable[[float], Awaitable[None]]
OnOutcome = Callable[[str], None]


class PlanExecutor:
    def __init__(
        self,
        cluster: ApplyCluster,
        slots: SlotTable,
        options: ExecutorOptions = ExecutorOptions(),
        *,
        excluded_namespaces: Collection[str] = DEFAULT_EXCLUDED_NAMESPACES,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
        on_outcome: OnOutcome | None = None,
    ) -> None:
        self.cluster = cluster
        self.slots = slots
        self.options = options
        # The TTL is a safety net for a plan that died without releasing its slots; it must
        # never end the slots of a plan that is still within its own time limit.
        slots.ttl = max(slots.ttl, options.plan_timeout)
        self.excluded = frozenset(excluded_namespaces)
        self.clock, self.wall, self.sleep = clock, wall, sleep
        self.on_outcome = on_outcome
        self.recent: deque[Execution] = deque(maxlen=RECENT_EXECUTIONS)
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    async def _live(self) -> LiveView:
        return live_view(merge_lists(await self.cluster.list_for_repack()), self.excluded)

    async def run(self, plan: Plan, snapshot: Snapshot) -> ExecutionReport:
        """The ``repack.service.PlanRunner`` seam: execute, and report how it ended."""
        ex = await self.execute(plan, snapshot=snapshot)
        return ExecutionReport(
            ex.outcome,
            ex.reason,
            ex.steps_done,
            ex.steps_total,
            {"plan_id": ex.plan_id, "events": list(ex.events)},
        )

    async def execute(
        self, plan: Plan, plan_id: str | None = None, snapshot: Snapshot | None = None
    ) -> Execution:
        """Execute ``plan``; never raises for a plan that cannot go on (the record says why).

        ``snapshot`` is what the plan was computed from: its pods are the planned ones (their
        requests and class); without it the live state at the start stands in."""
        async with self._lock:  # one plan at a time: two would fight over the same room
            pid = plan_id or f"plan-{int(self.wall())}-{next(self._ids)}"
            ex = Execution(pid, len(plan.steps), self.wall())
            self.recent.append(ex)
            try:
                await self._run(plan, ex, snapshot)
                ex.outcome = COMPLETED
            except Aborted as exc:
                ex.outcome, ex.reason = ABORTED, str(exc)
            except asyncio.CancelledError:
                ex.outcome, ex.reason = ABORTED, "cancelled (the extender is stopping)"
                raise
            except Exception as exc:  # an API failure must still release the slots
                log.exception("plan %s failed", pid)
                ex.outcome, ex.reason = ABORTED, f"error: {exc}"
            finally:
                released = self.slots.release_plan(pid)
                ex.finished_at = self.wall()
                if released and ex.outcome == COMPLETED:
                    ex.events.append(f"{released} slot(s) left open were released")
                if ex.outcome == ABORTED:
                    log.warning(
                        "plan %s aborted after %d/%d steps: %s",
                        pid,
                        ex.steps_done,
                        ex.steps_total,
                        ex.reason,
                    )
                else:
                    log.info("plan %s completed: %d step(s)", pid, ex.steps_done)
                if self.on_outcome is not None:
                    self.on_outcome(ex.outcome)
            return ex

    async def _run(self, plan: Plan, ex: Execution, snapshot: Snapshot | None) -> None:
        start = self.clock()
        deadline = start + self.options.plan_timeout
        live = await self._live()
        as_planned = {p.key: p for p in snapshot.pods} if snapshot is not None else {}
        planned: dict[str, Pod] = {}
        uids: dict[str, str] = {}
        owners: dict[str, str] = {}
        for step in plan.steps:
            pod = live.pods.get(step.pod)
            if pod is None:
                raise Aborted(f"drift before the first step: pod {step.pod} is gone")
            planned[step.pod] = as_planned.get(step.pod, pod)
            uids[step.pod] = plan.uids.get(step.pod) or planned[step.pod].uid or pod.uid
            owners[step.pod] = live.owner_uid.get(step.pod, "")
            if step.action in recheck.EVICTING and pod.immovable in recheck.NEVER_MOVE:
                raise Aborted(f"pod {step.pod} must not be moved ({pod.immovable})")
        known = {p.uid for p in live.snapshot.pods}
        slot_of: dict[str, int] = {}
        now = self.clock()
        for step in plan.steps:
            if step.action == "place" and step.to_node is not None:
                slot = self.slots.open(
                    ex.plan_id,
                    SlotKind.PENDING,
                    step.to_node,
                    uids[step.pod],
                    now,
                    for_pod=step.pod,
                )
                slot_of[step.pod] = slot.id
        for i, step in enumerate(plan.steps, 1):
            await self._step(
                step,
                i,
                ex,
                planned[step.pod],
                uids[step.pod],
                owners[step.pod],
                known,
                slot_of,
                deadline,
            )
            ex.steps_done = i

    def _note(self, ex: Execution, text: str) -> None:
        ex.events.append(text)
        log.info("plan %s: %s", ex.plan_id, text)

    async def _step(
        self,
        step: Step,
        index: int,
        ex: Execution,
        planned: Pod,
        uid: str,
        owner_uid: str,
        known: set[str],
        slot_of: dict[str, int],
        plan_deadline: float,
    ) -> None:
        step_deadline = min(plan_deadline, self.clock() + self.options.step_timeout)
        what = f"step {index} ({step.action} {step.pod})"
        live = await self._live()
        reason = recheck.drift(step, planned, uid, live)
        if reason:
            raise Aborted(f"drift before {what}: {reason}")
        if step.action in recheck.EVICTING:
            if step.action == "evict" and owner_uid:
                # Evicted for good: its replacement must not take the room meant for others.
                self.slots.open(
                    ex.plan_id,
                    SlotKind.HOLD,
                    "",
                    owner_uid,
                    self.clock(),
                    signature=recheck.pod_signature(planned),
                    for_pod=step.pod,
                )
            if step.action != "evict":
                if not owner_uid:
                    raise Aborted(f"{what}: the pod has no controller to replace it")
                assert step.to_node is not None
                slot = self.slots.open(
                    ex.plan_id,
                    SlotKind.REPLACEMENT,
                    step.to_node,
                    owner_uid,
                    self.clock(),
                    signature=recheck.pod_signature(planned),
                    for_pod=step.pod,
                )
                slot_of[step.pod] = slot.id
            await self._evict(
                step,
                what,
                planned,
                uid,
                min(step_deadline, self.clock() + self.options.blocked_timeout),
                plan_deadline,
                ex,
            )
            await self._wait(
                lambda v: recheck.gone(step, uid, v),
                step_deadline,
                plan_deadline,
                f"{what}: the pod did not leave {step.from_node}",
            )
            self._note(ex, f"{what}: pod left {step.from_node}")
        if step.action in recheck.LANDING:
            found: list[str] = []

            def arrived(v: LiveView) -> bool:
                got = recheck.landed(step, uid, owner_uid, known, v)
                if got is not None:
                    found.append(got)
                return got is not None

            await self._wait(
                arrived,
                step_deadline,
                plan_deadline,
                f"{what}: no pod was bound to {step.to_node} in time",
            )
            known.add(found[0])
            slot_id = slot_of.pop(step.pod, None)
            if slot_id is not None:
                self.slots.close(slot_id, SlotEnd.DONE)
            self._note(ex, f"{what}: bound to {step.to_node}")

    async def _evict(
        self,
        step: Step,
        what: str,
        planned: Pod,
        uid: str,
        blocked_deadline: float,
        plan_deadline: float,
        ex: Execution,
    ) -> None:
        namespace, name = step.pod.split("/", 1)
        failures = 0
        while True:
            reply = await self.cluster.evict(namespace, name, uid)
            if reply.outcome is Evicted.EVICTED:
                self._note(ex, f"{what}: evicted from {step.from_node}")
                return
            if reply.outcome is Evicted.GONE:
                raise Aborted(f"drift at {what}: {reply.message or 'pod gone'}")
            if reply.outcome is Evicted.FAILED:
                raise Aborted(f"{what}: eviction failed: {reply.message}")
            # BLOCKED: pause, then try again while time remains.
            delay = backoff_delay(self.options.backoff_initial, self.options.backoff_max, failures)
            failures += 1
            now = self.clock()
            if now + delay > min(blocked_deadline, plan_deadline):
                raise Aborted(f"{what}: eviction refused until the deadline: {reply.message}")
            self._note(ex, f"{what}: eviction refused ({reply.message}); retry in {delay:g}s")
            await self.sleep(delay)
            live = await self._live()
            reason = recheck.drift(step, planned, uid, live)
            if reason:
                raise Aborted(f"drift at {what}: {reason}")

    async def _wait(
        self,
        done: Callable[[LiveView], bool],
        step_deadline: float,
        plan_deadline: float,
        timeout_reason: str,
    ) -> None:
        while True:
            if done(await self._live()):
                return
            now = self.clock()
            if now >= plan_deadline:
                raise Aborted(f"plan timeout ({self.options.plan_timeout:g}s): {timeout_reason}")
            if now >= step_deadline:
                raise Aborted(f"step timeout ({self.options.step_timeout:g}s): {timeout_reason}")
            await self.sleep(self.options.poll_seconds)
