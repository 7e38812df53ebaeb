"""Every maximal node pattern of a group of interchangeable nodes, for exact pattern pricing.

A *pattern* is a multiset of pod classes that fits one node of a group (counts per class at most
the class's pods, every resource within the group's free capacity); it is *maximal* when no pod
of any class with pods left over fits beside it. On a group of interchangeable nodes the place
phase is a max-cardinality vector bin packing: choose a pattern per node. Every pattern is
contained in a maximal one and the pattern LP lets a pattern over-supply a class, so the maximal
patterns are all the pattern LP of ``bounds`` ever needs. When they are few (about four pods per
node: hundreds to a few thousand on 8-16 nodes) they are enumerated once, and pricing a column
becomes one matrix-vector product over them, exact and far cheaper than a knapsack search per
group and round; past a cap (eight pods per node explodes) the caller keeps the knapsack pricing.

The enumeration grows the multisets one pod at a time, level by level, with numpy: a state is a
multiset whose classes are added in nondecreasing index order (so each multiset is met once),
and a state no class can be added to is maximal. Hand-written because no library at hand
enumerates maximal multi-dimensional knapsack fillings; numpy keeps it to milliseconds.
Pure. Neighbours: ``bounds`` (the pattern LP that prices with these), ``solver``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler_ext.repack.classes import Problem, node_groups_by_key

# most states (partial multisets) one level may hold; past it the group is not enumerated
# (measured: 16 nodes x 4 pods per node needs about 30 000, 32 x 4 about 400 000)
MAX_STATES = 200_000
# columns added to the master LP per group and pricing round (the best by reduced cost), at
# least; ``bounds`` asks for more on large groups
TOP_COLUMNS = 8


@dataclass(frozen=True)
class GroupPatterns:
    """The maximal patterns of one node group: ``counts[i, j]`` = pods of class
    ``classes[j]`` in pattern i."""

    classes: tuple[int, ...]
    counts: np.ndarray

    def pattern(self, i: int) -> dict[int, int]:
        row = self.counts[i]
        return {self.classes[j]: int(row[j]) for j in np.flatnonzero(row)}

    def price(
        self, duals: dict[int, float], mu: float, columns: int = TOP_COLUMNS
    ) -> tuple[list[dict[int, int]], float]:
        """The patterns of positive reduced cost under class duals ``duals`` and group dual
        ``mu`` (best first, at most ``columns``), and the exact best pattern value."""
        if not len(self.counts):
            return [], 0.0
        pi = np.array([duals.get(c, 0.0) for c in self.classes], dtype=np.float32)
        values = self.counts @ pi
        k = min(columns, len(values))
        top = np.argpartition(-values, k - 1)[:k]
        top = top[np.argsort(-values[top])]
        chosen = [self.pattern(int(i)) for i in top if values[i] > mu + 1e-7]
        return chosen, float(values[top[0]])


def maximal_patterns(
    requests: Sequence[Sequence[int]],
    limits: Sequence[int],
    cap: Sequence[int],
    max_states: int = MAX_STATES,
    until: float = float("inf"),
    clock: Callable[[], float] = lambda: 0.0,
) -> np.ndarray | None:
    """All maximal patterns (rows of counts aligned with ``requests``), or None when a level
    would exceed ``max_states`` states or ``clock()`` passes ``until``."""
    k = len(requests)
    req, free = _narrowed(
        np.asarray(requests, dtype=np.int64).reshape(k, len(cap)),
        np.maximum(np.asarray(cap, dtype=np.int64), 0),
        sum(limits),
    )
    most = np.asarray(limits, dtype=np.int64)
    small = np.int16 if k < 2**15 else np.int64  # class indices, compared once per state
    index: np.ndarray = np.arange(k, dtype=small)
    counts = np.zeros((1, k), dtype=np.int16)
    room = free[None, :]
    last: np.ndarray = np.zeros(1, dtype=small)
    found: list[np.ndarray] = []
    while len(counts):
        addable = counts < most[None, :]
        for r in range(req.shape[1]):
            addable &= room[:, r, None] >= req[None, :, r]
        maximal = ~addable.any(axis=1)
        if maximal.any():
            found.append(counts[maximal])
        addable &= index[None, :] >= last[:, None]  # each multiset in one order only
        if np.count_nonzero(addable) > max_states or clock() > until:
            return None
        state, cls = np.nonzero(addable)
        counts = counts[state]
        counts[np.arange(len(state)), cls] += 1
        room = room[state] - req[cls]
        last = cls.astype(small)
    return np.concatenate(found) if found else np.zeros((0, k), dtype=np.int16)


def binding(req: np.ndarray, cap: np.ndarray, pods: int) -> list[int]:
    """The resources (columns of ``req``) that can bind a pattern of at most ``pods`` pods. A
    resource cannot bind when the most pods a pattern can hold by the other resources still
    kept (each: its capacity over its smallest request; at most ``pods``), each asking its
    largest request, still fit (typically the pod count, 110 per node). Dropped one at a time,
    so each is implied by those kept. Also used by ``grid_knapsack``."""
    keep = list(range(req.shape[1]))
    for r in range(req.shape[1]):
        most = pods
        for o in keep:
            if o != r and len(req) and (req[:, o] > 0).all():
                most = min(most, int(cap[o] // req[:, o].min()))
        if most * int(req[:, r].max(initial=0)) <= cap[r]:
            keep.remove(r)
    return keep


def _narrowed(req: np.ndarray, cap: np.ndarray, pods: int) -> tuple[np.ndarray, np.ndarray]:
    """The requests and free capacity restricted to the resources that can bind a pattern, in
    the narrowest integer type that holds them (the listing is memory-bound: measured 1.3-2x
    faster on 32 nodes with four pods per node)."""
    keep = binding(req, cap, pods)
    req, cap = req[:, keep], cap[keep]
    if max(int(req.max(initial=0)), int(cap.max(initial=0))) < 2**31:
        req, cap = req.astype(np.int32), cap.astype(np.int32)
    return req, cap


def group_patterns(
    problem: Problem,
    active: Sequence[int],
    cap: Sequence[int],
    eligible: Sequence[bool],
    max_states: int = MAX_STATES,
    until: float = float("inf"),
    clock: Callable[[], float] = lambda: 0.0,
    made: Listings | None = None,
) -> GroupPatterns | None:
    """The maximal patterns of a node group with free capacity ``cap`` over the ``active``
    classes flagged ``eligible`` there, or None when there are too many. ``made``: the
    listings made earlier in the solve, reused and added to (a listing cut short by ``until``
    or ``max_states`` is not kept: a later call with more time may finish it)."""
    key = _key(problem, active, cap, eligible)
    if made is not None and key in made:
        return made[key]
    members = tuple(c for c, ok in zip(active, eligible, strict=True) if ok)
    counts = maximal_patterns(
        [problem.classes[c].requests for c in members],
        [problem.classes[c].total for c in members],
        cap,
        max_states,
        until=until,
        clock=clock,
    )
    if counts is None:
        return None
    found = GroupPatterns(members, counts.astype(np.float32))
    if made is not None:
        made[key] = found
    return found


def _key(
    problem: Problem, active: Sequence[int], cap: Sequence[int], eligible: Sequence[bool]
) -> tuple[tuple[int, ...], ...]:
    """What a listing depends on: the classes, their pods, the free capacity and eligibility."""
    totals = tuple(problem.classes[c].total for c in active)
    return (tuple(active), totals, tuple(cap), tuple(int(ok) for ok in eligible))


class Listings(dict[tuple[tuple[int, ...], ...], GroupPatterns]):
    """The listings made so far in one solve, by (active classes, their pods, free capacity,
    eligibility): a place phase and the disrupt phase after it list the same groups (measured
    on 32 nodes with four pods per node: 0.1-0.35 s a listing). ``group_patterns`` fills it."""

    def cover(
        self,
        problem: Problem,
        tier: int,
        max_states: int = 0,
        until: float = float("inf"),
        clock: Callable[[], float] = lambda: 0.0,
    ) -> bool:
        """Whether every node of a phase of ``tier`` is in a listed group, listing the groups
        still missing within ``max_states`` and ``until`` (by default none: a listing with no
        state to spare gives up at once)."""
        active = problem.active(tier)
        groups, others = node_groups_by_key(problem, active)
        return not others and all(
            group_patterns(problem, active, cap, elig, max_states, until, clock, self) is not None
            for cap, elig in groups
        )
