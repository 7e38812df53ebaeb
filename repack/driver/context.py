"""What the phases of one solve share: the problem, options, clock and budget, the whole-model
searches, the pattern listings and freezes, the place LPs' bounds, and checks on assignments.

See ``docs/architecture.md#repack-phases``. Neighbours: ``solver`` (which makes one per solve),
``phase`` and the strategies in ``place`` and ``disrupt`` (which read and update it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from repack.cpsat.model import Fix
from repack.driver.budget import Budget
from repack.driver.freeze import Freezes
from repack.driver.listing import PatternListings
from repack.driver.options import Clock, SolveOptions, cores
from repack.driver.search import WholeSearch
from repack.problem.classes import (
    Assignment,
    Problem,
    disruption_at,
    feasible,
    placed_at,
    tier_value,
)
from repack.problem.plan import PhaseReport
from repack.search.relabel import node_groups, relabel

_Best = TypeVar("_Best", bound="Assignment | None")


def satisfies(problem: Problem, x: Assignment, fixes: Sequence[Fix], tier: int) -> bool:
    """Is x a solution of the phase model at ``tier`` with these fixes?"""
    if not feasible(problem, x, problem.active(tier)):
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


def better(
    problem: Problem, tier: int, found: Assignment | None, best: _Best
) -> _Best | Assignment:
    """``found`` when there is one and it is better than ``best`` at ``tier`` (``tier_value``),
    else ``best``."""
    if found is not None and (
        best is None or tier_value(problem, found, tier) > tier_value(problem, best, tier)
    ):
        return found
    return best


def restrict(problem: Problem, x: Assignment, tier: int) -> Assignment:
    """``x`` with the classes below ``tier`` left out (unplaced)."""
    return [
        list(row) if cls.priority >= tier else [0] * len(row)
        for row, cls in zip(x, problem.classes, strict=True)
    ]


class SolveContext:
    """The state the phases of one solve share."""

    def __init__(
        self, problem: Problem, options: SolveOptions, clock: Clock, deadline: float
    ) -> None:
        self.problem = problem
        self.options = options
        self.tuning = options.tuning
        self.clock = clock
        self.cores = cores(options)
        self.budget = Budget(problem, options, clock, deadline)
        self.search = WholeSearch(problem, options, clock)
        self.freezes = Freezes(problem)
        self.listings = PatternListings(problem, self.freezes, options.tuning, clock)
        self.groups = node_groups(problem)  # interchangeable nodes, for ``relabel``
        # the last place phase's pattern-LP bound: (tier, bound), reused by its later calls
        self.place_bound: tuple[int, int | None] | None = None
        self.reports: list[PhaseReport] = []

    @property
    def nodes(self) -> int:
        return len(self.problem.node_names)

    def satisfies(self, x: Assignment, fixes: Sequence[Fix], tier: int) -> bool:
        return satisfies(self.problem, x, fixes, tier)

    def relabelled(self, x: Assignment, fixes: Sequence[Fix], tier: int) -> Assignment:
        """``x`` with interchangeable nodes relabelled to move fewer pods, if that still meets
        the fixes (``relabel`` keeps every count; the check is the solver's own)."""
        y = relabel(self.problem, x, tier, self.groups)
        return y if y is not x and satisfies(self.problem, y, fixes, tier) else x
