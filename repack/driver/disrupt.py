"""The strategies of a disrupt phase (least disruption at priority >= tier, the placed counts
kept) with pattern bounds.

``undo_only``: a short phase on a large cluster (or on a mid-sized one whose patterns do not
list): the undoing of moves and LNS have all of it, since a search there returns nothing in time
(its presolve alone takes most of it).
``side_by_side``: on several cores, the search in a thread from the start, beside the per-node
pattern LP with its dive and packing, then the undoing of moves; a bound met by either side
stops the other. On large clusters with listed patterns the LP runs alone first.
``in_sequence``: on one core, a quick search, the pattern LP (a second or more), the undoing of
moves on large clusters, then one search with the LP's bound as a cut.
``dispatch`` picks among them. See ``docs/architecture.md#repack-phases``. Neighbours:
``place`` (the other phase's strategies), ``lp``, ``improve``, ``phase``.
"""

from __future__ import annotations

from repack.driver.context import SolveContext
from repack.driver.improve import improve
from repack.driver.lp import pattern_lp
from repack.driver.options import Clock
from repack.driver.phase import (
    PhaseResult,
    PhaseState,
    conclude,
    finish,
    proven,
    search_beside,
    search_step,
    searched,
)
from repack.driver.search import StopAt


def undo_only(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """All of a short phase for the undoing of moves and LNS; no search (it would only overrun
    the phase)."""
    assert st.best is not None
    if st.value(st.best) > st.bound:
        st.best = st.hint = improve(ctx, st, 1.0)
        if st.met():
            return proven(ctx, st)
    return finish(ctx, st)


def side_by_side(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """A disrupt phase on several cores: the search runs in a thread on all cores but one,
    while this one computes the pattern-LP bound with its dive and packing (on
    ``lns_min_nodes`` nodes or more only when listed patterns price every node, which is exact
    and fast; never where the place phase found that they do not list: priced by knapsacks the
    bound stayed far below the outcome and proved nothing), then undoes moves from the best
    assignment; a bound met by either side stops the other. (The search, the packing and the
    undoing of moves each find the least disruption first on some instances.) On
    ``short_min_nodes`` or more, where the place phase listed the patterns, the LP and its
    dives run alone first: a search beside them halved their speed."""
    problem, tier, tuning = ctx.problem, st.tier, ctx.tuning
    x = st.best
    assert x is not None
    seconds = st.seconds - (ctx.clock() - st.started)
    stopper = StopAt(st.bound)

    def met() -> bool:
        assert st.best is not None
        return min(stopper.best, st.value(st.best)) <= st.bound

    large = ctx.nodes >= tuning.lns_min_nodes
    frozen = ctx.freezes.of(tier, st.fixes)
    listed = ctx.listings.covered(problem if frozen is None else frozen.problem, tier)
    alone = ctx.nodes >= tuning.short_min_nodes and listed

    def bounded(share: float, clock: Clock | None) -> None:
        """The pattern-LP bound, its dive and packing, for ``share`` of the phase: they may
        raise the bound and improve the best assignment."""
        lower, packed = pattern_lp(
            ctx, st, [x], share * seconds, st.value(x), first=large, clock=clock
        )
        stopper.bound = st.bound = max(st.bound, lower or 0)
        st.take(packed)

    if alone and seconds >= tuning.side_bound_seconds:
        bounded(tuning.alone_bound_share, None)
        seconds = st.deadline - ctx.clock()
        if met() or seconds < tuning.min_step_seconds:
            return finish(ctx, st)
    hint = st.best
    assert hint is not None
    beside = search_beside(ctx, st, hint, seconds, stopper)
    if not alone and seconds >= tuning.side_bound_seconds and not ctx.listings.found_unlisted(tier):
        bounded(tuning.side_bound_share, beside.clock)
    if not met():
        st.best = improve(ctx, st, 1.0, beside.clock)
    return conclude(ctx, st, searched(ctx, st, beside, met))


def in_sequence(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """A disrupt phase on one core: a short search first (on the class model it often proves
    the phase outright, faster than any bound); with a second or more the per-node pattern LP
    (it either proves the incumbent or stalls quickly); on large clusters the undoing of moves
    and LNS (on small ones the search alone is quicker); then one search with the LP's bound as
    a cut, so the search is never restarted."""
    tier, tuning = st.tier, ctx.tuning
    st.absorb(search_step(ctx, st, tuning.quick_disrupt_share * st.seconds, None))
    if st.met():
        return proven(ctx, st)
    st.hint = st.best if st.best is not None else st.hint
    if st.best is not None and st.seconds >= tuning.min_bound_seconds:
        starts = [
            y for y in (st.best, st.incumbent) if y is not None and ctx.satisfies(y, st.fixes, tier)
        ]
        target = st.value(st.best)
        lower, packed = pattern_lp(ctx, st, starts, tuning.bound_share * st.seconds, target)
        st.bound = st.cut = max(st.bound, lower or 0)
        st.take(packed)
        st.hint = st.best if st.best is not None else st.hint
        if st.met():
            return proven(ctx, st)
    if st.best is not None and st.value(st.best) > st.bound and ctx.nodes >= tuning.lns_min_nodes:
        st.best = st.hint = improve(ctx, st, tuning.lns_disrupt_share)
        if st.met():
            return proven(ctx, st)
    return conclude(ctx, st, search_step(ctx, st, st.seconds - (ctx.clock() - st.started), st.cut))
