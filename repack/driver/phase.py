"""One phase while it runs (``PhaseState``) and how it ends (``PhaseResult`` and its report).

A phase of tier p maximises the pods placed at priority >= p (``place``) or minimises the
disruption there (``disrupt``), from an incumbent, within the seconds the budget gives it. Its
state is what it has found so far (``best``), the proven bound on its value, the cut it passes to
a search, its last whole-model search's result and the steps it took; the strategies in
``place`` and ``disrupt`` update it, and the functions here end it with a ``PhaseReport`` (a
disrupt phase's result that no search proved is first relabelled on interchangeable nodes to
move fewer pods).
See ``docs/architecture.md#repack-phases``. Neighbours: ``context`` (what the phases share),
``dispatch`` (which starts a phase and picks its strategy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ortools.sat.python import cp_model

from repack.cpsat.model import Fix
from repack.driver.context import SolveContext, better
from repack.driver.options import Clock
from repack.driver.search import NOT_RUN, SearchResult, SearchThread, StopAt
from repack.problem.classes import Assignment, Problem, disruption_at, placed_at
from repack.problem.plan import PhaseReport, PhaseStep


class PhaseResult(NamedTuple):
    """How a phase ended: its solution (None when it has none), the solution's value and
    whether that value is proven optimal."""

    solution: Assignment | None
    value: int
    optimal: bool


@dataclass
class PhaseState:
    """A phase of ``kind`` ("place" or "disrupt") at ``tier`` while it runs."""

    problem: Problem
    tier: int
    kind: str
    fixes: Sequence[Fix]  # the values the tiers above (and a place phase of this tier) settled
    incumbent: Assignment | None  # what the phase starts from
    hint: Assignment  # the search's hint: the best assignment the phase has handed on so far
    bound: int  # the proven bound on the phase's value (upper when placing, lower else)
    started: float
    seconds: float  # the phase's time (a place phase may hand part of it on: ``deadline``)
    deadline: float
    best: Assignment | None = None
    cut: int | None = None  # a proven bound handed to the search (a constraint or a stop)
    search: SearchResult = NOT_RUN  # the last whole-model search's result
    steps: list[PhaseStep] = field(default_factory=list)

    @property
    def maximise(self) -> bool:
        return self.kind == "place"

    def value(self, x: Assignment) -> int:
        """The phase's objective for x: placed pods, or disruption, at priority >= tier."""
        if self.maximise:
            return placed_at(self.problem, x, self.tier)
        return disruption_at(self.problem, x, self.tier)

    def met(self) -> bool:
        """Whether the best assignment meets the bound: the phase is proven."""
        return self.best is not None and self.value(self.best) == self.bound

    def take(self, found: Assignment | None) -> None:
        """Keeps ``found`` when it is better than the best so far (``tier_value``)."""
        self.best = better(self.problem, self.tier, found, self.best)

    def absorb(self, result: SearchResult) -> None:
        """Takes a whole-model search's solution and bound, and keeps its result."""
        self.search = result
        self.take(result.solution)
        bound = result.bound(self.maximise)
        if bound is not None:
            self.bound = min(self.bound, bound) if self.maximise else max(self.bound, bound)

    def step(
        self,
        name: str,
        produced: Assignment | None = None,
        bound: int | None = None,
        cores: int = 1,
    ) -> int:
        """Records a step and what it produced (its index, to fill in a step that ends later)."""
        value = None if produced is None else self.value(produced)
        self.steps.append(PhaseStep(name, value, bound, cores))
        return len(self.steps) - 1


def report(
    ctx: SolveContext,
    st: PhaseState,
    status: str,
    value: int,
    bound: int,
    skipped: bool = False,
    lexicographic: bool = False,
) -> None:
    ctx.reports.append(
        PhaseReport(
            st.tier,
            st.kind,
            status,
            ctx.clock() - st.started,
            value,
            bound,
            skipped,
            lexicographic,
            tuple(st.steps),
        )
    )


def proven(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """Ends a phase whose best assignment met its bound."""
    report(ctx, st, "OPTIMAL", st.bound, st.bound)
    return PhaseResult(st.best, st.bound, True)


def infeasible(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """Ends a phase whose search proved that no assignment meets its fixes."""
    report(ctx, st, "INFEASIBLE", 0, st.bound)
    return PhaseResult(None, 0, False)


def kept(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """Ends a phase without a step (its incumbent met the bound, or it has no time for one): it
    keeps its incumbent, OPTIMAL when that meets the bound."""
    if st.incumbent is None:
        report(ctx, st, "UNKNOWN", 0, st.bound, skipped=True)
        return PhaseResult(None, 0, False)
    value = st.value(st.incumbent)
    proof = value == st.bound
    report(ctx, st, "OPTIMAL" if proof else "FEASIBLE", value, st.bound, skipped=True)
    return PhaseResult(st.incumbent, value, proof)


def conclude(ctx: SolveContext, st: PhaseState, result: SearchResult) -> PhaseResult:
    """Ends a phase with its last whole-model search's result: INFEASIBLE when the search
    proved it, else ``finish`` with what the search found."""
    if result.status == cp_model.INFEASIBLE:
        return infeasible(ctx, st)
    st.absorb(result)
    return finish(ctx, st)


def finish(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """Ends a phase with its best assignment (a disrupt phase's relabelled to move fewer pods
    unless its search proved it): OPTIMAL when it meets the bound or the search proved it."""
    if st.best is None:
        report(ctx, st, "UNKNOWN", 0, st.bound)
        return PhaseResult(None, 0, False)
    by_search = st.search.status == cp_model.OPTIMAL and st.best is st.search.solution
    best = st.best
    if not st.maximise and not by_search:
        best = ctx.relabelled(best, st.fixes, st.tier)
    value = st.value(best)
    optimal = value == st.bound or by_search
    lexicographic = st.maximise and st.search.weight > 1 and by_search
    report(ctx, st, "OPTIMAL" if optimal else "FEASIBLE", value, st.bound, False, lexicographic)
    return PhaseResult(best, value, optimal)


def search_step(
    ctx: SolveContext,
    st: PhaseState,
    seconds: float,
    cut: int | None,
    hint: Assignment | None = None,
) -> SearchResult:
    """The phase's whole-model search for ``seconds`` from ``hint`` (default: the phase's),
    with ``cut`` (``WholeSearch.run``), recorded as a step when it ran."""
    result = ctx.search.run(
        st.tier, st.maximise, st.fixes, st.hint if hint is None else hint, seconds, cut
    )
    if result.ran:
        cores = ctx.options.workers or ctx.cores
        st.step("cp-sat", result.solution, result.bound(st.maximise), cores)
    return result


class Beside(NamedTuple):
    """A search started in a thread beside the caller's work: the thread (None when the search
    was declined), the clock of the work beside it (which ends with the search) and the index of
    its step (filled in when it ends)."""

    thread: SearchThread | None
    clock: Clock
    step: int


def search_beside(
    ctx: SolveContext, st: PhaseState, hint: Assignment, seconds: float, stopper: StopAt
) -> Beside:
    """The whole-model search started in a thread on all cores but one; no thread when its
    model could not be built in time, and the work beside it then has the phase."""
    ctx.search.forget_running()
    if not ctx.search.searchable(st.tier, seconds):
        return Beside(None, ctx.clock, -1)
    workers = ctx.cores - 1
    thread = SearchThread(
        lambda: ctx.search.run(
            st.tier, st.maximise, st.fixes, hint, seconds, None, workers, stopper
        )
    )
    index = st.step("cp-sat", cores=workers)
    return Beside(thread, thread.clock(ctx.clock), index)


def searched(
    ctx: SolveContext, st: PhaseState, beside: Beside, met: Callable[[], bool]
) -> SearchResult:
    """The search's result once it ends, stopped early when ``met()``; NOT_RUN when it did not
    run. Its step gets what it found."""
    if beside.thread is None:
        return NOT_RUN
    result = beside.thread.result(met, ctx.search.stop)
    value = None if result.solution is None else st.value(result.solution)
    bound = result.bound(st.maximise)
    st.steps[beside.step] = replace(st.steps[beside.step], value=value, bound=bound)
    return result
