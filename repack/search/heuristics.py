"""Fast starting solutions for a tier's phases: the hints and incumbents the solver improves on.

* ``keep_and_fill``: running pods where they are (while they fit), the rest first-fit-decreasing
  (``classes.greedy_complete``);
* ``make_room``: for each pod still unplaced, the fewest moves (one, then two) of same-tier pods off
  one node that make it fit — the fragmentation article's "placement engine";
* ``pack_from_scratch``: first-fit- and best-fit-decreasing of every pod of the tier and above,
  ignoring where pods run now (many moves, but often more pods placed).

``best_start`` returns the best of them for the tier's objective (placed, then disruption), each
first relabelled on identical nodes (``relabel``).
All of them only ever return assignments that ``classes.feasible`` accepts. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numba import types

from repack.problem.classes import (
    Assignment,
    Problem,
    feasible,
    greedy_complete,
    loads,
    tier_value,
)
from repack.search.compiled import compiled
from repack.search.relabel import node_groups, relabel

I1, I2 = types.int64[::1], types.int64[:, ::1]
B1, B2 = types.boolean[::1], types.boolean[:, ::1]
i64 = types.int64
# what a make_room search reads but never changes: free capacity per (node, resource), requests
# per (class, resource), eligibility per (class, node), the overloaded nodes
FIXED = types.Tuple((I2, I2, B2, B1))


def sizes(problem: Problem, active: Sequence[int]) -> dict[int, float]:
    """Per class of ``active``, a pod's size: its requests as shares of the cluster's free
    capacity, summed over the resources (the order "largest first" of the heuristics)."""
    caps = problem.capacity
    totals = [max(1, sum(max(0, cap[r]) for cap in caps)) for r in range(len(problem.resources))]
    return {
        c: sum(q / t for q, t in zip(problem.classes[c].requests, totals, strict=True))
        for c in active
    }


class _State:
    def __init__(self, problem: Problem, x: Assignment) -> None:
        self.problem = problem
        self.x = [list(row) for row in x]
        self.load = loads(problem, self.x)

    def fits(self, c: int, n: int, minus: Sequence[int] = ()) -> bool:
        if self.problem.overloaded[n] or n not in self.problem.classes[c].eligible:
            return False
        req = self.problem.classes[c].requests
        cap = self.problem.capacity[n]
        load = self.load[n]
        for r, need in enumerate(req):
            freed = sum(self.problem.classes[d].requests[r] for d in minus) if minus else 0
            if load[r] - freed + need > cap[r]:
                return False
        return True

    def shift(self, c: int, n: int, sign: int) -> None:
        self.x[c][n] += sign
        for r, need in enumerate(self.problem.classes[c].requests):
            self.load[n][r] += sign * need


def make_room(
    problem: Problem,
    x: Assignment,
    active: Sequence[int],
    tier: int,
    until: float = math.inf,
    clock: Callable[[], float] = lambda: 0.0,
) -> Assignment:
    """Place unplaced pods of ``tier`` by moving at most two pods of the same tier each;
    stops trying new pods once ``clock()`` passes ``until``."""
    size = sizes(problem, active)
    nodes = len(problem.node_names)
    order = sorted(
        (c for c in active if problem.classes[c].priority == tier), key=lambda c: -size[c]
    )
    resources = len(problem.resources)
    counts = np.array(x, dtype=np.int64).reshape(len(problem.classes), nodes)
    cap = np.array(problem.capacity, dtype=np.int64).reshape(nodes, resources)
    requests = np.array([cls.requests for cls in problem.classes], dtype=np.int64).reshape(
        len(problem.classes), resources
    )
    load = np.ascontiguousarray(counts.T @ requests)
    eligible = np.zeros((len(problem.classes), nodes), dtype=np.bool_)
    for c, cls in enumerate(problem.classes):
        eligible[c, list(cls.eligible)] = True
    overloaded = np.array(problem.overloaded, dtype=np.bool_).reshape(nodes)
    # in class order: the pairs tried are in the order of their classes
    movable = np.array(sorted(order), dtype=np.int64)
    fixed = (cap, requests, eligible, overloaded)
    for c in order:
        while counts[c].sum() < problem.classes[c].total and clock() < until:
            if not _place_one(counts, load, fixed, movable, c):
                break
    y: Assignment = counts.tolist()
    return y if feasible(problem, y, active) else x


@compiled(types.boolean(I2, FIXED, i64, i64, i64, i64))
def _fits(
    load: np.ndarray,
    fixed: tuple[np.ndarray, ...],
    c: int,
    n: int,
    first: int,
    second: int,
) -> bool:
    """Whether a pod of class c fits on node n once a pod of class ``first`` and one of
    ``second`` have left it (-1: none)."""
    cap, requests, eligible, overloaded = fixed
    if overloaded[n] or not eligible[c, n]:
        return False
    for r in range(load.shape[1]):
        freed = 0
        if first >= 0:
            freed += requests[first, r]
        if second >= 0:
            freed += requests[second, r]
        if load[n, r] - freed + requests[c, r] > cap[n, r]:
            return False
    return True


@compiled(types.none(I2, I2, I2, i64, i64, i64))
def _shift(
    counts: np.ndarray, load: np.ndarray, requests: np.ndarray, c: int, n: int, sign: int
) -> None:
    counts[c, n] += sign
    for r in range(load.shape[1]):
        load[n, r] += sign * requests[c, r]


@compiled(types.int64(I2, I2, FIXED, i64, i64))
def _elsewhere(
    counts: np.ndarray, load: np.ndarray, fixed: tuple[np.ndarray, ...], d: int, n: int
) -> int:
    """A pod of class d moved to the first node other than n where it fits: that node, or -1
    (and nothing moved)."""
    for m in range(counts.shape[1]):
        if m != n and _fits(load, fixed, d, m, -1, -1):
            _shift(counts, load, fixed[1], d, m, 1)
            return m
    return -1


@compiled(types.boolean(I2, I2, FIXED, i64, i64, i64, i64))
def _make_room(
    counts: np.ndarray,
    load: np.ndarray,
    fixed: tuple[np.ndarray, ...],
    c: int,
    n: int,
    first: int,
    second: int,
) -> bool:
    """A pod of class c placed on node n after a pod of class ``first`` and one of ``second``
    (-1: none) leave it for the first other nodes where they fit; False, and nothing changed,
    when they do not fit elsewhere or c still does not fit."""
    requests = fixed[1]
    if not _fits(load, fixed, c, n, first, second):
        return False
    _shift(counts, load, requests, first, n, -1)
    if second >= 0:
        _shift(counts, load, requests, second, n, -1)
    to_first = _elsewhere(counts, load, fixed, first, n)
    to_second = -1
    if to_first >= 0 and second >= 0:
        to_second = _elsewhere(counts, load, fixed, second, n)
    if to_first >= 0 and (second < 0 or to_second >= 0) and _fits(load, fixed, c, n, -1, -1):
        _shift(counts, load, requests, c, n, 1)
        return True
    if to_second >= 0:
        _shift(counts, load, requests, second, to_second, -1)
    if to_first >= 0:
        _shift(counts, load, requests, first, to_first, -1)
    _shift(counts, load, requests, first, n, 1)
    if second >= 0:
        _shift(counts, load, requests, second, n, 1)
    return False


@compiled(types.boolean(I2, I2, FIXED, I1, i64))
def _place_one(
    counts: np.ndarray,
    load: np.ndarray,
    fixed: tuple[np.ndarray, ...],
    movable: np.ndarray,
    c: int,
) -> bool:
    """One more pod of class c placed: on the first node where it fits, else on the first
    where one pod (then two) of the ``movable`` classes, in their order, can leave for other
    nodes. Compiled: in Python, trying every node and pair for each pod took 0.04-0.18 s of a
    1 s solve on 32 nodes."""
    eligible, overloaded = fixed[2], fixed[3]
    nodes = counts.shape[1]
    for n in range(nodes):
        if _fits(load, fixed, c, n, -1, -1):
            _shift(counts, load, fixed[1], c, n, 1)
            return True
    for k in (1, 2):
        for n in range(nodes):
            if overloaded[n] or not eligible[c, n]:
                continue
            for i in range(len(movable)):
                a = movable[i]
                if a == c or counts[a, n] <= 0:
                    continue
                if k == 1:
                    if _make_room(counts, load, fixed, c, n, a, -1):
                        return True
                    continue
                for j in range(i, len(movable)):
                    b = movable[j]
                    # two pods of one class only where two run
                    if b == c or counts[b, n] <= (1 if b == a else 0):
                        continue
                    if _make_room(counts, load, fixed, c, n, a, b):
                        return True
    return False


def pack_from_scratch(
    problem: Problem, base: Assignment, active: Sequence[int], tier: int, best_fit: bool
) -> Assignment:
    """Every pod of classes at ``tier`` re-packed decreasing by size (higher tiers kept)."""
    st = _State(problem, base)
    size = sizes(problem, active)
    fill = [c for c in active if problem.classes[c].priority == tier]
    for c in fill:
        for n in range(len(problem.node_names)):
            if st.x[c][n]:
                st.shift(c, n, -st.x[c][n])
    items = sorted(
        (c for c in fill for _ in range(problem.classes[c].total)), key=lambda c: -size[c]
    )
    order = {c: sorted(problem.classes[c].eligible) for c in fill}
    for c in items:
        if not best_fit:
            n = next((n for n in order[c] if st.fits(c, n)), -1)
            if n >= 0:
                st.shift(c, n, +1)
            continue
        candidates = [n for n in order[c] if st.fits(c, n)]
        if not candidates:
            continue
        req = problem.classes[c].requests
        n = min(
            candidates,
            key=lambda n: sum(
                (problem.capacity[n][r] - st.load[n][r] - req[r]) / max(1, problem.capacity[n][r])
                for r in range(len(req))
            ),
        )
        st.shift(c, n, +1)
    return st.x


def best_start(
    problem: Problem,
    higher: Assignment,
    tier: int,
    until: float = math.inf,
    clock: Callable[[], float] = lambda: 0.0,
) -> tuple[Assignment, bool]:
    """The best starting assignment for ``tier`` given the settled higher tiers ``higher``;
    the flag says whether it is feasible (it always is unless PDB budgets get in the way)."""
    active = problem.active(tier)
    new = [c for c, cls in enumerate(problem.classes) if cls.priority == tier]
    kept = greedy_complete(problem, higher, new)
    candidates = [kept]
    if feasible(problem, kept, active):
        if tier_value(problem, kept, tier) == (sum(problem.classes[c].total for c in active), 0):
            # every pod placed, none moved: nothing is better, so the others are not tried (on
            # a 32-node, 4-tier instance they took a tenth of a 1 s budget in the upper tiers)
            return kept, True
        candidates.append(make_room(problem, kept, active, tier, until, clock))

    # each further start only while time is left (on 128 nodes with eight pods per node the
    # re-packings and their relabelling take 0.1-0.25 s each; on 256 nodes a late first-fit
    # re-packing took the place phase's time and placed fewer pods than the pods where they run)
    for best_fit in (False, True):
        if clock() < until:
            candidates.append(pack_from_scratch(problem, higher, active, tier, best_fit))
    ok = [x for x in candidates if feasible(problem, x, active)]
    if not ok:
        return kept, False
    # the re-packings ignore where pods run: relabelling identical nodes undoes most of their moves
    groups = node_groups(problem)
    ok = [relabel(problem, x, tier, groups) if clock() < until else x for x in ok]
    return max(ok, key=lambda x: tier_value(problem, x, tier)), True


def repair(problem: Problem, x: Assignment, active: Sequence[int]) -> Assignment | None:
    """The same number of pods per class as ``x``, but with running pods kept where they run
    whenever possible: keep, then place the rest first-fit-decreasing. None if that fails."""
    st = _State(problem, [[0] * len(problem.node_names) for _ in problem.classes])
    size = sizes(problem, active)
    want = {c: sum(x[c]) for c in active}
    # keep running pods, highest priority first, while they fit and the class needs them
    for c in sorted(active, key=lambda c: (-problem.classes[c].priority, -size[c])):
        cls = problem.classes[c]
        for n, count in enumerate(cls.current):
            for _ in range(count):
                if sum(st.x[c]) >= want[c]:
                    break
                if st.fits(c, n) or (problem.overloaded[n] and st.x[c][n] < count):
                    st.shift(c, n, +1)
    rest = sorted(
        (c for c in active for _ in range(want[c] - sum(st.x[c]))),
        key=lambda c: (-size[c], c),
    )
    for c in rest:
        target = next((n for n in sorted(problem.classes[c].eligible) if st.fits(c, n)), None)
        if target is None:
            return None
        st.shift(c, target, +1)
    return st.x if feasible(problem, st.x, active) else None


def reduce_moves(
    problem: Problem,
    x: Assignment,
    active: Sequence[int],
    until: float = math.inf,
    clock: Callable[[], float] = lambda: 0.0,
) -> Assignment:
    """Local search on disruption with the placed counts per class unchanged: send a moved pod
    back where it ran, or swap it with a pod that took its place, while that fits."""
    st = _State(problem, x)
    cur = {c: problem.classes[c].current for c in active}
    improved = True
    while improved and clock() < until:
        improved = False
        for c in active:
            for n in range(len(problem.node_names)):
                if st.x[c][n] >= cur[c][n]:
                    continue  # no pod of c left n
                for m in range(len(problem.node_names)):
                    if m == n or st.x[c][m] <= cur[c][m]:
                        continue  # no pod of c arrived at m
                    st.shift(c, m, -1)
                    if st.fits(c, n):
                        st.shift(c, n, +1)
                        improved = True
                        break
                    # swap with a pod d that arrived at n and would not be worse off at m
                    for d in active:
                        if d == c or st.x[d][n] <= cur[d][n]:
                            continue
                        st.shift(d, n, -1)
                        if st.fits(c, n) and st.fits(d, m):
                            st.shift(c, n, +1)
                            st.shift(d, m, +1)
                            improved = True
                            break
                        st.shift(d, n, +1)
                    if improved:
                        break
                    st.shift(c, m, +1)
                if improved:
                    break
            if improved:
                break
    return st.x if feasible(problem, st.x, active) else x
