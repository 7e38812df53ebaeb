"""A phase's pattern-LP step: its bound, its dive and price-and-branch from its columns.

A place phase's bound (``bounds.placement``) is an upper bound on the pods it can place; a
disrupt phase's (``bounds.disruption``) a lower bound on its disruption. Below frozen tiers
either LP works on the frozen problem (``freeze``). When the bound does not prove the incumbent,
the LP's own packing (its dive) and price-and-branch from its generated columns may give a
better assignment. See ``docs/architecture.md#repack-phases``. Neighbours: ``place`` and
``disrupt`` (which call it), ``phase`` (where its steps are recorded).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from repack.bounds.disruption import disruption_bound
from repack.bounds.disruption_choice import disruption_solution
from repack.bounds.placement import pattern_solution, placement_bound
from repack.driver.context import SolveContext, better, satisfies
from repack.driver.options import Clock
from repack.driver.phase import PhaseState
from repack.problem.classes import Assignment
from repack.search.relabel import relabel


class LpResult(NamedTuple):
    """The LP's bound (None when it gave up) and its best assignment (None when it has none
    better than the target that meets the fixes)."""

    bound: int | None
    packed: Assignment | None


def pattern_lp(
    ctx: SolveContext,
    st: PhaseState,
    starts: Sequence[Assignment],
    seconds: float,
    target: int | None,
    first: bool = False,
    clock: Clock | None = None,
) -> LpResult:
    """The phase's pattern-LP bound and, unless it proves ``target``, the best of the LP's
    dive and the price-and-branch from its patterns. ``starts``: assignments meeting the fixes
    whose nodes seed the columns. ``first``: a place phase's early call, which gives up unless
    every node group's patterns list (the bound is then kept for the phase's later calls)."""
    problem, tier, fixes, maximise = ctx.problem, st.tier, st.fixes, st.maximise
    now = clock or ctx.clock
    if maximise and ctx.place_bound is not None and ctx.place_bound[0] == tier:
        return LpResult(ctx.place_bound[1], None)  # computed already in this place phase
    # never past the phase's deadline (a call that starts late gets what is left)
    seconds = min(seconds, st.deadline - now())
    if seconds < ctx.tuning.min_step_seconds:
        return LpResult(None, None)
    floors = [(f.tier, f.value) for f in fixes if f.kind == "placed" and f.op != "<="]
    limits = [(f.tier, f.value) for f in fixes if f.kind == "disruption" and f.op != ">="]
    columns: dict[Any, list[dict[int, int]]] = {}
    dived: list[Assignment] = []
    # frozen, either LP works without the higher tiers' pods
    frozen = ctx.freezes.of(tier, fixes)
    dive = ctx.freezes.may_dive(tier, fixes)
    space, lifted = problem, 0
    if frozen is not None:
        space, lifted = frozen.problem, frozen.held(tier)
        floors = [(q, v - frozen.held(q)) for q, v in floors]
        starts = [y for y in map(frozen.down, starts) if y is not None]
    args = (space, tier, floors, starts, seconds, now)
    listings = ctx.listings.listings
    if maximise:
        bound = placement_bound(
            *args,
            target=None if target is None else target - lifted,
            columns=columns,
            listed_only=first,
            packings=dived if dive else None,
            seed=ctx.options.seed,
            listings=listings,
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
            listings=listings,
        )
    st.step("pattern-lp", bound=bound)
    if frozen is not None:
        dived = [frozen.up(x) for x in dived]
    if maximise and bound is not None:
        ctx.place_bound = (tier, bound)
    if bound is not None and bound == target:
        return LpResult(bound, None)
    if not maximise:  # relabelling may still save moves on interchangeable nodes
        dived = [relabel(problem, x, tier, ctx.groups) for x in dived]
    dived = [x for x in dived if satisfies(problem, x, fixes, tier)]
    if dived:
        st.step("dive", dived[0])
    if dived and st.value(dived[0]) == bound:
        return LpResult(bound, dived[0])  # the dive met the bound: no packing can do better
    seconds = ctx.tuning.pack_share * (st.deadline - now())
    workers = ctx.options.workers
    if ctx.tuning.pack_seconds_per_column * sum(map(len, columns.values())) > seconds:
        packed = None  # it would overrun the phase
    else:
        if maximise:
            packed = pattern_solution(space, tier, floors, columns, seconds, workers)
        else:
            packed = disruption_solution(space, tier, floors, columns, seconds, workers, limits)
        if packed is not None and frozen is not None:
            packed = frozen.up(packed)
        if packed is not None:
            packed = relabel(problem, packed, tier, ctx.groups)
        if packed is None or not satisfies(problem, packed, fixes, tier):
            packed = None
        st.step("pack", packed)
    for x in dived:
        packed = better(problem, tier, x, packed)
    return LpResult(bound, packed)
