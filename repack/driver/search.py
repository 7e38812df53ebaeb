"""The whole-model CP-SAT search of a phase, on one thread or beside other work.

``WholeSearch`` builds a tier's phase model (``cpsat.model.PhaseModels``: the tier's model is
built once and copied per phase), adds the phase's fixes, cut and objective, hints it and runs
CP-SAT; it declines a search that would spend its time building its model. A disrupt phase's two
searches on the same fixes share one build. ``SearchThread`` runs a search in a thread (CP-SAT
releases the GIL) while the caller's thread works on; ``StopAt`` and ``StopAbove`` end a search
once it meets a bound proven by that other work. See ``docs/architecture.md#repack-phases``.
Neighbours: ``phase`` (the state a search reports to), ``place`` and ``disrupt`` (which call it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ortools.sat.python import cp_model

from repack.cpsat.model import Fix, PhaseModel, PhaseModels
from repack.cpsat.run import configured, found
from repack.driver.options import Clock, SolveOptions
from repack.problem.classes import EVICT_COST, Assignment, Problem


class SearchResult(NamedTuple):
    """What a whole-model search returned: CP-SAT's status, its solution (None without one), its
    objective bound (None without a solution), the placed count's weight in the objective
    (above 1 with the disruption tie-break: placed <= (bound + disruption) / weight), and
    whether it ran at all (a search without the time to build its model is declined)."""

    status: Any
    solution: Assignment | None = None
    objective_bound: int | None = None
    weight: int = 1
    ran: bool = True

    def bound(self, maximise: bool) -> int | None:
        """The objective bound in the phase's terms: placed pods, or disruption."""
        raw = self.objective_bound
        if raw is None or not maximise:
            return raw
        return (raw + self.weight - 1) // self.weight  # disruption < weight


NOT_RUN = SearchResult(cp_model.UNKNOWN, ran=False)


class StopAt(cp_model.CpSolverSolutionCallback):
    """Stops a minimisation once its objective reaches a bound proven elsewhere."""

    def __init__(self, bound: int) -> None:
        super().__init__()
        self.bound = bound  # may be raised from another thread while the search runs
        self.best = float("inf")

    def on_solution_callback(self) -> None:
        self.best = min(self.best, self.objective_value)
        if self.objective_value <= self.bound + 1e-9:
            self.stop_search()


class StopAbove(StopAt):
    """Stops a maximisation (a place phase's search) once its objective reaches a bound proven
    elsewhere (the pattern LP, computed while the search runs)."""

    def __init__(self, bound: int) -> None:
        super().__init__(0)
        self.bound = bound  # may be lowered from another thread while the search runs
        self.best = -float("inf")

    def on_solution_callback(self) -> None:
        self.best = max(self.best, self.objective_value)
        if self.objective_value >= self.bound - 1e-9:
            self.stop_search()


class SearchThread:
    """A search run in a thread (CP-SAT releases the GIL) beside work in the caller's thread;
    its exception is re-raised in the caller's thread by ``result``."""

    def __init__(self, search: Callable[[], SearchResult]) -> None:
        self._out: list[SearchResult] = []
        self._failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(search,), daemon=True)
        self._thread.start()

    def _run(self, search: Callable[[], SearchResult]) -> None:
        try:
            self._out.append(search())
        except BaseException as exc:
            self._failed.append(exc)

    def clock(self, clock: Clock) -> Clock:
        """``clock`` while the search runs, then infinity: work beside it ends with it."""
        return lambda: clock() if self._thread.is_alive() else float("inf")

    def result(self, met: Callable[[], bool], stop: Callable[[], None]) -> SearchResult:
        """Waits for the search, calling ``stop`` while ``met()`` (it may still be building
        its model when the other side meets the bound)."""
        while self._thread.is_alive():
            if met():
                stop()
            self._thread.join(0.01)
        if self._failed:
            raise self._failed[0]
        return self._out[0]


class WholeSearch:
    """The whole-model searches of one solve (their models, and the search running now)."""

    def __init__(self, problem: Problem, options: SolveOptions, clock: Clock) -> None:
        self.problem = problem
        self.options = options
        self.clock = clock
        self.models = PhaseModels(options.formulation, problem)
        self._built: tuple[tuple[Any, ...], PhaseModel] | None = None
        self._solver: cp_model.CpSolver | None = None  # the search running now, to stop it

    def searchable(self, tier: int, seconds: float) -> bool:
        """Whether a search of the tier gets twice the time to build and hint its model (on 128
        nodes with eight pods per node that alone takes 1.5 s: no search, rather than an
        overrun; on 32 nodes a search started with 0.04-0.05 s left found nothing)."""
        per_variable = self.options.tuning.setup_seconds_per_variable
        return 2 * per_variable * self.models.variables(tier) <= seconds

    def stop(self) -> None:
        """Stops the search running now, if any."""
        if self._solver is not None:
            self._solver.stop_search()

    def forget_running(self) -> None:
        """No search runs now (one about to start in a thread sets its own)."""
        self._solver = None

    def run(
        self,
        tier: int,
        maximise: bool,
        fixes: Sequence[Fix],
        hint: Assignment,
        seconds: float,
        cut: int | None,
        workers: int | None = None,
        stopper: StopAt | None = None,
    ) -> SearchResult:
        """One CP-SAT solve of the phase. ``cut``: a proven bound (a constraint when
        maximising; when minimising, the search stops once a solution meets it). ``workers``
        overrides the option (a search running beside other work leaves it a core)."""
        problem, options, started = self.problem, self.options, self.clock()
        symmetry = options.symmetry and options.formulation == "classes" and maximise and not fixes
        # placed first, disruption as tie-break: placed weighs more than the largest disruption
        weight = 1
        if maximise and options.tie_break:
            weight += EVICT_COST * sum(c.n_running for c in problem.classes if c.priority >= tier)
        # a disrupt phase searches twice on the same model (its cut is a callback, not a
        # constraint): building it once saves a large share of a short budget
        key = (tier, maximise, tuple(fixes))
        reuse = self._built is not None and self._built[0] == key and not maximise
        if not reuse and not self.searchable(tier, seconds):
            return SearchResult(cp_model.UNKNOWN, None, None, weight, ran=False)
        if reuse and self._built is not None:
            pm = self._built[1]
        else:
            pm = self.models.build(tier, fixes, symmetry)
            if cut is not None and maximise:
                pm.model.add(pm.placed_ge(tier) <= cut)  # a proven bound, as a cut
            if maximise and options.tie_break:
                pm.model.maximize(weight * pm.placed_ge(tier) - pm.disruption_ge(tier))
            elif maximise:
                pm.model.maximize(pm.placed_ge(tier))
            else:
                pm.model.minimize(pm.disruption_ge(tier))
            self._built = (key, pm)
        pm.hint(hint)
        # the model build counts against the time
        least = options.tuning.min_step_seconds
        solver = configured(
            max(least, seconds - (self.clock() - started)),
            options.workers if workers is None else workers,
            random_seed=options.seed,
        )
        if stopper is None and cut is not None and not maximise:
            # a proven lower bound: stop as soon as a solution meets it (as a constraint it
            # slows the search down)
            stopper = StopAt(cut)
        self._solver = solver
        status = solver.solve(pm.model, stopper)
        if not found(status):
            return SearchResult(status, None, None, weight)
        return SearchResult(
            status, pm.read(solver), int(round(solver.best_objective_bound)), weight
        )
