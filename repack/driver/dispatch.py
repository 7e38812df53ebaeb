"""Which strategy runs a phase: the phase driver's decision tree.

A phase first takes its time from the budget. It ends at once when its incumbent already meets
its bound or no time is left. Without pattern bounds (the per-pod formulation, or bounds turned
off) it is one whole-model search. Otherwise a place phase runs ``place.swap_first`` where its
patterns do not list, then ``place.side_by_side`` on a large cluster with several cores, else
``place.in_sequence``; a disrupt phase runs ``disrupt.undo_only`` when it is short on a large
cluster, ``disrupt.side_by_side`` on several cores, else ``disrupt.in_sequence``. The conditions
are below, each with its reason; the figures behind the thresholds are in ``options.Tuning``.
See ``docs/architecture.md#repack-phases``. Neighbours: ``solver`` (the tier loop that runs the
phases), ``place``, ``disrupt``, ``phase``.
"""

from __future__ import annotations

from collections.abc import Sequence

from repack.cpsat.model import Fix
from repack.driver import disrupt, place
from repack.driver.context import SolveContext
from repack.driver.phase import (
    PhaseResult,
    PhaseState,
    conclude,
    kept,
    proven,
    search_step,
)
from repack.problem.classes import Assignment


def run_phase(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """Solves a phase started by ``start_phase``; its report is added to ``ctx.reports``."""
    if st.incumbent is not None and st.value(st.incumbent) == st.bound:
        return kept(ctx, st)  # the start is proven optimal: nothing to do
    if st.seconds < ctx.tuning.min_step_seconds:
        return kept(ctx, st)  # the budget is spent: keep what we have
    if not ctx.options.patterns:
        return search_alone(ctx, st)
    if st.kind == "place":
        return _place(ctx, st)
    return _disrupt(ctx, st)


def start_phase(
    ctx: SolveContext,
    tier: int,
    kind: str,
    fixes: Sequence[Fix],
    incumbent: Assignment | None,
    hint: Assignment,
    bound: int,
) -> PhaseState:
    """A phase of ``kind`` ("place" or "disrupt") at ``tier`` as it starts, with its share of
    the budget: under the settled ``fixes``, from ``incumbent`` (None when the start heuristics
    found no valid one), with the search hint ``hint`` and the trivial bound ``bound``."""
    started = ctx.clock()
    seconds = ctx.budget.allot()
    return PhaseState(
        ctx.problem, tier, kind, fixes, incumbent, hint, bound, started, seconds,
        started + seconds, incumbent,
    )  # fmt: skip


def _place(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    tuning = ctx.tuning
    # the pattern LP is slow to start where the patterns do not list quickly (eight pods per
    # node, or many small classes): on such tight packings the swap search finds the last pods
    unlisted = st.best is not None and not ctx.listings.place_listed(st.tier, st.fixes, st.seconds)
    if unlisted and place.swap_first(ctx, st):
        return proven(ctx, st)
    # large clusters on several cores: the search beside the pattern LP and the LNS proves a
    # phase sooner than the sequence
    if st.best is not None and ctx.nodes >= tuning.place_beside_min_nodes and ctx.cores > 1:
        return place.side_by_side(ctx, st)
    return place.in_sequence(ctx, st)


def _disrupt(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    if st.best is None:  # no valid start: nothing for the bound and local searches to work on
        return search_alone(ctx, st)
    if _short(ctx, st):
        return disrupt.undo_only(ctx, st)
    if ctx.cores > 1:
        return disrupt.side_by_side(ctx, st)
    return disrupt.in_sequence(ctx, st)


def _short(ctx: SolveContext, st: PhaseState) -> bool:
    """A disrupt phase too short for CP-SAT to return anything on its cluster (presolve alone
    takes most of the time): under ``min_bound_seconds`` on ``short_min_nodes`` nodes or more,
    or on ``unlisted_short_min_nodes`` or more where the place phase found that the patterns do
    not list (there no bound runs beside the search, and in under a second the search found
    nothing the undoing of moves did not). Not when its pattern LP is quick (frozen tiers
    above, or the top tier with listed patterns), which runs beside a search on several
    cores."""
    tuning, listings = ctx.tuning, ctx.listings
    large = ctx.nodes >= tuning.short_min_nodes or (
        ctx.nodes >= tuning.unlisted_short_min_nodes and listings.found_unlisted(st.tier)
    )
    return (
        large
        and st.seconds < tuning.min_bound_seconds
        and not (ctx.cores > 1 and listings.quick_disrupt_bound(st.tier, st.fixes, st.seconds))
    )


def search_alone(ctx: SolveContext, st: PhaseState) -> PhaseResult:
    """One whole-model search with all of the phase's time."""
    return conclude(ctx, st, search_step(ctx, st, st.seconds - (ctx.clock() - st.started), None))
