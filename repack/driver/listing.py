"""Whether a phase's node patterns list quickly, which decides much of its course.

Where every node group's maximal patterns can be listed (``bounds.patterns``; about four pods per
node) the pattern LPs are exact and fast; where they cannot (eight pods per node, many small
classes) a place phase starts with the swap search and its disrupt phase leans on the undoing of
moves. ``PatternListings`` keeps the listings made in a solve (a disrupt phase reuses its place
phase's) and what each place phase found. See ``docs/architecture.md#repack-phases``.
Neighbours: ``freeze`` (a frozen phase lists its frozen problem), ``place``, ``disrupt``.
"""

from __future__ import annotations

from collections.abc import Sequence

from repack.bounds.patterns import MAX_STATES, STATES_PER_SECOND, Listings
from repack.cpsat.model import Fix
from repack.driver.freeze import Freezes, first_tier
from repack.driver.options import Clock, Tuning
from repack.problem.classes import Problem


class PatternListings:
    """The pattern listings of one solve, and per tier whether its place phase found that its
    patterns do not list quickly."""

    def __init__(self, problem: Problem, freezes: Freezes, tuning: Tuning, clock: Clock) -> None:
        self.problem = problem
        self.freezes = freezes
        self.tuning = tuning
        self.clock = clock
        self.listings = Listings()
        self.unlisted: dict[int, bool] = {}

    def place_listed(self, tier: int, fixes: Sequence[Fix], seconds: float) -> bool:
        """Whether a place phase's pattern LP has its patterns listed, or lists them within
        ``list_share`` of the phase and the LP's budget of states (the listing is kept for it;
        a listing with too many states fails within a tenth of a second). The answer is kept
        for the tier's disrupt phase."""
        if tier in self.unlisted:
            return not self.unlisted[tier]
        frozen = self.freezes.of(tier, fixes)
        # as many states as the LP's own listing would get
        space = self.problem if frozen is None else frozen.problem
        listed = self.lists(space, tier, seconds, self.tuning.pattern_share)
        self.unlisted[tier] = not listed
        return listed

    def found_unlisted(self, tier: int) -> bool:
        """Whether the tier's place phase found that its patterns do not list quickly."""
        return self.unlisted.get(tier, False)

    def quick_disrupt_bound(self, tier: int, fixes: Sequence[Fix], seconds: float) -> bool:
        """Whether a short disrupt phase's pattern LP is quick: the tiers above are frozen, so
        only this tier's pods are in it, in what the frozen pods leave of each node, and those
        node groups' patterns list within ``list_share`` of the phase (32 nodes, two tiers,
        four pods per node: bound and dive in 0.1-0.4 s; at eight pods per node the listing
        fails, and the undoing of moves is better off with the time). So is the top tier's,
        with no tier above, where its place phase listed the patterns and the phase has
        ``quick_top_seconds`` a node."""
        frozen = self.freezes.of(tier, fixes)
        if frozen is None:
            return (
                first_tier(fixes)
                and self.unlisted.get(tier) is False
                and seconds >= self.tuning.quick_top_seconds * len(self.problem.node_names)
                and self.lists(self.problem, tier, seconds, self.tuning.list_share)
            )
        return self.lists(frozen.problem, tier, seconds, self.tuning.list_share)

    def lists(self, space: Problem, tier: int, seconds: float, state_share: float) -> bool:
        """Whether the node groups' patterns of ``space`` list within ``list_share`` of a phase
        of ``seconds``, in the states of ``state_share`` of it (a listing made is kept)."""
        states = min(MAX_STATES, int(STATES_PER_SECOND * state_share * seconds))
        until = self.clock() + self.tuning.list_share * seconds
        return self.listings.cover(space, tier, states, until, self.clock)

    def covered(self, space: Problem, tier: int) -> bool:
        """Whether every node of ``space`` is in a group already listed (no listing is made)."""
        return self.listings.cover(space, tier)
