"""Repacking in the cluster: when to solve, solving off the event loop, the last plans, apply mode.

``RepackService`` is the extender's repacker (docs/architecture.md#repack-execution). A run lists
the cluster through ``fetch`` (raw API list responses), then decodes, parses and solves them in a
separate process (``live.compute``), so a solve of any size never stalls the filter path. Runs start

* automatically, from the ``Trigger``: pods of the managed schedulers Unschedulable for longer than
  the debounce window, at most once per cooldown, never twice for the same cluster state;
* on demand (``POST /repack``, ``run("http")``);
* for the balancing engine (docs/architecture.md#balancing), every ``balance_period`` seconds
  with the configured goal (``run("period", mode=goal)``), skipped when the cluster is as it was at
  the last such run; ``POST /repack`` with ``{"mode": goal}`` runs one on demand. The solver
  process measures the balance goal on the agents' measured footprints (``footprints``) where a
  pod's workload class has one, else on requests, and the plan says which.

One run at a time: a second request while one is in progress gets ``RunInProgress`` (HTTP 409).
Every run is logged, counted in the ``carico_repack_*`` metrics and kept in a short history
(``plans()``, served at ``GET /api/v1/repack/plans``).

Modes:

* ``dry-run`` (the default): the plan is computed, logged, counted and shown; nothing in the
  cluster changes.
* ``apply``: each plan that improves the cluster (status OPTIMAL or FEASIBLE, already validated by
  the independent checker inside ``solve``) is handed to a ``PlanRunner`` — the seam the executor
  plugs into. Without a runner, apply mode refuses to start (``ValueError``).

Neighbours: ``trigger`` (when), ``live`` (what), ``scheduler_ext.http_server`` (the routes),
``scheduler_ext.cli`` (flags and wiring), ``scheduler_ext.metrics`` (the metric families).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from carico.pods import DEFAULT_EXCLUDED_NAMESPACES
from repack.problem.goal_spec import EXCLUDE_LABEL, GOALS, GoalSpec, Limits
from scheduler_ext.metrics import ExtenderMetrics
from scheduler_ext.repack.request import (
    PLACE,
)
from scheduler_ext.repack.trigger import Trigger, Unscheduled

if TYPE_CHECKING:
    # Loaded at the first run instead (OR-Tools and the kubernetes client are slow imports, and
    # the solve itself happens in another process).
    from repack.problem.plan import Plan
    from repack.problem.snapshot import Snapshot
    from scheduler_ext.ledger import PodState
    from scheduler_ext.repack.live import Computed

log = logging.getLogger(__name__)

MODES = ("dry-run", "apply", "off")
TRIGGER_UNSCHEDULABLE = "unschedulable"
TRIGGER_HTTP = "http"
TRIGGER_PERIOD = "period"
STATUS_PODS = 20  # stuck pods named by GET /api/v1/repack (the count is always whole)

# (on_list, on_event) -> runs until cancelled: a watch of unbound Pending pods (for a caller of
# ``run_background`` of its own; the extender feeds the trigger from its one watch of Pending pods,
# ``RepackSource.run_pending_watch``).
OnUnscheduledList = Callable[[list[Unscheduled]], None]
OnUnscheduledEvent = Callable[[Unscheduled], None]
UnscheduledWatch = Callable[[OnUnscheduledList, OnUnscheduledEvent], Coroutine[Any, Any, None]]
# Raw API list responses (NodeList, PodList, PodDisruptionBudgetList) or one kubectl-style List.
Fetch = Callable[[], Awaitable[Sequence[bytes]]]
# Measured footprints per workload class: (cpu cores, memory bytes), the fleet's medians.
Footprints = Callable[[], Mapping[str, tuple[float, float]]]


@dataclass(frozen=True)
class ExecutionReport:
    """How an apply-mode execution ended.

    ``outcome``: ``completed`` (every step done) or ``aborted`` (drift, timeout, a refused eviction
    that did not clear, shutdown...; the runner has released whatever it held). ``reason`` says why
    in words an operator can act on. ``details`` is free-form JSON-ready data the runner wants shown
    at ``GET /api/v1/repack/plans`` (e.g. per-step results).
    """

    outcome: str
    reason: str = ""
    steps_done: int = 0
    steps_total: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.outcome,
            "reason": self.reason,
            "steps_done": self.steps_done,
            "steps_total": self.steps_total,
            "details": dict(self.details),
        }


class PlanRunner(Protocol):
    """Carries out a plan in the cluster (apply mode). The seam between planning and execution.

    ``run`` is awaited on the extender's event loop, at most one call at a time, only with a plan
    whose status is OPTIMAL or FEASIBLE (it has passed the independent checker) and the snapshot it
    was computed from (the runner re-checks the live state against it before each step). No other
    run starts until it returns, so the runner owns the cluster's repacking while it works.

    It returns an ``ExecutionReport``; expected failures (drift, timeouts, a 429 from the Eviction
    API that does not clear) are an ``aborted`` report, not an exception. An exception is recorded
    as ``aborted`` with its message. On cancellation (extender shutdown) it must release what it
    holds (plan slots) before re-raising ``CancelledError``.
    """

    async def run(self, plan: Plan, snapshot: Snapshot) -> ExecutionReport: ...


@runtime_checkable
class RepackSource(Protocol):
    """A cluster a repack can list, whose Pending pods feed the ledger and the trigger from one
    watch (``kube.KubernetesCluster``, ``cluster.InMemoryCluster``)."""

    async def list_for_repack(self) -> list[bytes]: ...

    async def run_pending_watch(
        self,
        on_list: Callable[[list[PodState]], None],
        on_event: Callable[[PodState], None],
        on_unscheduled_list: OnUnscheduledList,
        on_unscheduled_event: OnUnscheduledEvent,
    ) -> None: ...


class RunInProgress(Exception):
    """A repack is already computing or executing; the message says which."""


@dataclass(frozen=True)
class RepackSettings:
    mode: str = "dry-run"
    debounce: float = 30.0  # seconds a pod stays Unschedulable before it triggers a run
    cooldown: float = 60.0  # seconds between the start of one run and the next automatic one
    time_limit: float = 10.0  # solve budget of a run, seconds
    max_time_limit: float = 300.0  # the most a POST /repack may ask for
    history: int = 20  # plans kept for GET /api/v1/repack/plans
    excluded_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES
    # Pending pods of these schedulers are the ones repacked for; empty: every scheduler.
    managed_schedulers: frozenset[str] = frozenset({"carico-scheduler"})
    workers: int = 0  # CP-SAT workers, 0: every core
    seed: int = 0
    # the balancing engine: the goal of its periodic runs, their period (0: on demand only),
    # and the bounds and minimum gain of every balancing run
    balance_goal: str = "balance"
    balance_period: float = 0.0
    balance_limits: Limits = field(default_factory=Limits)
    exclude_label: str = EXCLUDE_LABEL

    def __post_init__(self) -> None:
        if self.balance_goal not in GOALS:
            raise ValueError(f"unknown balance goal {self.balance_goal!r}; choose from {GOALS}")
        if not self.balance_period >= 0:
            raise ValueError("the balance period must be >= 0 seconds")
        if self.mode not in MODES:
            raise ValueError(f"unknown repack mode {self.mode!r}; choose from {MODES}")
        if not self.debounce >= 0 or not self.cooldown >= 0:
            raise ValueError("repack debounce and cooldown must be >= 0 seconds")
        if not 0 < self.time_limit <= self.max_time_limit:
            raise ValueError(f"repack time limit must be in (0, {self.max_time_limit}] seconds")
        if self.history < 1:
            raise ValueError("repack history must keep at least one plan")


@dataclass
class PlanRecord:
    """One run as ``GET /api/v1/repack/plans`` shows it."""

    id: int
    timestamp: float  # wall clock, seconds since the epoch, when the run started
    trigger: str
    mode: str  # what this run was allowed to do: dry-run or apply
    status: str  # the plan's status, or ERROR when no plan came out
    pending: tuple[str, ...] = ()
    plan: dict[str, Any] | None = None
    error: str = ""
    execution: dict[str, Any] | None = None
    goal: str = PLACE  # the engine's mode: place, or a balancing goal

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "timestamp": round(self.timestamp, 3),
            "trigger": self.trigger,
            "mode": self.mode,
            "goal": self.goal,
            "status": self.status,
            "pending": list(self.pending),
            "error": self.error,
            "plan": self.plan,
            "execution": self.execution,
        }


# The solver process's nice value. It shares the extender container's CPU (one cgroup) with the
# process answering kube-scheduler; a solve is background work and its CP-SAT threads must not
# delay a filter, prioritize or bind answer (docs/architecture.md#repack-execution).
SOLVER_NICENESS = 10


def lower_priority() -> None:
    """A solver process's first step: it yields the CPU to the extender's own process."""
    os.nice(SOLVER_NICENESS)


def load_solver() -> None:
    """Imports the solver, compiling its numba kernels where no cache holds them: done once, in
    the solver process, when the extender starts, never on the extender's event loop."""
    import repack.driver.balance
    import repack.driver.solver  # noqa: F401


def solver_process_pool() -> Executor:
    """One spawned worker process for solves (spawn: the extender has threads, fork is unsafe),
    at a lower priority than the extender's process."""
    return ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=lower_priority,
    )


class RepackService:
    def __init__(
        self,
        settings: RepackSettings,
        fetch: Fetch,
        metrics: ExtenderMetrics,
        *,
        runner: PlanRunner | None = None,
        footprints: Footprints | None = None,
        executor: Callable[[], Executor] = solver_process_pool,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if settings.mode == "off":
            raise ValueError("repack mode is off: do not create a RepackService")
        if settings.mode == "apply" and runner is None:
            raise ValueError(
                "--repack-mode apply needs a plan executor, and none is configured in this "
                "build; use --repack-mode dry-run"
            )
        self.settings = settings
        self.fetch = fetch
        self.metrics = metrics
        self.runner = runner
        self.footprints = footprints
        self.clock = clock
        self.wall = wall
        self.trigger = Trigger(settings.debounce, settings.cooldown, settings.managed_schedulers)
        self._new_executor = executor
        self._executor: Executor | None = None
        self._history: deque[PlanRecord] = deque(maxlen=settings.history)
        self._ids = 0
        self._busy = ""  # what is in progress: "" (nothing), "computing", "executing"
        self._execution: asyncio.Task[None] | None = None
        self._balanced_at: float | None = None  # the last periodic balancing run
        self._balanced_state: str | None = None  # the cluster state it solved

    # -- the trigger's feed (the watch of unbound Pending pods) ---------------------------

    def on_unscheduled_list(self, pods: list[Unscheduled]) -> None:
        self.trigger.relist(pods, self.clock())
        self.metrics.repack_unschedulable.set(self.trigger.unschedulable)

    def on_unscheduled_event(self, pod: Unscheduled) -> None:
        self.trigger.observe(pod, self.clock())
        self.metrics.repack_unschedulable.set(self.trigger.unschedulable)

    # -- runs -----------------------------------------------------------------------------

    @property
    def busy(self) -> str:
        return self._busy

    def plans(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The last plans, newest first."""
        records = list(reversed(self._history))
        return [r.to_dict() for r in records[: limit if limit is not None else len(records)]]

    def status(self) -> dict[str, Any]:
        stuck = self.trigger.stuck(self.clock())
        s = self.settings
        return {
            "mode": s.mode,
            "in_progress": self._busy or None,
            "unschedulable": self.trigger.unschedulable,
            "stuck": len(stuck),
            "stuck_pods": stuck[:STATUS_PODS],
            "debounce_seconds": s.debounce,
            "cooldown_seconds": s.cooldown,
            "time_limit_seconds": s.time_limit,
            "executor": self.runner is not None,
            "balance": {
                "goal": s.balance_goal,
                "period_seconds": s.balance_period,
                "max_moves": s.balance_limits.max_moves,
                "max_nodes": s.balance_limits.max_nodes,
                "max_share": s.balance_limits.max_share,
                "min_gain": GoalSpec(s.balance_goal, s.balance_limits).min_gain,
                "exclude_label": s.exclude_label,
            },
        }

    async def tick(self) -> PlanRecord | None:
        """Start an automatic run if one is due (and none is in progress): pending pods stuck
        past the debounce first, else a periodic balancing run."""
        if self._busy:
            return None
        now = self.clock()
        if self.trigger.due(now):
            return await self.run(TRIGGER_UNSCHEDULABLE)
        period = self.settings.balance_period
        if period > 0 and (self._balanced_at is None or now - self._balanced_at >= period):
            self._balanced_at = now
            return await self.run(TRIGGER_PERIOD, mode=self.settings.balance_goal)
        return None

    async def run(
        self,
        trigger: str,
        *,
        time_limit: float | None = None,
        dry_run: bool = False,
        mode: str = PLACE,
    ) -> PlanRecord | None:
        """Compute a plan now; in apply mode (unless ``dry_run``) start executing it.

        Returns the run's record, or None when an automatic run found the state already solved.
        Raises ``RunInProgress`` when a run is computing or executing.
        """
        if self._busy:
            raise RunInProgress(f"a repack run is already {self._busy}")
        self._busy = "computing"
        executing = False
        try:
            record, computed = await self._compute(trigger, time_limit, dry_run, mode)
            if record is None or computed is None:
                return record
            plan, snapshot = computed.plan, computed.snapshot
            if (
                record.mode == "apply"
                and plan is not None
                and snapshot is not None
                and plan.improved
                and self.runner is not None
            ):
                record.execution = {"state": "running"}
                self._busy = "executing"
                executing = True
                self._execution = asyncio.create_task(
                    self._execute(self.runner, record, plan, snapshot), name="repack-execution"
                )
            return record
        finally:
            if not executing:
                self._busy = ""

    async def _compute(
        self, trigger: str, time_limit: float | None, dry_run: bool, goal: str = PLACE
    ) -> tuple[PlanRecord | None, Computed | None]:
        from repack.driver.options import SolveOptions
        from repack.problem.snapshot import SnapshotError
        from scheduler_ext.repack.live import compute

        s = self.settings
        started = self.clock()
        mode = "dry-run" if dry_run or s.mode == "dry-run" else "apply"
        options = SolveOptions(
            time_limit=time_limit or s.time_limit, workers=s.workers, seed=s.seed
        )
        # An automatic run skips a state already solved; an operator's request always solves.
        # Balancing runs keep their own record of it, and leave the pending pods' trigger be.
        spec = GoalSpec(goal, s.balance_limits, s.exclude_label) if goal != PLACE else None
        ran = self.trigger.ran if spec is None else (lambda *_: None)
        if spec is None:
            unless = self.trigger.last_fingerprint if trigger == TRIGGER_UNSCHEDULABLE else None
        else:
            unless = self._balanced_state if trigger == TRIGGER_PERIOD else None
        stamp = self.wall()
        footprints = dict(self.footprints()) if spec is not None and self.footprints else {}
        try:
            raws = await self.fetch()
        except Exception as exc:
            ran(started)
            return self._failed(trigger, mode, stamp, f"cannot list the cluster: {exc}", goal), None
        loop = asyncio.get_running_loop()
        try:
            computed = await loop.run_in_executor(
                self._pool(),
                compute,
                raws,
                options,
                s.excluded_namespaces,
                s.managed_schedulers,
                unless,
                spec,
                footprints,
            )
        except SnapshotError as exc:
            ran(started)
            return self._failed(trigger, mode, stamp, f"cannot read the cluster: {exc}", goal), None
        except BrokenProcessPool as exc:
            # The worker died (killed, out of memory): a fresh one next time.
            self._executor = None
            ran(started)
            return self._failed(trigger, mode, stamp, f"solver process died: {exc}", goal), None
        except Exception as exc:
            log.exception("repack solve failed")
            ran(started)
            return self._failed(trigger, mode, stamp, f"solve failed: {exc}", goal), None
        ran(started, computed.fingerprint)
        if spec is not None and trigger == TRIGGER_PERIOD:
            self._balanced_state = computed.fingerprint
        if computed.plan is None:
            log.debug("repack skipped: the cluster is as it was at the last run")
            return None, None
        record = self._record(trigger, mode, stamp, computed.plan, computed.pending, goal)
        return record, computed

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _failed(
        self, trigger: str, mode: str, stamp: float, error: str, goal: str = PLACE
    ) -> PlanRecord:
        record = PlanRecord(self._next_id(), stamp, trigger, mode, "ERROR", error=error, goal=goal)
        self._history.append(record)
        self.metrics.repack_runs.labels(trigger, "ERROR").inc()
        log.warning(
            "repack #%d (%s) failed: %s",
            record.id,
            trigger,
            error,
            extra={"repack_id": record.id, "trigger": trigger, "status": "ERROR"},
        )
        return record

    def _record(
        self,
        trigger: str,
        mode: str,
        stamp: float,
        plan: Plan,
        pending: tuple[str, ...],
        goal: str = PLACE,
    ) -> PlanRecord:
        from repack.problem.plan import to_dict

        record = PlanRecord(
            self._next_id(), stamp, trigger, mode, plan.status, pending, to_dict(plan), goal=goal
        )
        if plan.goal is not None:
            self.metrics.repack_goal_measure.labels(goal).set(plan.goal.before)
        self._history.append(record)
        m = self.metrics
        m.repack_runs.labels(trigger, plan.status).inc()
        m.repack_solve.observe(plan.solve_seconds)
        counts = {
            "move": len(plan.moves),
            "placement": len(plan.placements),
            "eviction": len(plan.evictions),
        }
        for kind, count in counts.items():
            m.repack_plan_actions.labels(kind).set(count)
        steps = "; ".join(
            f"{s.action} {s.pod}" + (f" {s.from_node or '(pending)'} -> {s.to_node or '(gone)'}")
            for s in plan.steps
        )
        log.info(
            "repack #%d (%s, %s): %s in %.2f s, %d move(s), %d placement(s), %d eviction(s)%s",
            record.id,
            trigger,
            mode,
            plan.status,
            plan.solve_seconds,
            counts["move"],
            counts["placement"],
            counts["eviction"],
            f": {steps}" if steps else "",
            extra={
                "repack_id": record.id,
                "trigger": trigger,
                "mode": mode,
                "status": plan.status,
                "optimal": plan.optimal,
                "solve_seconds": round(plan.solve_seconds, 3),
                "pending": list(pending),
                "moves": counts["move"],
                "placements": counts["placement"],
                "evictions": counts["eviction"],
                "steps": record.plan["steps"] if record.plan else [],
            },
        )
        return record

    async def _execute(
        self, runner: PlanRunner, record: PlanRecord, plan: Plan, snapshot: Snapshot
    ) -> None:
        report: ExecutionReport
        try:
            report = await runner.run(plan, snapshot)
        except asyncio.CancelledError:
            record.execution = ExecutionReport("aborted", "extender shutting down").to_dict()
            self.metrics.repack_executions.labels("aborted").inc()
            raise
        except Exception as exc:
            log.exception("repack #%d: the plan executor failed", record.id)
            report = ExecutionReport("aborted", f"executor failed: {exc}")
        finally:
            self._busy = ""
        record.execution = report.to_dict()
        self.metrics.repack_executions.labels(report.outcome).inc()
        log.info(
            "repack #%d execution %s%s",
            record.id,
            report.outcome,
            f": {report.reason}" if report.reason else "",
            extra={"repack_id": record.id, "execution": report.outcome, "reason": report.reason},
        )

    # -- lifecycle ------------------------------------------------------------------------

    def _pool(self) -> Executor:
        """The solver process pool, started when first needed (again after a worker died)."""
        if self._executor is None:
            self._executor = self._new_executor()
            # its search is compiled at import: seconds, in every process where no cache can be
            # written; queued first, so a run never pays for it inside its time limit
            self._executor.submit(load_solver)
        return self._executor

    async def run_background(self, watch: UnscheduledWatch | None, every: float = 1.0) -> None:
        """The trigger's pod watch and a check every ``every`` seconds; runs until cancelled."""
        self._pool()  # the solver process starts and loads the solver now, not at the first run
        watcher: asyncio.Task[None] | None = (
            asyncio.create_task(
                watch(self.on_unscheduled_list, self.on_unscheduled_event), name="repack-watch"
            )
            if watch is not None
            else None
        )
        try:
            while True:
                await asyncio.sleep(every)
                if watcher is not None and watcher.done():
                    watcher.result()  # a crashed watch must not leave the trigger blind
                try:
                    await self.tick()
                except Exception:  # a repacker bug must not take the extender down with it
                    log.exception("automatic repack run failed")
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)

    async def close(self) -> None:
        if self._execution is not None and not self._execution.done():
            self._execution.cancel()
            await asyncio.gather(self._execution, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
