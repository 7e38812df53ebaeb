"""The lexicographic tier loop: from a snapshot to a checked Plan (DESIGN §4.3).

For each priority tier p, highest first, two phases run on a model of the classes with priority
>= p: *place* maximises the pods placed at priority >= p, then *disrupt* minimises the disruption
of running pods at priority >= p (move 1, eviction 2). Each result is fixed for the later phases
(== when proven optimal, >= or <= when only feasible). Lower tiers are left out of a tier's model
because they cannot change its objectives, which keeps the early phases small.

Every phase starts from an incumbent: the previous phase's solution completed for the new tier by
the best of the starting heuristics (``heuristics.best_start``). It is the solver's hint, and when
it already meets a simple bound (every pod placed; no more disruption than already fixed) the
phase is proven without calling CP-SAT.

A place phase of the class formulation whose patterns do not list within LIST_SHARE of it (eight
pods per node; many small classes) first gets the swap search (``swap_search``: single moves of pods
off overloaded nodes with breakout weights, compiled, which finds the last pods of tight packings
in hundredths of a second), then keeps UNLISTED_PROOF_SHARE of what is left for the searches that
may prove its count, and hands the rest on; every LNS call of a place phase also starts with it.
A place phase first gets the pattern-LP bound of ``bounds`` when every node group's maximal
patterns can be listed (``patterns``; about four pods per node): priced exactly,
that LP bounds the phase tightly, and in the first tier its dive packs to the bound, which proves
the phase at once. A lower tier dives too when the tiers above may disrupt nothing (their disruption
settled at 0): the LP then works without their running pods, which stay where they are (``_Frozen``,
``classes.freeze_above``). Otherwise, or when that does not prove it, a place phase that CP-SAT does
not prove quickly (on 12 nodes or more: before CP-SAT) gets a large-neighbourhood search on the
tier's pods (``lns``), then the pattern-LP bound (used as a cut, and as a proof when the incumbent
meets it) and a price-and-branch packing from the generated patterns. On SHORT_MIN_NODES nodes or
more with less than MIN_BOUND_SECONDS for the phase, LNS is followed by one search with all the time
left and no pattern bound (it would not converge in that time). On several cores a place phase on
PLACE_BESIDE_MIN_NODES nodes or more runs instead (``_place_side_by_side``): the pattern LP and its
dive alone first (all of a short phase on SHORT_MIN_NODES nodes when the tier dives, after a
quick swap search whose packing is kept in case the dive runs out of time; the bound share in a
lower tier that does not), then, unless that proved the phase, the search in a thread on all
cores but one until the phase ends, beside the LNS (and, with time, the knapsack-priced pattern
LP); a bound met by either side stops the other, and the phase ends when the search does.

A disrupt phase of the class formulation gets the per-node pattern-LP lower bound of
``disruption_bound`` (a proof when the incumbent meets it), its LP dive and its packing, on 12 nodes
or more an LNS that undoes moves (first the swap search's iterated undoing of moves,
``swap_search.undo_moves``, one chain a core when no search runs beside it, the chains after the
first and every stuck run starting from a fresh packing, then CP-SAT refills of neighbourhoods),
then one search with that bound as a cut; on SHORT_MIN_NODES nodes or more with less than
MIN_BOUND_SECONDS, only the LNS (unless the tiers above are frozen and what they leave lists
quickly, or the tier is the top one, its place phase listed the patterns and the phase has
QUICK_TOP_SECONDS a node: ``_quick_bound``), and so on 8 nodes or more whose place phase found
that the patterns do not list. Otherwise, on several cores, that search runs in a
thread from the start (``_side_by_side``), beside the bound with its dive and packing (on 12 nodes
or more only when every node is priced from listed maximal patterns, which is exact and fast: on 16
identical nodes with four pods per node the dive meets the bound, a proof, in a few tenths of a
second) and then the LNS; the bound stops the search as soon as a solution meets it. On
SHORT_MIN_NODES nodes or more whose place phase listed the patterns (kept in ``Listings`` for the
solve), the bound and its dives run alone first and the search starts only if they leave the phase
unproven. Below frozen tiers the bound works on the frozen problem, as the place phase's does.

Solutions that may carry arbitrary node labels (place-phase results, LNS and price-and-branch
outputs, a disrupt phase's result) are relabelled on interchangeable nodes (``relabel``) to move
the fewest pods.

One global time budget is shared out across the remaining phases in proportion to their size
(a place phase weighs PLACE_WEIGHT times its disrupt phase);
whatever a phase leaves unused flows on. A phase that runs out of time keeps the best of incumbent
and solver solution, so a plan is never worse than the greedy one. The plan is then mapped to
pods, sequenced and checked by ``checker``; a plan that fails the check is replaced by an ERROR
result and never returned.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ortools.sat.python import cp_model

from repack.bounds.disruption import disruption_bound, disruption_solution
from repack.bounds.patterns import MAX_STATES, Listings
from repack.bounds.placement import STATES_PER_SECOND, pattern_solution, placement_bound
from repack.cpsat import lns
from repack.cpsat.model import FORMULATIONS, Fix, PhaseModel, PhaseModels
from repack.problem import checker
from repack.problem.classes import (
    EVICT_COST,
    Assignment,
    Problem,
    build_problem,
    current_assignment,
    disruption_at,
    feasible,
    freeze_above,
    greedy_complete,
    placed_at,
    pods_for,
    tier_value,
)
from repack.problem.plan import (
    Eviction,
    Move,
    PhaseReport,
    Placement,
    Plan,
    empty_plan,
    outcome,
)
from repack.problem.sequencing import SequencingError, sequence
from repack.problem.snapshot import Snapshot
from repack.search import swap_search
from repack.search.heuristics import best_start, reduce_moves, repair
from repack.search.relabel import node_groups, relabel

Clock = Callable[[], float]
# at most this share of a place phase's time goes to the pattern-LP bound
BOUND_SHARE = 0.3
# with pattern bounds, a place phase first tries this share of its time without them
QUICK_SHARE = 0.15
# a disrupt phase of the class formulation first searches for this share of its time
QUICK_DISRUPT_SHARE = 0.3
PACK_SHARE = 0.2
# a place phase of the class formulation first spends up to this share of its time on the
# pattern LP bound and its dive
PATTERN_SHARE = 0.8
# a place phase not proven by its quick search spends this share of what is left on LNS
LNS_SHARE = 0.5
LNS_DISRUPT_SHARE = 0.3
# a place phase of the class formulation first gives the swap search up to this share of its time
SWAP_SHARE = 0.25
# a place phase whose patterns do not list keeps this share of what the swap search leaves of
# it, for the searches that may prove its count. Measured against the whole phase on the 96
# grid instances at 1 s (two runs each): the same pods placed in every instance, and the
# disrupt phases that get the rest moved fewer pods (n32-ppn8-u100-k2: 24 and 29 moves against
# 30 and 30); at 10 s, the 48 cells with 8 pods per node were proven as often (35) even with
# no share at all
UNLISTED_PROOF_SHARE = 0.2
# a disrupt phase's LNS first gives this share of its time to the swap search's iterated undoing
# of moves (``swap_search.undo_moves``). Measured at 10 s on the 30 hardest grid instances, 8-32
# nodes, against LNS alone after packings rebuilt from where the pods run: 10 end with fewer
# moves, none with more, 720 moves in all against 806. Since its stuck runs start again from
# fresh packings it makes better use of more of the time: with 0.9 against 0.7, the 96 grid
# instances at 1 s reach the best-known outcome 86.25 times a run against 85.5 (four seeds), the
# 18 whose outcome varies 13.9 times against 13.4 (eight other seeds), the 30 hardest at 10 s
# 25 against 23 (no instance worse)
UNDO_SHARE = 0.9
# on this many nodes a phase with less than MIN_BOUND_SECONDS changes course: a place phase runs
# LNS then one search without the pattern LP (on 32 nodes it kept the trivial bound), a disrupt
# phase is all LNS, no CP-SAT search (on 32 nodes such searches returned no solution within
# 0.3 s, presolve alone took 0.2-0.3 s, and overran their limit); on 16 nodes both the pattern
# LP and the searches often prove the phase within a second (where its patterns list: see
# ``_Phases.run`` for those that do not)
SHORT_MIN_NODES = 24
# the share of a short disrupt phase a try at listing its frozen problem's patterns may take
LIST_SHARE = 0.25
LNS_MIN_NODES = 12
# ... and from this many nodes where the place phase found that the patterns do not list (eight
# pods per node), a sub-second disrupt phase is left to the undoing of moves: on 8 nodes too,
# the search beside it found nothing the undoing did not (96 grid instances at 1 s, four seeds
# run alternately: n8-ppn8-u105-k1 reached the least known 8 moves with every seed, against
# none; the other 8-node instances unchanged)
UNLISTED_SHORT_MIN_NODES = 8
HEURISTIC_SHARE = 0.25
# the time kept for making the plan once the phases end: this much a pod, at most this share
PLAN_SECONDS_PER_POD = 60e-6
PLAN_RESERVE_SHARE = 0.1
# seconds to build, copy and hint a phase model, per placement variable (measured 15-22 us to
# build and 10 us to copy and hint, 16 to 128 nodes on a 2-core machine)
SETUP_SECONDS_PER_VARIABLE = 20e-6
# a place phase gets this many times the time of its disrupt phase (placed pods come first)
PLACE_WEIGHT = 2
# a disrupt phase with less time than this goes straight to the search (the bound would starve it)
MIN_BOUND_SECONDS = 1.0
# a disrupt phase of a small cluster on several cores: the pattern-LP bound runs beside the
# search from this many seconds on, for at most this share of the phase (the LNS gets the rest)
SIDE_BOUND_SECONDS = 0.2
SIDE_BOUND_SHARE = 0.7
# ... and on SHORT_MIN_NODES or more, with listed patterns, the LP runs alone first for this share
# (measured on 32 nodes with two tiers at 1 s: with 0.7 the choice among the LP's cheapest
# columns ran out of time after the LP converged, 52 and 64 moves against 51; with 0.9 it met
# the bound in each of three runs)
ALONE_BOUND_SHARE = 0.9
# where the undoing of moves runs one chain a core, the chains after the first start from a
# fresh packing (``_Phases._fresh``), made by the swap search from the tier's pods kept where
# they run, in at most this share of the time left to ``_improve`` (a stuck chain's next run
# starts from another). Measured on the 96 grid instances at 1 s, four seeds each: 86 reach the
# best-known outcome with each seed, against 85 when every chain starts from the phase's
# incumbent (n32-ppn4-u95-k1: 18 moves with each seed, against 18 with one of four and 19
# otherwise)
FRESH_SHARE = 0.1
# a place phase on this many nodes, on several cores, runs its search beside the pattern LP and
# the LNS (``_place_side_by_side``)
PLACE_BESIDE_MIN_NODES = LNS_MIN_NODES
# ... and when it is short, with listed patterns, a swap search first takes up to this share of
# it, for a packing kept aside in case the dive runs out of time (then the phase had only its
# start: 118 pods of 127 on n32-ppn4-u100-k2 under a profiler; the swap search reaches 122-128
# there in 3-50 ms). Measured on the 96 grid instances at 1 s, four seeds: 85.5 hits a run
# against 85.0 (n32-ppn4-u105-k1 places its 123 pods with three seeds, against two). It is no
# start or target of the LP: so used, the dive from its columns failed on n32-ppn4-u100-k1
# (126 pods, not 127, with three seeds of four). When it places as many pods as the LP's bound
# the dive still runs (its first, batched, dive takes 0.05 s there): the dive's packing moves
# fewer pods, and from it the disrupt phase proves the least disruption sooner. 1 s solves of
# n32-ppn4-u100-k1, seeds 10-39, reached the best-known outcome 29 times against 22 when a
# bound met by this packing left the dive out
PRE_SWAP_SHARE = 0.1
# the least time a node for the top tier's disrupt LP to count as quick (``_quick_bound``).
# Measured on 32 nodes with four pods per node and one tier at 1 s: the LP met the least
# disruption known (37 moves, proven) in phases of 0.45-0.52 s, where the undoing of moves
# left 46-49; in phases of 0.3 s it ran out of time and left 60-63, where the undoing left 55
QUICK_TOP_SECONDS = 0.0125
# the time CP-SAT needs to build a choice of one pattern a node, per column (measured 0.054-0.094
# s for 2 300-2 450 columns on 32 nodes): a price-and-branch packing given less is not tried
PACK_SECONDS_PER_COLUMN = 40e-6
NEVER = 2**62  # an objective bound no search reaches


@dataclass(frozen=True)
class SolveOptions:
    time_limit: float = 10.0  # seconds for the whole solve, all tiers and phases
    formulation: str = "classes"
    workers: int = 0  # CP-SAT search workers; 0 = every core
    seed: int = 0
    symmetry: bool = True  # order identical nodes where that is valid (classes only)
    # place phases also minimise disruption as a tie-break (proves both at once, but the proof of
    # the placed count alone is often much faster without it)
    tie_break: bool = False
    bounds: bool = True  # pattern-LP upper bounds for the place phases (classes only)

    def __post_init__(self) -> None:
        if self.formulation not in FORMULATIONS:
            raise ValueError(f"unknown formulation {self.formulation!r}; choose {FORMULATIONS}")
        if not self.time_limit > 0:
            raise ValueError("time_limit must be positive")


def _cores(options: SolveOptions) -> int:
    """Cores the solve may use: the option, else those this process may run on."""
    if options.workers:
        return options.workers
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _restrict(problem: Problem, x: Assignment, p: int) -> Assignment:
    return [
        list(row) if cls.priority >= p else [0] * len(row)
        for row, cls in zip(x, problem.classes, strict=True)
    ]


def _first(fixes: Sequence[Fix]) -> bool:
    """Whether no tier above has settled its disruption: the phase's tier is the first."""
    return not any(f.kind == "disruption" for f in fixes)


def _satisfies(problem: Problem, x: Assignment, fixes: Sequence[Fix], tier: int) -> bool:
    """Is x a solution of the phase model at ``tier`` with these fixes?"""
    active = problem.active(tier)
    if not feasible(problem, x, active):
        return False
    for f in fixes:
        have = (
            placed_at(problem, x, f.tier)
            if f.kind == "placed"
            else disruption_at(problem, x, f.tier)
        )
        if (f.op == "==" and have != f.value) or (f.op == ">=" and have < f.value):
            return False
        if f.op == "<=" and have > f.value:
            return False
    return True


_Best = TypeVar("_Best", bound="Assignment | None")


def _better(problem: Problem, p: int, found: Assignment | None, best: _Best) -> _Best | Assignment:
    """``found`` when there is one and it is better than ``best`` at tier p (``tier_value``), else
    ``best``."""
    if found is not None and (
        best is None or tier_value(problem, found, p) > tier_value(problem, best, p)
    ):
        return found
    return best


class _StopAt(cp_model.CpSolverSolutionCallback):
    """Stops a minimisation once its objective reaches a bound proven elsewhere."""

    def __init__(self, bound: int) -> None:
        super().__init__()
        self.bound = bound  # may be raised from another thread while the search runs
        self.best = float("inf")

    def on_solution_callback(self) -> None:
        self.best = min(self.best, self.objective_value)
        if self.objective_value <= self.bound + 1e-9:
            self.stop_search()


class _StopAbove(_StopAt):
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


_SearchResult = tuple[Any, Assignment | None, int | None, int]  # status, solution, bound, weight


class _SearchThread:
    """A search run in a thread (CP-SAT releases the GIL) beside work in the caller's thread;
    its exception is re-raised in the caller's thread by ``result``."""

    def __init__(self, search: Callable[[], _SearchResult]) -> None:
        self._out: list[_SearchResult] = []
        self._failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(search,), daemon=True)
        self._thread.start()

    def _run(self, search: Callable[[], _SearchResult]) -> None:
        try:
            self._out.append(search())
        except BaseException as exc:
            self._failed.append(exc)

    def clock(self, clock: Callable[[], float]) -> Callable[[], float]:
        """``clock`` while the search runs, then infinity: work beside it ends with it."""
        return lambda: clock() if self._thread.is_alive() else float("inf")

    def result(self, met: Callable[[], bool], stop: Callable[[], None]) -> _SearchResult:
        """Waits for the search, calling ``stop`` while ``met()`` (it may still be building
        its model when the other side meets the bound)."""
        while self._thread.is_alive():
            if met():
                stop()
            self._thread.join(0.01)
        if self._failed:
            raise self._failed[0]
        return self._out[0]


class _Frozen:
    """A lower tier's phase whose higher tiers may not disrupt anything: their running pods
    stay where they are, so the pattern LPs work on ``classes.freeze_above`` (their load taken
    off the nodes) and the place phase's may dive, which moving them freely would forbid. Maps
    counts, floors and assignments between that problem and the solve's."""

    def __init__(self, problem: Problem, tier: int, frozen: Problem) -> None:
        self.original = problem
        self.problem = frozen
        self.above = [c for c, cls in enumerate(problem.classes) if cls.priority > tier]

    def held(self, q: int) -> int:
        """The running pods at priority >= q that stay by the freeze."""
        return sum(
            self.original.classes[c].n_running
            for c in self.above
            if self.original.classes[c].priority >= q
        )

    def down(self, x: Assignment) -> Assignment | None:
        """``x`` without the frozen pods, or None when it moved one of them."""
        out = self._shifted(x, -1)
        return None if any(k < 0 for c in self.above for k in out[c]) else out

    def up(self, x: Assignment) -> Assignment:
        """``x`` with the frozen pods back where they run."""
        return self._shifted(x, 1)

    def _shifted(self, x: Assignment, sign: int) -> Assignment:
        out = [list(row) for row in x]
        for c in self.above:
            for n, k in enumerate(self.original.classes[c].current):
                out[c][n] += sign * k
        return out


class _Phases:
    """Runs phases against one deadline and records their reports."""

    def __init__(
        self, problem: Problem, options: SolveOptions, clock: Clock, deadline: float | None = None
    ) -> None:
        self.problem = problem
        self.options = options
        self.clock = clock
        self.deadline = clock() + options.time_limit if deadline is None else deadline
        tiers = problem.tiers
        sizes = [sum(c.total for c in problem.classes if c.priority >= p) for p in tiers]
        # place phases get twice the weight of disrupt phases; bigger tiers get more
        self.weights = [w for s in sizes for w in (PLACE_WEIGHT * s, s)]
        self.index = 0
        self.reports: list[PhaseReport] = []
        self._built: tuple[tuple[Any, ...], PhaseModel] | None = None
        # the last place phase's pattern-LP bound: (tier, bound)
        self._bounded: tuple[int, int | None] | None = None
        self.models = PhaseModels(options.formulation, problem)
        self.groups = node_groups(problem)
        self._solver: cp_model.CpSolver | None = None  # the search running now, to stop it
        # the pattern listings made so far: a disrupt phase reuses its place phase's
        self.listings = Listings()
        self._freeze: tuple[int, _Frozen | None] | None = None
        # per tier, whether its place phase found that its patterns do not list quickly
        self._unlisted: dict[int, bool] = {}

    def relabelled(self, x: Assignment, fixes: Sequence[Fix], tier: int) -> Assignment:
        """``x`` with interchangeable nodes relabelled to move fewer pods, if that still meets
        the fixes (``relabel`` keeps every count; the check is the solver's own)."""
        y = relabel(self.problem, x, tier, self.groups)
        return y if y is not x and _satisfies(self.problem, y, fixes, tier) else x

    def _frozen(self, tier: int, fixes: Sequence[Fix]) -> _Frozen | None:
        """The freeze of a lower tier's phase whose higher tiers may disrupt nothing (the last
        disruption fix before the phase covers every class above ``tier``), if it applies."""
        settled = [f for f in fixes if f.kind == "disruption"]
        if not settled or settled[-1].value != 0 or settled[-1].op == ">=":
            return None
        if self._freeze is None or self._freeze[0] != tier:
            frozen = freeze_above(self.problem, tier)
            self._freeze = (tier, None if frozen is None else _Frozen(self.problem, tier, frozen))
        return self._freeze[1]

    def _may_dive(self, tier: int, fixes: Sequence[Fix]) -> bool:
        """Whether a place phase's pattern LP may dive: the dive moves pods freely, so its
        packing cannot meet the disruption settled for a higher tier (and dives are not cheap);
        only the first tier dives, or a lower one whose higher tiers' pods are frozen."""
        return self._frozen(tier, fixes) is not None or _first(fixes)

    def _quick_bound(self, tier: int, fixes: Sequence[Fix], seconds: float) -> bool:
        """Whether a disrupt phase's pattern LP is quick: the tiers above are frozen, so only
        this tier's pods are in it, in what the frozen pods leave of each node, and those node
        groups' patterns can be listed within LIST_SHARE of the phase (measured on 32 nodes
        with two tiers and four pods per node: bound and dive in 0.1-0.4 s, where a sub-second
        phase's LNS left one to eighteen moves more; with eight pods per node the listing
        fails, and the LNS is better off with the time). So is the top tier's, with no tier
        above, where its place phase listed the patterns and the phase has QUICK_TOP_SECONDS
        a node."""
        frozen = self._frozen(tier, fixes)
        if frozen is None:
            return (
                _first(fixes)
                and self._unlisted.get(tier) is False
                and seconds >= QUICK_TOP_SECONDS * len(self.problem.node_names)
                and self._lists(self.problem, tier, seconds, LIST_SHARE)
            )
        return self._lists(frozen.problem, tier, seconds, LIST_SHARE)

    def _listed(self, tier: int, fixes: Sequence[Fix], seconds: float) -> bool:
        """Whether a place phase's pattern LP has its patterns listed, or lists them within
        LIST_SHARE of the phase and the LP's budget of states (the listing is kept for it;
        a listing with too many states fails within a tenth of a second)."""
        if tier in self._unlisted:
            return not self._unlisted[tier]
        frozen = self._frozen(tier, fixes)
        # as many states as the LP's own listing would get
        listed = self._lists(
            self.problem if frozen is None else frozen.problem, tier, seconds, PATTERN_SHARE
        )
        self._unlisted[tier] = not listed
        return listed

    def _lists(self, space: Problem, tier: int, seconds: float, state_share: float) -> bool:
        """Whether the node groups' patterns of ``space`` list within LIST_SHARE of a phase of
        ``seconds``, in the states of ``state_share`` of it (a listing made is kept)."""
        states = min(MAX_STATES, int(STATES_PER_SECOND * state_share * seconds))
        until = self.clock() + LIST_SHARE * seconds
        return self.listings.cover(space, tier, states, until, self.clock)

    def allot(self) -> float:
        remaining = self.deadline - self.clock()
        total = sum(self.weights[self.index :]) or 1
        share = remaining * self.weights[self.index] / total
        self.index += 1
        return max(0.0, share)

    def _stop_search(self) -> None:
        if self._solver is not None:
            self._solver.stop_search()

    def _searchable(self, tier: int, seconds: float) -> bool:
        """Whether a whole-model search of the tier gets twice the time to build and hint its
        model (on 128 nodes with eight pods per node that alone takes 1.5 s: no search, rather
        than an overrun; on 32 nodes with four pods per node, a search started with 0.04-0.05 s
        left beside the undoing of moves took 0.05-0.08 s to return, and found nothing)."""
        return 2 * SETUP_SECONDS_PER_VARIABLE * self.models.variables(tier) <= seconds

    def _search_beside(
        self,
        tier: int,
        maximise: bool,
        fixes: Sequence[Fix],
        hint: Assignment,
        seconds: float,
        stopper: _StopAt,
    ) -> tuple[_SearchThread | None, Clock]:
        """The whole-model search started in a thread on all cores but one, and the clock of
        the work beside it (which ends with the search); no thread when the model could not be
        built in time, and the work beside then has the phase."""
        self._solver = None
        if not self._searchable(tier, seconds):
            return None, self.clock
        workers = _cores(self.options) - 1
        thread = _SearchThread(
            lambda: self._cp(tier, maximise, fixes, hint, seconds, None, workers, stopper)
        )
        return thread, thread.clock(self.clock)

    def _searched(
        self, thread: _SearchThread | None, met: Callable[[], bool]
    ) -> tuple[Any, Assignment | None, int | None, int]:
        """The search's (status, solution, objective bound, weight) once it ends, stopped
        early when ``met()``; UNKNOWN when it did not run."""
        if thread is None:
            return cp_model.UNKNOWN, None, None, 1
        return thread.result(met, self._stop_search)

    def _cp(
        self,
        tier: int,
        maximise: bool,
        fixes: Sequence[Fix],
        hint: Assignment,
        seconds: float,
        cut: int | None,
        workers: int | None = None,
        stopper: _StopAt | None = None,
    ) -> tuple[Any, Assignment | None, int | None, int]:
        """One CP-SAT solve: (status, solution, objective bound, placed weight). ``workers``
        overrides the option (a search running beside the LNS leaves it a core)."""
        problem, started = self.problem, self.clock()
        symmetry = (
            self.options.symmetry
            and self.options.formulation == "classes"
            and maximise
            and not fixes
        )
        # placed first, disruption as tie-break: placed weighs more than the largest disruption
        weight = 1
        if maximise and self.options.tie_break:
            weight += EVICT_COST * sum(c.n_running for c in problem.classes if c.priority >= tier)
        # a disrupt phase searches twice on the same model (its cut is a callback, not a
        # constraint): building it once saves a large share of a short budget
        key = (tier, maximise, tuple(fixes))
        reuse = self._built is not None and self._built[0] == key and not maximise
        if not reuse and not self._searchable(tier, seconds):
            return cp_model.UNKNOWN, None, None, weight
        if reuse and self._built is not None:
            pm = self._built[1]
        else:
            pm = self.models.build(tier, fixes, symmetry)
            if cut is not None and maximise:
                pm.model.add(pm.placed_ge(tier) <= cut)  # a proven bound, as a cut
            if maximise and self.options.tie_break:
                pm.model.maximize(weight * pm.placed_ge(tier) - pm.disruption_ge(tier))
            elif maximise:
                pm.model.maximize(pm.placed_ge(tier))
            else:
                pm.model.minimize(pm.disruption_ge(tier))
            self._built = (key, pm)
        pm.hint(hint)
        solver = cp_model.CpSolver()
        # the model build counts against the time
        solver.parameters.max_time_in_seconds = max(0.005, seconds - (self.clock() - started))
        solver.parameters.num_workers = self.options.workers if workers is None else workers
        solver.parameters.random_seed = self.options.seed
        if stopper is None and cut is not None and not maximise:
            # a proven lower bound: stop as soon as a solution meets it (as a constraint it
            # slows the search down)
            stopper = _StopAt(cut)
        self._solver = solver
        status = solver.solve(pm.model, stopper)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return status, None, None, weight
        return status, pm.read(solver), int(round(solver.best_objective_bound)), weight

    def run(
        self,
        tier: int,
        phase: str,
        fixes: Sequence[Fix],
        incumbent: Assignment | None,
        hint: Assignment,
        bound: int,
    ) -> tuple[Assignment | None, int, bool]:
        """Solve one phase; returns (solution, value, proven optimal)."""
        problem, maximise = self.problem, phase == "place"

        def value(x: Assignment) -> int:
            return placed_at(problem, x, tier) if maximise else disruption_at(problem, x, tier)

        def finish(
            best: Assignment, bound: int, status: Any, found: Assignment | None, weight: int
        ) -> tuple[Assignment | None, int, bool]:
            """Reports the phase's outcome and returns it."""
            proven = status == cp_model.OPTIMAL and best is found
            if not maximise and not proven:
                best = self.relabelled(best, fixes, tier)
            optimal = value(best) == bound or proven
            self._report(
                tier,
                phase,
                "OPTIMAL" if optimal else "FEASIBLE",
                started,
                value(best),
                bound,
                False,
                lexicographic=maximise and weight > 1 and proven,
            )
            return best, value(best), optimal

        started = self.clock()
        seconds = self.allot()
        deadline = started + seconds
        if incumbent is not None and value(incumbent) == bound:
            self._report(tier, phase, "OPTIMAL", started, value(incumbent), bound, True)
            return incumbent, value(incumbent), True
        if seconds < 0.005:  # the budget is spent: keep what we have
            if incumbent is None:
                self._report(tier, phase, "UNKNOWN", started, 0, bound, True)
                return None, 0, False
            self._report(tier, phase, "FEASIBLE", started, value(incumbent), bound, True)
            return incumbent, value(incumbent), False
        use_bounds = self.options.bounds and self.options.formulation == "classes"
        use_patterns = maximise and use_bounds
        best = incumbent
        cut: int | None = None
        # a large disrupt phase with under a second: CP-SAT returns nothing there (presolve
        # alone takes most of the time), so LNS gets all of it
        short_disrupt = (
            use_bounds
            and not maximise
            and incumbent is not None
            and (
                len(problem.node_names) >= SHORT_MIN_NODES
                # ... and from UNLISTED_SHORT_MIN_NODES where the place phase found that the
                # patterns do not list: there no bound runs beside the search, and in under a
                # second the search found nothing the undoing of moves did not; two chains of
                # it, the second from a fresh packing, do better (96 grid instances at 1 s,
                # four seeds: 87.0 reach the best-known outcome a run, against 86.25; the 18
                # whose outcome varies, eight other seeds: 14.4 against 13.9)
                or (
                    len(problem.node_names) >= UNLISTED_SHORT_MIN_NODES
                    and self._unlisted.get(tier, False)
                )
            )
            and seconds < MIN_BOUND_SECONDS
            # (the quick bound runs beside the search, so only on several cores)
            and not (_cores(self.options) > 1 and self._quick_bound(tier, fixes, seconds))
        )
        # otherwise a disrupt phase on several cores runs its search, bound and LNS side by side
        side_by_side = (
            use_bounds and not maximise and not short_disrupt and _cores(self.options) > 1
        )
        if (
            use_bounds
            and not maximise
            and incumbent is not None
            and not short_disrupt
            and not side_by_side
        ):
            # disruption: a short search first (on the class model it often proves the phase
            # outright, faster than any bound)
            status, found, raw, _ = self._cp(
                tier, False, fixes, hint, QUICK_DISRUPT_SHARE * seconds, None
            )
            best = _better(problem, tier, found, best)
            if raw is not None:
                bound = max(bound, raw)
            if best is not None and value(best) == bound:
                self._report(tier, phase, "OPTIMAL", started, value(best), value(best), False)
                return best, value(best), True
            hint = best if best is not None else hint
        if (
            use_bounds
            and not maximise
            and best is not None
            and seconds >= MIN_BOUND_SECONDS
            and not side_by_side
        ):
            # then the per-node pattern LP (it either proves the incumbent or stalls quickly),
            # then one search with its bound as a cut, so the search is never restarted
            starts = [
                x
                for x in (best, incumbent)
                if x is not None and _satisfies(problem, x, fixes, tier)
            ]
            lower, packed = self._patterns(
                tier, False, fixes, starts, BOUND_SHARE * seconds, value(best), deadline
            )
            bound = cut = max(bound, lower or 0)
            best = _better(problem, tier, packed, best)
            hint = best if best is not None else hint
            if best is not None and value(best) == bound:
                self._report(tier, phase, "OPTIMAL", started, bound, bound, False)
                return best, bound, True
        if (
            use_bounds
            and not maximise
            and best is not None
            and value(best) > bound
            and (len(problem.node_names) >= LNS_MIN_NODES or short_disrupt)
            and not side_by_side
        ):
            # large clusters: undo moves by LNS before the whole-model search (on small ones
            # the search alone is quicker)
            share = 1.0 if short_disrupt else LNS_DISRUPT_SHARE
            best = hint = self._improve(tier, best, fixes, share, deadline, bound)
            if value(best) == bound:
                self._report(tier, phase, "OPTIMAL", started, bound, bound, False)
                return best, bound, True
        if use_patterns and best is not None and not self._listed(tier, fixes, seconds):
            # the swap search first where the pattern LP is slow to start (its patterns do not
            # list quickly: eight pods per node, or many small classes): on such tight packings
            # it finds the last pods in a few hundred single moves
            best = hint = self._improve(tier, best, fixes, SWAP_SHARE, deadline, bound, swaps=True)
            if value(best) == bound:
                self._report(tier, phase, "OPTIMAL", started, bound, bound, False)
                return best, bound, True
            # what follows (LNS, the whole-model search, the knapsack-priced pattern LP) has
            # not placed a pod more than this search on the grid: it is left the share of the
            # phase that may prove its count, and the rest flows on to the disrupt phase
            deadline = self.clock() + UNLISTED_PROOF_SHARE * (deadline - self.clock())
            seconds = deadline - started
        if (
            use_patterns
            and best is not None
            and len(problem.node_names) >= PLACE_BESIDE_MIN_NODES
            and _cores(self.options) > 1
        ):
            # large clusters on several cores: the search runs from the start beside the
            # pattern LP and the LNS (``_place_side_by_side``)
            status, found, raw, weight, best, bound = self._place_side_by_side(
                tier, fixes, best, hint, seconds, bound, deadline
            )
            if status == cp_model.INFEASIBLE:
                self._report(tier, phase, "INFEASIBLE", started, 0, bound, False)
                return None, 0, False
            best = _better(problem, tier, found, best)
            if raw is not None:  # placed <= (bound + disruption) / weight, disruption < weight
                bound = min(bound, (raw + weight - 1) // weight)
            return finish(best, bound, status, found, weight)
        if use_patterns and best is not None:
            # the pattern LP first: on interchangeable nodes it bounds the phase exactly enough
            # to prove it, and its dive usually packs to that bound faster than any search
            starts = [x for x in (best, hint) if x is not None]
            starts.append(_restrict(problem, current_assignment(problem), tier))
            upper, packed = self._patterns(
                tier, True, fixes, starts, PATTERN_SHARE * seconds, value(best), deadline, True
            )
            if upper is not None:
                bound = min(bound, upper)
            best = hint = _better(problem, tier, packed, best)
            if value(best) == bound:
                self._report(tier, phase, "OPTIMAL", started, bound, bound, False)
                return best, bound, True
            cut = bound
        # large clusters: the quick search almost never proves a place phase there, so LNS
        # comes first (on small ones the quick search often proves it outright)
        lns_first = use_patterns and len(problem.node_names) >= LNS_MIN_NODES
        if lns_first and best is not None:
            best = hint = self._improve(tier, best, fixes, LNS_SHARE, deadline, bound)
        # ... and on SHORT_MIN_NODES or more with less than MIN_BOUND_SECONDS the pattern LP does
        # not converge (its bound stays the trivial one) and every search split off pays
        # presolve again: one search gets all that is left (the quick one would get nothing,
        # LNS took its share)
        short = (
            lns_first and len(problem.node_names) >= SHORT_MIN_NODES and seconds < MIN_BOUND_SECONDS
        )
        first = seconds * (QUICK_SHARE if use_patterns else 1.0) - (self.clock() - started)
        if short:
            first = deadline - self.clock()
        if short_disrupt:  # LNS had all the time: a search now would only overrun the phase
            status, found, raw, weight = cp_model.UNKNOWN, None, None, 1
        elif side_by_side and best is not None:
            status, found, raw, weight, best, bound = self._side_by_side(
                tier, fixes, best, first, bound, deadline
            )
        else:
            status, found, raw, weight = self._cp(tier, maximise, fixes, hint, first, cut)
        if status == cp_model.INFEASIBLE:
            self._report(tier, phase, "INFEASIBLE", started, 0, bound, False)
            return None, 0, False
        best = _better(problem, tier, found, best)
        if raw is not None:  # placed <= (bound + disruption) / weight, disruption < weight
            bound = min(bound, (raw + weight - 1) // weight) if maximise else max(bound, raw)
        if (
            use_patterns
            and not lns_first
            and status != cp_model.OPTIMAL
            and best is not None
            and value(best) < bound
        ):
            # not proven quickly: large-neighbourhood search on the tier's pods finds the
            # packings the whole-model search misses on interchangeable nodes
            best = self._improve(tier, best, fixes, LNS_SHARE, deadline, bound)
        if (
            use_patterns
            and not short
            and status != cp_model.OPTIMAL
            and (best is None or value(best) < bound)
        ):
            # still not proven: bound it with the pattern LP (and pack its patterns), then search
            # on with that cut
            starts = [x for x in (best, hint) if x is not None]
            starts.append(_restrict(problem, current_assignment(problem), tier))
            upper, packed = self._patterns(
                tier,
                True,
                fixes,
                starts,
                BOUND_SHARE * (deadline - self.clock()),
                None if best is None else value(best),
                deadline,
            )
            if upper is not None:
                bound = min(bound, upper)
            best = _better(problem, tier, packed, best)
            left = deadline - self.clock()
            if (best is None or value(best) < bound) and left > 0.005:
                status, found, raw, weight = self._cp(
                    tier, maximise, fixes, best or hint, left, bound
                )
                best = _better(problem, tier, found, best)
                if raw is not None:
                    bound = min(bound, (raw + weight - 1) // weight)
        if best is None:
            self._report(tier, phase, "UNKNOWN", started, 0, bound, False)
            return None, 0, False
        return finish(best, bound, status, found, weight)

    def _side_by_side(
        self,
        tier: int,
        fixes: Sequence[Fix],
        x: Assignment,
        seconds: float,
        bound: int,
        deadline: float,
    ) -> tuple[Any, Assignment | None, int | None, int, Assignment, int]:
        """A disrupt phase on several cores: the search runs in a thread (CP-SAT releases the
        GIL) on all cores but one, while this one computes the pattern-LP bound (and its dive
        and packing; on LNS_MIN_NODES nodes or more only when listed patterns price every
        node; never when the place phase found that they do not list), then undoes moves by
        LNS from the best assignment; a bound met by either
        side stops the other. (Measured: the search, the packing and the LNS each find the
        best disruption first on some instances.) Returns the search's (status, solution,
        objective bound, weight), the best other assignment and the bound."""
        problem = self.problem
        stopper = _StopAt(bound)
        best = x

        def met() -> bool:
            return min(stopper.best, disruption_at(problem, best, tier)) <= bound

        # small clusters: the bound converges in well under a second and often proves the
        # phase; on large ones its knapsack pricing is too slow to help (measured on 16-32
        # nodes with 3-4 s phases: no proof, and the LNS that gets its time instead ends
        # lower), so there it runs only when every node is priced from listed patterns
        large = len(problem.node_names) >= LNS_MIN_NODES
        # and on SHORT_MIN_NODES or more, where the place phase listed them, the listed LP and
        # its dives run alone first: a search beside them halved their speed (measured on 32
        # nodes with four pods per node on a loaded 2-core machine: in a 3 s phase the dives
        # left 59 moves beside the search, and 37-40 alone)
        frozen = self._frozen(tier, fixes)
        listed = self.listings.cover(problem if frozen is None else frozen.problem, tier)
        alone = len(problem.node_names) >= SHORT_MIN_NODES and listed

        def bounded(clock: Clock | None, share: float) -> None:
            """The pattern-LP bound, its dive and packing, for ``share`` of the phase: they may
            raise the bound and improve the best assignment."""
            nonlocal best, bound
            lower, packed = self._patterns(
                tier,
                False,
                fixes,
                [x],
                share * seconds,
                disruption_at(problem, x, tier),
                deadline,
                first=large,
                clock=clock,
            )
            stopper.bound = bound = max(bound, lower or 0)
            best = _better(problem, tier, packed, best)

        if alone and seconds >= SIDE_BOUND_SECONDS:
            bounded(None, ALONE_BOUND_SHARE)
            seconds = deadline - self.clock()
            if met() or seconds < 0.005:
                return cp_model.UNKNOWN, None, None, 1, best, bound
        thread, clock = self._search_beside(tier, False, fixes, best, seconds, stopper)
        # nor where the place phase found that the patterns do not list: priced by knapsacks,
        # the bound stayed far below the outcome there (4-8 moves where 8-18 were the least
        # known, 8-16 nodes with 8 pods each, 1 and 10 s) and proved nothing, and the undoing
        # of moves makes better use of the time (1 s grid, three runs each: 16, 16, 16 moves
        # against 18, 16, 20 on n16-ppn8-u100-k2; the same 35 of the 48 cells with 8 pods per
        # node proven at 10 s)
        if not alone and seconds >= SIDE_BOUND_SECONDS and not self._unlisted.get(tier, False):
            bounded(clock, SIDE_BOUND_SHARE)

        if not met():
            best = self._improve(tier, best, fixes, 1.0, deadline, bound, clock)
        return (*self._searched(thread, met), best, bound)

    def _place_side_by_side(
        self,
        tier: int,
        fixes: Sequence[Fix],
        x: Assignment,
        hint: Assignment,
        seconds: float,
        bound: int,
        deadline: float,
    ) -> tuple[Any, Assignment | None, int | None, int, Assignment, int]:
        """A place phase of a large cluster on several cores. First the pattern-LP bound and
        its dive, alone: its listing and LP are CPU-bound Python and numpy, which a search
        beside them slowed down twofold (measured on 32 nodes on a loaded 2-core machine: the
        dive then missed the 1 s budget it otherwise meets). If that does not prove the phase,
        the whole-model search runs in a thread (CP-SAT releases the GIL) on all cores but one
        for the rest of the phase, while this one runs LNS (and, with a second or more, the
        knapsack-priced pattern LP and more LNS). A bound met by either side stops the other;
        the search ending (proof or time) ends the phase. Short and listed, a swap search runs
        first for a packing kept aside (PRE_SWAP_SHARE). Measured on 32 nodes: one worker
        proves a 4-tier instance's last place phase in about 0.2 s, which the sequence
        (pattern LP, LNS, then the search) reached only after 0.5 s. Returns the search's
        (status, solution, objective bound, weight; UNKNOWN when it did not run), the best
        other assignment and the bound."""
        problem = self.problem

        def placed(y: Assignment) -> int:
            return placed_at(problem, y, tier)

        # under a second on a large cluster: the listing, the LP and its dive need all of it
        # (measured on 32 nodes: 0.1-0.2 s listing, 0.2 s LP, 0.2-0.6 s dive; the LNS after
        # them placed at most one pod more); without a dive (a lower tier: ``_patterns``) the
        # LP only bounds, and the search proves sooner (measured: 0.2 s, where the LP with the
        # settled tiers' floors had not converged after 0.6 s)
        short = len(problem.node_names) >= SHORT_MIN_NODES and seconds < MIN_BOUND_SECONDS
        dive = self._may_dive(tier, fixes)
        fallback = x
        if short and dive and not self._unlisted.get(tier, False):
            fallback = swap_search.search(
                problem,
                x,
                tier,
                self.clock() + PRE_SWAP_SHARE * (deadline - self.clock()),
                self.clock,
                self.options.seed,
                bound,
            )
        starts = [x, hint, _restrict(problem, current_assignment(problem), tier)]
        left = deadline - self.clock()
        share = (1.0 if short else PATTERN_SHARE) if dive else BOUND_SHARE
        upper, packed = self._patterns(
            tier, True, fixes, starts, share * left, placed(x), deadline, True
        )
        if upper is not None:
            bound = min(bound, upper)
        best = _better(problem, tier, fallback, x)
        best = _better(problem, tier, packed, best)
        if placed(best) >= bound or deadline - self.clock() < 0.005:
            return cp_model.UNKNOWN, None, None, 1, best, bound

        # with the disruption tie-break the objective is not the placed count: no early stop
        stopper = _StopAbove(NEVER if self.options.tie_break else bound)

        def met() -> bool:
            return max(stopper.best, placed(best)) >= bound

        thread, clock = self._search_beside(
            tier, True, fixes, best, deadline - self.clock(), stopper
        )

        start = best
        share = 1.0 if short or upper is not None else LNS_SHARE
        best = self._improve(tier, best, fixes, share, deadline, bound, clock)
        if not met() and clock() < deadline:
            # the pattern LP with knapsack pricing (its listing did not fit), then LNS again
            starts = [best, start, _restrict(problem, current_assignment(problem), tier)]
            left = deadline - self.clock()
            upper, packed = self._patterns(
                tier, True, fixes, starts, BOUND_SHARE * left, placed(best), deadline, clock=clock
            )
            if upper is not None and upper < bound:
                bound = upper
                if not self.options.tie_break:
                    stopper.bound = bound
            best = _better(problem, tier, packed, best)
            if not met():
                best = self._improve(tier, best, fixes, 1.0, deadline, bound, clock)
        return (*self._searched(thread, met), best, bound)

    def _improve(
        self,
        tier: int,
        x: Assignment,
        fixes: Sequence[Fix],
        share: float,
        deadline: float,
        target: int,
        clock: Clock | None = None,
        swaps: bool = False,
    ) -> Assignment:
        """``x`` improved for ``share`` of the phase's remaining time, if the result still
        meets the fixes: in a place phase by the swap search, then (unless ``swaps``) LNS for
        what is left; in a disrupt phase by the swap search undoing moves, then LNS."""
        keep_placed = bool(fixes) and fixes[-1].kind == "placed" and fixes[-1].tier == tier
        until = self.clock() + share * (deadline - self.clock())
        found = x
        if not keep_placed:
            # placing: the swap search first (it stops when it stalls), LNS for the rest
            found = swap_search.search(
                self.problem, x, tier, until, clock or self.clock, self.options.seed, target
            )
        if keep_placed:
            # disrupting: the swap search's iterated undoing of moves first (single moves repair
            # what a kick overloads, far more rounds than LNS refills), LNS for the rest
            # one chain of it a core, when no search runs beside (its compiled rounds release
            # the GIL), the chains after the first from a fresh packing; a chain that is stuck
            # starts again from another fresh packing
            chains = _cores(self.options) if clock is None else 1
            now = clock or self.clock
            packing = self._fresh(tier, x, fixes)

            def fresh(seed: int) -> Assignment | None:
                return packing(FRESH_SHARE * (until - now()), seed, now)

            first = fresh(self.options.seed) if chains > 1 else None
            found = swap_search.undo_moves(
                self.problem,
                found,
                tier,
                self.clock() + UNDO_SHARE * (until - self.clock()),
                now,
                self.options.seed,
                target,
                chains=chains,
                others=() if first is None else [first],
                fresh=fresh,
            )
        if not swaps:
            found = lns.improve(
                self.problem,
                found,
                tier,
                until,
                clock or self.clock,
                self.options.seed,
                target,
                keep_placed,
            )
        found = relabel(self.problem, found, tier, self.groups)
        if _satisfies(self.problem, found, fixes, tier) and tier_value(
            self.problem, found, tier
        ) > tier_value(self.problem, x, tier):
            return found
        return x

    def _fresh(
        self, tier: int, x: Assignment, fixes: Sequence[Fix]
    ) -> Callable[[float, int, Clock], Assignment | None]:
        """Other packings placing as many pods of the tier as ``x`` (the higher tiers as in
        ``x``), as a function of (seconds, seed, clock): the tier's pods kept where they run
        while they fit (made once, at the first call), the rest placed by the swap search
        (``seed``) within ``seconds``; None when that falls short."""
        problem = self.problem
        target = placed_at(problem, x, tier)

        @functools.cache
        def start() -> Assignment | None:
            new = [c for c, cls in enumerate(problem.classes) if cls.priority == tier]
            y = greedy_complete(problem, _restrict(problem, x, tier + 1), new)
            return y if feasible(problem, y, problem.active(tier)) else None

        def packing(seconds: float, seed: int, clock: Clock) -> Assignment | None:
            begin = start()
            if seconds <= 0 or begin is None:
                return None
            y = swap_search.search(problem, begin, tier, clock() + seconds, clock, seed, target)
            y = relabel(problem, y, tier, self.groups)
            if placed_at(problem, y, tier) == target and _satisfies(problem, y, fixes, tier):
                return y
            return None

        return packing

    def _patterns(
        self,
        tier: int,
        maximise: bool,
        fixes: Sequence[Fix],
        starts: Sequence[Assignment],
        seconds: float,
        target: int | None,
        deadline: float,
        first: bool = False,
        clock: Clock | None = None,
    ) -> tuple[int | None, Assignment | None]:
        """The pattern-LP bound of a phase (upper on placed pods, or lower on disruption) and
        the price-and-branch assignment from its patterns when the bound does not prove
        ``target`` (None when it does not meet the fixes); for a place phase, the best of that
        and the pattern LP's dive. ``first``: a place phase's early call, which gives up unless
        every node group's patterns can be listed (then the bound is reused later)."""
        problem = self.problem
        if maximise and self._bounded is not None and self._bounded[0] == tier:
            return self._bounded[1], None  # computed already (first) in this place phase
        # never past the phase's deadline (a call that starts late gets what is left)
        seconds = min(seconds, deadline - (clock or self.clock)())
        if seconds < 0.005:
            return None, None
        floors = [(f.tier, f.value) for f in fixes if f.kind == "placed" and f.op != "<="]
        limits = [(f.tier, f.value) for f in fixes if f.kind == "disruption" and f.op != ">="]
        columns: dict[Any, list[dict[int, int]]] = {}
        dived: list[Assignment] = []
        # frozen, either LP works without the higher tiers' pods
        frozen = self._frozen(tier, fixes)
        dive = self._may_dive(tier, fixes)
        space, lifted = problem, 0
        if frozen is not None:
            space, lifted = frozen.problem, frozen.held(tier)
            floors = [(q, v - frozen.held(q)) for q, v in floors]
            starts = [y for y in map(frozen.down, starts) if y is not None]
        args = (space, tier, floors, starts, seconds, clock or self.clock)
        if maximise:
            bound = placement_bound(
                *args,
                target=None if target is None else target - lifted,
                columns=columns,
                listed_only=first,
                packings=dived if dive else None,
                seed=self.options.seed,
                listings=self.listings,
            )
            if bound is not None:
                bound += lifted
        else:
            # frozen, the higher tiers' pods cause no disruption: the phase's is the same there
            bound = disruption_bound(
                *args,
                target=target,
                columns=columns,
                packings=dived,
                listed_only=first,
                disruption_limits=limits,
                listings=self.listings,
            )
        if frozen is not None:
            dived = [frozen.up(x) for x in dived]
        if maximise and bound is not None:
            self._bounded = (tier, bound)
        if bound is not None and bound == target:
            return bound, None
        if not maximise:  # relabelling may still save moves on interchangeable nodes
            dived = [relabel(problem, x, tier, self.groups) for x in dived]
        dived = [x for x in dived if _satisfies(problem, x, fixes, tier)]
        of = placed_at if maximise else disruption_at
        if dived and of(problem, dived[0], tier) == bound:
            return bound, dived[0]  # the dive met the bound: no packing can do better
        seconds = PACK_SHARE * (deadline - (clock or self.clock)())
        if PACK_SECONDS_PER_COLUMN * sum(map(len, columns.values())) > seconds:
            packed = None  # it would overrun the phase
        elif maximise:
            packed = pattern_solution(space, tier, floors, columns, seconds, self.options.workers)
        else:
            packed = disruption_solution(
                space, tier, floors, columns, seconds, self.options.workers, limits
            )
        if packed is not None and frozen is not None:
            packed = frozen.up(packed)
        if packed is not None:
            packed = relabel(problem, packed, tier, self.groups)
        if packed is None or not _satisfies(problem, packed, fixes, tier):
            packed = None
        for x in dived:
            packed = _better(problem, tier, x, packed)
        return bound, packed

    def _report(
        self,
        tier: int,
        phase: str,
        status: str,
        started: float,
        value: int,
        bound: int,
        skipped: bool,
        lexicographic: bool = False,
    ) -> None:
        self.reports.append(
            PhaseReport(
                tier, phase, status, self.clock() - started, value, bound, skipped, lexicographic
            )
        )


def solve(
    snapshot: Snapshot, options: SolveOptions | None = None, clock: Clock = time.monotonic
) -> Plan:
    """Compute, sequence and check a repacking plan for ``snapshot``."""
    options = options or SolveOptions()
    start = clock()
    problem = build_problem(snapshot)
    name = options.formulation

    def finish(status: str, optimal: bool, message: str, phases: Sequence[PhaseReport]) -> Plan:
        return empty_plan(snapshot, status, optimal, clock() - start, name, phases, message)

    if not any(c.pending for c in problem.classes):
        return finish("NO_IMPROVEMENT", True, "no pending pods", [])
    # the phases end early enough to leave the plan's own making (pods, sequence, checks) in
    # the budget: measured 40-75 us a pod, 10 ms for 256 pods and 50-80 ms for 1024
    pods = sum(c.total for c in problem.classes)
    reserve = min(PLAN_RESERVE_SHARE * options.time_limit, PLAN_SECONDS_PER_POD * pods)
    # (the budget counts from the call's start: building the problem is part of it)
    phases = _Phases(problem, options, clock, start + options.time_limit - reserve)
    x: Assignment = current_assignment(problem)
    fixes: list[Fix] = []
    all_optimal = True
    for p in problem.tiers:
        active = problem.active(p)
        new = [c for c, cls in enumerate(problem.classes) if cls.priority == p]
        # the starting heuristics get at most a quarter of what is left
        until = clock() + HEURISTIC_SHARE * max(0.0, phases.deadline - clock())
        start_x, ok = best_start(problem, _restrict(problem, x, p + 1), p, until, clock)
        incumbent = start_x if ok else None
        # place: at most every pod at priority >= p, or what was fixed above plus this tier
        bound = sum(problem.classes[c].total for c in active)
        placed_fixes = [f for f in fixes if f.kind == "placed"]
        if placed_fixes and placed_fixes[-1].op == "==":
            bound = placed_fixes[-1].value + sum(problem.classes[c].total for c in new)
        best, value, optimal = phases.run(p, "place", fixes, incumbent, start_x, bound)
        if best is None:
            return finish(_failure(phases), False, "no placement found in time", phases.reports)
        fixes.append(Fix("placed", p, "==" if optimal else ">=", value))
        all_optimal &= optimal
        best = phases.relabelled(best, fixes, p)
        # disrupt: never less than the disruption already fixed for the tiers above; a proven
        # place phase also proved the disruption (its objective breaks ties by disruption)
        dis_fixes = [f for f in fixes if f.kind == "disruption"]
        floor = dis_fixes[-1].value if dis_fixes and dis_fixes[-1].op == "==" else 0
        if optimal and phases.reports[-1].lexicographic:
            floor = disruption_at(problem, best, p)
        repaired = repair(problem, best, active)
        best = _better(problem, p, repaired, best)
        until = clock() + HEURISTIC_SHARE * max(0.0, phases.deadline - clock())
        polished = reduce_moves(problem, best, active, until, clock)
        if _satisfies(problem, polished, fixes, p):
            best = _better(problem, p, polished, best)
        best, value, optimal = phases.run(p, "disrupt", fixes, best, best, floor)
        if best is None:
            return finish(_failure(phases), False, "no placement found in time", phases.reports)
        fixes.append(Fix("disruption", p, "==" if optimal else "<=", value))
        all_optimal &= optimal
        x = best
    plan = _plan(snapshot, problem, x, all_optimal, phases.reports, clock() - start, name)
    return replace(plan, solve_seconds=clock() - start)  # the whole call, the plan's making too


def _failure(phases: _Phases) -> str:
    return "INFEASIBLE" if phases.reports and phases.reports[-1].status == "INFEASIBLE" else "ERROR"


def _plan(
    snapshot: Snapshot,
    problem: Problem,
    x: Assignment,
    optimal: bool,
    phases: Sequence[PhaseReport],
    seconds: float,
    formulation: str,
) -> Plan:
    pa = pods_for(problem, x)
    moves = tuple(Move(k, a, b) for k, a, b in pa.moves)
    evictions = tuple(Eviction(k, a) for k, a in pa.evictions)
    placements = tuple(Placement(k, b) for k, b in pa.placements)
    before = outcome(snapshot)
    after = outcome(snapshot, moves, placements, evictions)

    def no_plan(status: str, proven: bool, reason: str) -> Plan:
        return empty_plan(snapshot, status, proven, seconds, formulation, phases, reason)

    if not after.vector > before.vector:
        return no_plan(
            "NO_IMPROVEMENT",
            optimal,
            "the current placement is already optimal" if optimal else "no better placement found",
        )
    # the claimed vector must be what the counts say, tier by tier
    for p in problem.tiers:
        gained = sum(v for q, v in after.placed_by_priority.items() if q >= p) - sum(
            v for q, v in before.placed_by_priority.items() if q >= p
        )
        model_gain = placed_at(problem, x, p) - sum(
            c.n_running for c in problem.classes if c.priority >= p
        )
        cost = sum(v for q, v in after.disruption_by_priority.items() if q >= p)
        if gained != model_gain or cost != disruption_at(problem, x, p):
            return no_plan(
                "ERROR", False, f"internal: pod-level plan disagrees with the model at priority {p}"
            )
    try:
        steps = sequence(snapshot, moves, placements, evictions)
    except SequencingError as exc:
        return no_plan(
            "NO_IMPROVEMENT",
            False,
            f"a better placement exists but cannot be reached safely: {exc}",
        )
    pods = {p.key: p for p in snapshot.pods}
    displaced = [m.pod for m in moves] + [e.pod for e in evictions]
    plan = Plan(
        status="OPTIMAL" if optimal else "FEASIBLE",
        optimal=optimal,
        solve_seconds=seconds,
        formulation=formulation,
        before=before,
        after=after,
        moves=moves,
        placements=placements,
        evictions=evictions,
        steps=steps,
        phases=tuple(phases),
        owners={k: pods[k].owner for k in displaced},
        uids={k: pods[k].uid for k in displaced},
    )
    errors = checker.check(snapshot, plan)
    if errors:
        return no_plan("ERROR", False, "plan rejected by the checker: " + "; ".join(errors[:5]))
    return plan
