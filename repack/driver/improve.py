"""Improving a phase's best assignment by local search: the swap search, its undoing of moves and
large-neighbourhood search, for a share of the phase's time.

In a place phase the swap search (``search.swap_search``: single moves of pods off overloaded
nodes, which finds the last pods of tight packings) comes first and LNS (``cpsat.lns``) has the
rest. In a disrupt phase the swap search's iterated undoing of moves comes first (far more rounds
than LNS refills; one chain a core when no search runs beside it, the chains after the first
from fresh packings, ``fresh_packings``) and LNS has the rest. See
``docs/architecture.md#repack-phases``. Neighbours: ``place`` and ``disrupt`` (which call it),
``phase`` (where each step is recorded).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from repack.cpsat import lns
from repack.cpsat.model import Fix
from repack.driver.context import SolveContext, restrict, satisfies
from repack.driver.options import Clock
from repack.driver.phase import PhaseState
from repack.problem.classes import Assignment, Problem, feasible, greedy_complete, placed_at
from repack.problem.classes import tier_value as value_of
from repack.search import swap_search
from repack.search.relabel import relabel

Packings = Callable[[float, int, Clock], Assignment | None]


def improve(
    ctx: SolveContext,
    st: PhaseState,
    share: float,
    clock: Clock | None = None,
    swaps: bool = False,
) -> Assignment:
    """The phase's best assignment improved for ``share`` of its remaining time, if the result
    still meets the fixes (else the best as it was). ``clock``: the clock of work beside a
    search (it ends with the search); ``swaps``: the swap search alone, no LNS."""
    problem, tier, fixes, x = ctx.problem, st.tier, st.fixes, st.best
    assert x is not None
    keep_placed = bool(fixes) and fixes[-1].kind == "placed" and fixes[-1].tier == tier
    until = ctx.clock() + share * (st.deadline - ctx.clock())
    now = clock or ctx.clock
    found = x
    if not keep_placed:
        # placing: the swap search first (it stops when it stalls), LNS for the rest
        found = swap_search.search(problem, x, tier, until, now, ctx.options.seed, st.bound)
        st.step("swap-search", found)
    if keep_placed:
        # disrupting: the undoing of moves first, one chain a core when no search runs beside
        # (its compiled rounds release the GIL), LNS for the rest
        chains = ctx.cores if clock is None else 1
        packing = fresh_packings(problem, ctx.groups, tier, x, fixes)

        def fresh(seed: int) -> Assignment | None:
            return packing(ctx.tuning.fresh_share * (until - now()), seed, now)

        first = fresh(ctx.options.seed) if chains > 1 else None
        found = swap_search.undo_moves(
            problem,
            found,
            tier,
            ctx.clock() + ctx.tuning.undo_share * (until - ctx.clock()),
            now,
            ctx.options.seed,
            st.bound,
            chains=chains,
            others=() if first is None else [first],
            fresh=fresh,
        )
        st.step("undo-moves", found, cores=chains)
    if not swaps:
        found = lns.improve(
            problem, found, tier, until, now, ctx.options.seed, st.bound, keep_placed
        )
        st.step("lns", found)
    found = relabel(problem, found, tier, ctx.groups)
    if satisfies(problem, found, fixes, tier) and value_of(problem, found, tier) > value_of(
        problem, x, tier
    ):
        return found
    return x


def fresh_packings(
    problem: Problem,
    groups: Sequence[Sequence[int]],
    tier: int,
    x: Assignment,
    fixes: Sequence[Fix],
) -> Packings:
    """Other packings placing as many pods of the tier as ``x`` (the higher tiers as in ``x``),
    as a function of (seconds, seed, clock): the tier's pods kept where they run while they fit
    (made once, at the first call), the rest placed by the swap search (``seed``) within
    ``seconds``, relabelled on the interchangeable nodes ``groups``; None when that falls
    short of ``x``'s count or the fixes."""
    target = placed_at(problem, x, tier)

    @functools.cache
    def start() -> Assignment | None:
        new = [c for c, cls in enumerate(problem.classes) if cls.priority == tier]
        y = greedy_complete(problem, restrict(problem, x, tier + 1), new)
        return y if feasible(problem, y, problem.active(tier)) else None

    def packing(seconds: float, seed: int, clock: Clock) -> Assignment | None:
        begin = start()
        if seconds <= 0 or begin is None:
            return None
        y = swap_search.search(problem, begin, tier, clock() + seconds, clock, seed, target)
        y = relabel(problem, y, tier, groups)
        if placed_at(problem, y, tier) == target and satisfies(problem, y, fixes, tier):
            return y
        return None

    return packing
