"""The strategies of a place phase (most pods placed at priority >= tier) with pattern bounds.

``swap_first``: where the patterns do not list quickly (eight pods per node, many small
classes), the swap search finds the last pods of such tight packings in a few hundred single
moves; the phase then keeps only the share of its time that may prove its count.
``side_by_side``: a large cluster on several cores; the pattern LP and its dive alone first, then
the search in a thread beside LNS (and the knapsack-priced LP).
``in_sequence``: the pattern LP and its dive, LNS first on large clusters, a search, LNS on small
ones, the pattern LP again as a cut and a last search.
``dispatch`` picks among them. See ``docs/architecture.md#repack-phases``. Neighbours:
``disrupt`` (the other phase's strategies), ``lp``, ``improve``, ``phase``.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from repack.driver.context import SolveContext, better, restrict
from repack.driver.improve import improve
from repack.driver.lp import pattern_lp
from repack.driver.phase import (
    PhaseResult,
    PhaseState,
    conclude,
    finish,
    infeasible,
    proven,
    search_beside,
    search_step,
    searched,
)
from repack.driver.search import StopAbove
from repack.problem.classes import Assignment, current_assignment, placed_at
from repack.search import swap_search

NEVER = 2**62  # an objective bound no search reaches


def swap_first(ctx: SolveContext, st: PhaseState) -> bool:
    """The swap search for ``swap_share`` of a phase whose patterns do not list; whether that
    proved the phase. If not, what follows (LNS, the search, the knapsack-priced pattern LP,
    which placed no pod more than it on the benchmark grid) keeps ``unlisted_proof_share`` of
    the time left, and the rest flows on to the disrupt phase."""
    st.best = st.hint = improve(ctx, st, ctx.tuning.swap_share, swaps=True)
    if st.met():
        return True
    st.deadline = ctx.clock() + ctx.tuning.unlisted_proof_share * (st.deadline - ctx.clock())
    st.seconds = st.deadline - st.started
    return False


def side_by_side(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """A place phase of a large cluster on several cores. First the pattern-LP bound and its
    dive, alone: their listing and LP are CPU-bound Python and numpy, which a search beside
    them slowed twofold. If that does not prove the phase, the whole-model search runs in a
    thread on all cores but one for the rest of the phase, while this one runs LNS (and, with
    the time, the knapsack-priced pattern LP and more LNS). A bound met by either side stops
    the other; the search ending (proof or time) ends the phase. Short and listed, a swap search
    first keeps a packing aside in case the dive runs out of time (``pre_swap_share``)."""
    problem, tier, tuning = ctx.problem, st.tier, ctx.tuning
    x = st.best
    assert x is not None

    def placed(y: Assignment) -> int:
        return placed_at(problem, y, tier)

    # under a second on a large cluster the listing, the LP and its dive need all of it; without
    # a dive (a lower tier that may not: ``freeze``) the LP only bounds, and the search proves
    # sooner
    short = ctx.nodes >= tuning.short_min_nodes and st.seconds < tuning.min_bound_seconds
    dive = ctx.freezes.may_dive(tier, st.fixes)
    fallback = x
    if short and dive and not ctx.listings.found_unlisted(tier):
        until = ctx.clock() + tuning.pre_swap_share * (st.deadline - ctx.clock())
        fallback = swap_search.search(
            problem, x, tier, until, ctx.clock, ctx.options.seed, st.bound
        )
        st.step("swap-search", fallback)
    starts = [x, st.hint, restrict(problem, current_assignment(problem), tier)]
    left = st.deadline - ctx.clock()
    share = (1.0 if short else tuning.pattern_share) if dive else tuning.bound_share
    upper, packed = pattern_lp(ctx, st, starts, share * left, placed(x), first=True)
    if upper is not None:
        st.bound = min(st.bound, upper)
    st.best = better(problem, tier, fallback, x)
    st.take(packed)
    best = st.best
    if placed(best) >= st.bound or st.deadline - ctx.clock() < tuning.min_step_seconds:
        return finish(ctx, st)

    # with the disruption tie-break the objective is not the placed count: no early stop
    stopper = StopAbove(NEVER if ctx.options.tie_break else st.bound)

    def met() -> bool:
        return st.best is not None and max(stopper.best, placed(st.best)) >= st.bound

    beside = search_beside(ctx, st, best, st.deadline - ctx.clock(), stopper)
    start = best
    share = 1.0 if short or upper is not None else tuning.lns_share
    st.best = improve(ctx, st, share, beside.clock)
    if not met() and beside.clock() < st.deadline:
        # the pattern LP with knapsack pricing (its listing did not fit), then LNS again
        starts = [st.best, start, restrict(problem, current_assignment(problem), tier)]
        left = st.deadline - ctx.clock()
        upper, packed = pattern_lp(
            ctx, st, starts, tuning.bound_share * left, placed(st.best), clock=beside.clock
        )
        if upper is not None and upper < st.bound:
            st.bound = upper
            if not ctx.options.tie_break:
                stopper.bound = st.bound
        st.take(packed)
        if not met():
            st.best = improve(ctx, st, 1.0, beside.clock)
    return conclude(ctx, st, searched(ctx, st, beside, met))


def in_sequence(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """A place phase on one core (or a small cluster). The pattern LP first: on
    interchangeable nodes it bounds the phase exactly enough to prove it, and its dive usually
    packs to that bound faster than any search. Then on large clusters LNS (a quick search
    almost never proves a place phase there), a search for ``quick_share`` (short on
    ``short_min_nodes`` or more: all that is left, since every search split off pays presolve
    again), on small clusters LNS when that did not prove it, and still unproven the pattern LP
    as a cut for one last search."""
    problem, tier, tuning = ctx.problem, st.tier, ctx.tuning
    if st.best is not None:
        starts = [y for y in (st.best, st.hint) if y is not None]
        starts.append(restrict(problem, current_assignment(problem), tier))
        upper, packed = pattern_lp(
            ctx, st, starts, tuning.pattern_share * st.seconds, st.value(st.best), first=True
        )
        if upper is not None:
            st.bound = min(st.bound, upper)
        st.take(packed)
        st.hint = st.best
        if st.met():
            return proven(ctx, st)
        st.cut = st.bound
    lns_first = ctx.nodes >= tuning.lns_min_nodes
    if lns_first and st.best is not None:
        st.best = st.hint = improve(ctx, st, tuning.lns_share)
    short = (
        lns_first and ctx.nodes >= tuning.short_min_nodes and st.seconds < tuning.min_bound_seconds
    )
    first = st.seconds * tuning.quick_share - (ctx.clock() - st.started)
    if short:
        first = st.deadline - ctx.clock()
    result = search_step(ctx, st, first, st.cut)
    if result.status == cp_model.INFEASIBLE:
        return infeasible(ctx, st)
    st.absorb(result)
    if st.search.status == cp_model.OPTIMAL:
        return finish(ctx, st)
    if not lns_first and st.best is not None and st.value(st.best) < st.bound:
        # large-neighbourhood search on the tier's pods finds the packings the whole-model
        # search misses on interchangeable nodes
        st.best = improve(ctx, st, tuning.lns_share)
    if not short and (st.best is None or st.value(st.best) < st.bound):
        # the pattern LP as a bound (and its packing), then one search with that cut
        starts = [y for y in (st.best, st.hint) if y is not None]
        starts.append(restrict(problem, current_assignment(problem), tier))
        target = None if st.best is None else st.value(st.best)
        left = st.deadline - ctx.clock()
        upper, packed = pattern_lp(ctx, st, starts, tuning.bound_share * left, target)
        if upper is not None:
            st.bound = min(st.bound, upper)
        st.take(packed)
        left = st.deadline - ctx.clock()
        if (st.best is None or st.value(st.best) < st.bound) and left > tuning.min_step_seconds:
            st.absorb(search_step(ctx, st, left, st.bound, hint=st.best or st.hint))
    return finish(ctx, st)
