"""Every maximal node pattern of a group of interchangeable nodes, for exact pattern pricing.

A *pattern* is a multiset of pod classes that fits one node of a group (counts per class at most
the class's pods, every resource within the group's free capacity); it is *maximal* when no pod
of any class with pods left over fits beside it. On a group of interchangeable nodes the place
phase is a max-cardinality vector bin packing: choose a pattern per node. Every pattern is
contained in a maximal one and the pattern LP lets a pattern over-supply a class, so the maximal
patterns are all the pattern LP of ``placement`` ever needs. When they are few (about four pods per
node: hundreds to a few thousand on 8-16 nodes) they are enumerated once, and pricing a column
becomes one matrix-vector product over them, exact and far cheaper than a knapsack search per
group and round; past a cap (eight pods per node explodes) the caller keeps the knapsack pricing.

The enumeration grows the multisets one pod at a time, level by level: a state is a multiset
whose classes are added in nondecreasing index order (so each multiset is met once), and a state
no class can be added to is maximal. Hand-written because no library at hand enumerates maximal
multi-dimensional knapsack fillings; each level is grown by a compiled loop (``_grow``, numba),
which keeps it to milliseconds. Pure. See ``docs/architecture.md#repack-phases``. Neighbours:
``placement`` and ``node_pricing`` (which price with these), ``driver.listing``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import types

from repack.problem.classes import Problem, node_groups_by_key
from repack.search.compiled import compiled

# most states (partial multisets) one level may hold; past it the group is not enumerated
# (measured: 16 nodes x 4 pods per node needs about 30 000, 32 x 4 about 400 000)
MAX_STATES = 200_000
# states a listing may hold per second of the LP's time: set when listing ran at 400 000 a
# second; compiled it runs at 4-5 million, and the cap keeps the listings and their pricing small
STATES_PER_SECOND = 200_000
# columns added to the master LP per group and pricing round (the best by reduced cost), at
# least; set by hand (``placement`` asks for more on large groups, measured)
TOP_COLUMNS = 8
# entries of a listing up to which its single-precision copy is kept for the pricing products
# (32 MB): a product over the int16 counts converts them first, three to four times the time
# of the product itself (100 000 patterns of 50 classes: 3.1 ms against 0.8 ms)
FLOAT_ENTRIES = 8_000_000


@dataclass(frozen=True)
class GroupPatterns:
    """The maximal patterns of one node group: ``counts[i, j]`` = pods of class
    ``classes[j]`` in pattern i."""

    classes: tuple[int, ...]
    counts: np.ndarray

    def pattern(self, i: int) -> dict[int, int]:
        row = self.counts[i]
        return {self.classes[j]: int(row[j]) for j in np.flatnonzero(row)}

    @cached_property
    def _weights(self) -> np.ndarray:
        """The counts in single precision, made once (unless too large)."""
        if self.counts.size > FLOAT_ENTRIES:
            return self.counts
        return self.counts.astype(np.float32)

    def values(self, duals: np.ndarray) -> np.ndarray:
        """duals.P for every pattern P (``duals`` per class of ``classes``, single precision;
        the same values as a product over the counts)."""
        return self._weights @ duals

    def price(
        self, duals: dict[int, float], mu: float, columns: int = TOP_COLUMNS
    ) -> tuple[list[dict[int, int]], float]:
        """The patterns of positive reduced cost under class duals ``duals`` and group dual
        ``mu`` (best first, at most ``columns``), and the exact best pattern value."""
        if not len(self.counts):
            return [], 0.0
        pi = np.array([duals.get(c, 0.0) for c in self.classes], dtype=np.float32)
        values = self.values(pi)
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
    most = np.ascontiguousarray(limits, dtype=np.int64)
    counts = np.zeros((1, k), dtype=np.int16)
    room = np.ascontiguousarray(free[None, :])
    last = np.zeros(1, dtype=np.int64)
    found: list[np.ndarray] = []
    while len(counts):
        if clock() > until:
            return None
        grown, room, last, maximal, states = _grow(counts, room, last, req, most, max_states)
        if maximal.any():
            found.append(counts[maximal])
        if states < 0:
            return None
        counts = grown
    return np.concatenate(found) if found else np.zeros((0, k), dtype=np.int16)


_COUNTS, _ROOM = types.int16[:, ::1], types.int64[:, ::1]


@compiled(types.boolean(_COUNTS, _ROOM, _ROOM, types.int64[::1], types.int64, types.int64))
def _fits(
    counts: np.ndarray, room: np.ndarray, req: np.ndarray, most: np.ndarray, s: int, c: int
) -> bool:
    """Whether a pod of class ``c`` fits state ``s``: the class has pods left and room."""
    if counts[s, c] >= most[c]:
        return False
    for r in range(req.shape[1]):  # noqa: SIM110 - a plain loop is what numba compiles best
        if room[s, r] < req[c, r]:
            return False
    return True


_LEVEL = types.Tuple((_COUNTS, _ROOM, types.int64[::1], types.boolean[::1], types.int64))


@compiled(_LEVEL(_COUNTS, _ROOM, types.int64[::1], _ROOM, types.int64[::1], types.int64))
def _grow(
    counts: np.ndarray,
    room: np.ndarray,
    last: np.ndarray,
    req: np.ndarray,
    most: np.ndarray,
    max_states: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """One level of the enumeration: the states one pod larger (each multiset grown only by a
    class at or after the one it last took, so it is met once, in the order the classes are
    taken), their room and last class, which of ``counts`` are maximal (no pod of any class
    with pods left fits), and how many states the next level holds (-1, and no states, past
    ``max_states``). Compiled: as numpy calls each level made boolean matrices of states by
    classes, memory-bound (131 ms to list 32 nodes with four pods per node, 44 ms here)."""
    n, k = counts.shape
    n_res = req.shape[1]
    maximal = np.zeros(n, dtype=np.bool_)
    # room for every child a state could have, or one past the cap
    most_children = 0
    for s in range(n):
        most_children += k - last[s]
    size = min(most_children, max_states + 1)
    grown = np.empty((size, k), dtype=np.int16)
    left = np.empty((size, n_res), dtype=np.int64)
    taken = np.empty(size, dtype=np.int64)
    states = 0
    for s in range(n):
        parent = True
        for c in range(last[s], k):
            if not _fits(counts, room, req, most, s, c):
                continue
            parent = False
            if states >= max_states:
                return grown[:0], left[:0], taken[:0], maximal, -1
            grown[states, :] = counts[s, :]
            grown[states, c] += 1
            for r in range(n_res):
                left[states, r] = room[s, r] - req[c, r]
            taken[states] = c
            states += 1
        if parent:
            # no child: maximal unless a class before its last one still fits
            maximal[s] = True
            for c in range(last[s]):
                if _fits(counts, room, req, most, s, c):
                    maximal[s] = False
                    break
    return grown[:states], left[:states], taken[:states], maximal, states


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
    """The requests and free capacity restricted to the resources that can bind a pattern."""
    keep = binding(req, cap, pods)
    return np.ascontiguousarray(req[:, keep]), np.ascontiguousarray(cap[keep])


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
    on 32 nodes with four pods per node: 40-60 ms a listing; 130-170 ms as numpy calls).
    ``group_patterns`` fills it."""

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
