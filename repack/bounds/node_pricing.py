"""Pricing a node of the disrupt phase's per-node pattern LP: the best pattern for the LP's
duals, where a slot for a pod the node runs now is worth more (the pod stays).

A node whose group's maximal patterns are listed (``patterns``; about four pods per node) is
priced exactly by ``ListedGroup``: one matrix product over the listing per group, plus each
node's precomputed staying pods. Other nodes (too many patterns, overloaded, or holding pods that
may only stay) are priced by ``node_best``, a bounded knapsack in which the first ``current``
pods of a class are worth more than the rest: on a capacity grid (``grid_knapsack``) where at
most two resources bind, else by branch and bound (``pricing.knapsack``). Pure: the clock is a
parameter. See ``docs/architecture.md#repack-phases``. Neighbours: ``disruption_lp`` (the LP),
``disruption`` (the bound), ``patterns``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from repack.bounds import grid_knapsack
from repack.bounds.patterns import (
    MAX_STATES,
    STATES_PER_SECOND,
    GroupPatterns,
    Listings,
    group_patterns,
)
from repack.bounds.pricing import knapsack
from repack.problem.classes import Problem, node_groups_by_key

Clock = Callable[[], float]
# values below this are treated as zero in the pricing (GLOP's duals carry about this noise)
EPS = 1e-7
# knapsack search nodes per pricing call; past it the loose bound is used (still valid); set by
# hand with the knapsack pricing
NODE_LIMIT = 3000
# relative error of a single-precision pattern value (float32 has 24 bits: 6e-8, with margin
# for the sum over a pattern's classes), added to every listed node's best value so the
# Lagrangian bound stays valid
ROUNDING = 1e-5


def node_best(
    problem: Problem,
    n: int,
    active: Sequence[int],
    upper: dict[int, int],
    pi: dict[int, float],
    worth: dict[int, float],
    until: float,
    clock: Clock,
) -> tuple[float, dict[int, int] | None, float]:
    """max over patterns a of node n of sum_c pi_c a_c + worth_c * min(a_c, current_c): an
    upper bound on it (exact unless the knapsack search hit its limit or ``until``), the best
    pattern found and that pattern's value."""
    values: list[float] = []
    weights: list[tuple[int, ...]] = []
    limits: list[int] = []
    owner: list[int] = []
    for c in active:
        most = upper[c]
        if most <= 0:
            continue
        cur = min(problem.classes[c].current[n], most)
        # the first ``cur`` pods of the class stay (worth ``worth[c]`` more), the rest are extra
        for value, limit in ((pi[c] + worth[c], cur), (pi[c], most - cur)):
            if value > EPS and limit > 0:
                values.append(value)
                weights.append(problem.classes[c].requests)
                limits.append(limit)
                owner.append(c)
    if not values:
        return 0.0, {}, 0.0
    if problem.overloaded[n]:  # no capacity row there: only current pods, each at most current
        counts = list(limits)
        total = float(sum(v * k for v, k in zip(values, counts, strict=True)))
        return total, _pattern(owner, counts), total
    gridded = grid_knapsack.pattern(values, weights, limits, problem.capacity[n])
    if gridded is not None:  # two binding resources at most: milliseconds, not a search
        found_value, counts = gridded
        ceiling = grid_knapsack.upper_bound(values, weights, limits, problem.capacity[n])
        assert ceiling is not None  # the same resources bind
        return max(found_value, ceiling), _pattern(owner, counts), found_value
    found = knapsack(
        values,
        weights,
        limits,
        problem.capacity[n],
        node_limit=NODE_LIMIT,
        partial=True,
        until=until,
        clock=clock,
    )
    if found is None:  # not reached with partial=True
        return float(sum(v * k for v, k in zip(values, limits, strict=True))), None, 0.0
    found_value, counts, ceiling = found
    # the pattern found is a column even when the search stopped early; the bound stays valid
    return ceiling, _pattern(owner, counts), found_value


def _pattern(owner: Sequence[int], counts: Sequence[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for c, k in zip(owner, counts, strict=True):
        if k:
            out[c] = out.get(c, 0) + k
    return out


class ListedGroup:
    """Exact pricing of the nodes of one group from its listed maximal patterns: per node, the
    pods each pattern lets stay (computed once), so a round costs one matrix product. With
    disruption limits from higher tiers a staying pod is worth more the higher its priority,
    so the staying pods are then kept per priority level of the node's pods."""

    def __init__(
        self, problem: Problem, listing: GroupPatterns, members: Sequence[int], split: bool
    ) -> None:
        self.listing = listing
        self.members = list(members)
        self.priority = [problem.classes[c].priority for c in listing.classes]
        counts = listing.counts
        # pods per pattern, scaled below one pod: a tie-break only
        self.size = counts.sum(axis=1) / np.float32(1 + counts.sum(axis=1).max(initial=0))
        # one contiguous row per class: a node's staying pods sum the few rows of its classes
        # (measured on 32 nodes, 101 861 patterns of 50 classes: 0.04 s for all nodes, the
        # transposed copy most of it, where slicing the pattern-major matrix took 0.07 s)
        by_class = np.ascontiguousarray(counts.T)
        # per node: (priority level, pods of that level each pattern lets stay)
        self.stays: dict[int, list[tuple[int, np.ndarray]]] = {}
        for n in members:
            levels: dict[int, np.ndarray] = {}
            for j, c in enumerate(listing.classes):
                here = problem.classes[c].current[n]
                if not here:
                    continue
                # every pod is worth the same without split: one level (any priority present)
                q = self.priority[j] if split else min(self.priority)
                kept = np.minimum(by_class[j], np.float32(here))
                levels[q] = kept if q not in levels else levels[q] + kept
            if not levels and not split:
                levels[min(self.priority, default=0)] = np.zeros(len(counts), dtype=np.float32)
            self.stays[n] = list(levels.items())

    def keepers(self, n: int, k: int) -> list[int]:
        """The k patterns that let the most of node n's pods stay (fuller ones first among
        equals)."""
        score = sum(kept for _, kept in self.stays[n]) + self.size
        k = min(k, len(score))
        top = np.argpartition(-score, k - 1)[:k]
        return [int(i) for i in top[np.argsort(-score[top])]]

    def values(self, pi: dict[int, float]) -> np.ndarray:
        """pi.P for every listed pattern P, in single precision (the listing's: a tenth of the
        time of a double product); ``exact`` recomputes the one that matters."""
        duals = np.array([pi.get(c, 0.0) for c in self.listing.classes], dtype=np.float32)
        return self.listing.values(duals)

    def node_values(self, n: int, shared: np.ndarray, worth: dict[int, float]) -> np.ndarray:
        """pi.P + the worth of the pods P lets stay on node n (``worth``: of a pod by its
        priority), for every listed pattern P."""
        out = shared
        for q, kept in self.stays[n]:
            out = out + np.float32(worth[q]) * kept
        return out

    def exact(self, n: int, i: int, pi: dict[int, float], worth: dict[int, float]) -> float:
        """pi.P + the worth of the pods pattern i lets stay on node n, in double precision."""
        return float(sum(worth[q] * float(kept[i]) for q, kept in self.stays[n])) + sum(
            pi.get(c, 0.0) * float(k)
            for c, k in zip(self.listing.classes, self.listing.counts[i], strict=True)
            if k
        )


def listed_groups(
    problem: Problem,
    active: Sequence[int],
    seconds: float,
    deadline: float,
    clock: Clock,
    split: bool,
    listings: Listings | None,
) -> list[ListedGroup]:
    """The listed groups of the nodes whose maximal patterns are few enough to list (the other
    nodes, overloaded or holding pods that may only stay, are unknown to a listing)."""
    groups, _ = node_groups_by_key(problem, active)
    states = min(MAX_STATES, int(STATES_PER_SECOND * seconds))
    out = []
    for (cap, elig), members in groups.items():
        listing = group_patterns(problem, active, cap, elig, states, deadline, clock, listings)
        if listing is not None and len(listing.counts):
            out.append(ListedGroup(problem, listing, members, split))
    return out
