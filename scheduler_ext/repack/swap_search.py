"""Weighted swap search on a tier's pods: the primal heuristic of tight packings (place phases)
and of undoing moves (disrupt phases).

A tier's place phase on eight pods per node is a tight vector packing: the last pods fit only
after many pods trade nodes, which neither CP-SAT's search on the whole model nor the
neighbourhood refills of ``lns`` (a CP-SAT call each) find within seconds. This search makes
single moves instead, hundreds to thousands a second, each step evaluating every candidate at
once with numpy:

* *shift* a pod of class k from node j to node b; *swap* it with a pod of another class on node
  b; *trade* it for an unplaced pod of the tier (the placed count stays);
* the state may overload nodes: its cost is the weighted overload, the sum over nodes and
  resources of weight[b, r] * excess / mean request, plus ``mu`` per unit of disruption (moves
  1, evictions 2, as the phases count it): by default (MU) a tie-break that keeps pods where they
  run; ``scaled``, ``mu`` times the mean weight, so that disruption keeps its weight while the
  weights grow (``undo_moves`` below);
* the sources of a step's moves are the pods on one overloaded node, drawn at random; it takes
  the cheapest move that is not tabu (a class that left a node may not return there for a few
  steps); when no move lowers the cost, the weights of the overloaded resources grow instead (a
  breakout: the search is pushed out of the local minimum).

Every time the state fits it is recorded and one more unplaced pod of the tier goes where it
overloads least, so the search then works on fitting one pod more. It ends at the target, at
the deadline, or STALL_STEPS steps after its last gain. Measured on the grid's tight cells
(8-32 nodes, 8 pods per node, 100-105 % usage): 1-6 pods more than the greedy start within
0.2 s, more than 60 s solves of CP-SAT with LNS had found, each within 150 steps of the last.

A disrupt phase's packing is improved by the same moves (``undo_moves``), as an iterated local
search: a kick sends one to three moved pods back to the nodes they run on, the weighted search
repairs the overload it causes with disruption weighing more, and a repair that fits with no
more moves is kept. Measured from the packings a 1 s solve ends with on 8-32 nodes with 8 pods
per node at 100-105 % usage, one more second of it cut their moves by 13-47 % (62 to 53-54 on
32 nodes, 27 to 18-22 and 15 to 12-13 on 16, 19 to 10-11 on 8), on some below what 60 s solves
had found before.

Higher tiers' pods that stay where they run keep staying; their other pods may change nodes
but never leave the cluster, so every value fixed for the higher tiers holds (as in ``lns``).
Overloaded nodes, and pods on nodes where their class may only stay, are left alone. Every
result passes ``classes.feasible``. Pure: the clock is a parameter. Hand-written because no
library solves this max-cardinality vector packing with a warm start and move costs.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from scheduler_ext.repack.classes import Assignment, Problem, feasible, loads
from scheduler_ext.repack.heuristics import tier_value

# tabu tenure: a class that left a node may not return there for this many steps (plus a random
# part up to the same again, so that cycles of the same length do not repeat)
TENURE = 7
# disruption's weight, in mean requests of overload (a tie-break only)
MU = 0.01
# a breakout adds this to the weight of each overloaded node resource
BUMP = 1.0
# the search ends after this many steps without a better state that fits (measured on the grid's
# tight cells, 8-32 nodes: every gain came within 150 steps of the one before)
STALL_STEPS = 150
# ``undo_moves``: disruption's weight (scaled), most pods sent back per round, and the steps a
# repair may take. Measured for one second from the packings of 1 s solves, mean moves of five
# seeds: on 16 nodes (27 moves before) 20.4 with these, 22.4 and 23.8 with weights 0.03 and
# 0.08, 21.8 and 20.4 with 5 and 8 pods; on 32 nodes (62 before) 54.2, 57.0, 61.4, 56.0 and 57.0;
# weights of 0.2 and more kept the 27; repairs of 50 steps left more moves than 100
UNDO_MU = 0.05
KICKS = 3
REPAIR_STEPS = 100


def search(
    problem: Problem,
    x: Assignment,
    tier: int,
    until: float,
    clock: Callable[[], float],
    seed: int = 0,
    target: int | None = None,
) -> Assignment:
    """An assignment placing more pods of the tier and above than ``x`` (or ``x``), found until
    ``clock()`` passes ``until``, the placed count reaches ``target`` or the search stalls."""
    active = problem.active(tier)
    if not feasible(problem, x, active):
        return x
    state = _State(problem, x, tier, random.Random(seed))
    best = x
    value = tier_value(problem, best, tier)
    if target is not None and value[0] >= target:
        return x
    step = last = 0
    while step - last < STALL_STEPS:
        step += 1
        # the clock every step: a step takes 0.3-30 ms (8 to 128 nodes), a clock read far less
        if clock() >= until:
            break
        if state.fits():
            found = state.assignment(x)
            got = tier_value(problem, found, tier)
            if got > value and feasible(problem, found, active):
                best, value, last = found, got, step
            if (target is not None and value[0] >= target) or not state.insert():
                break  # the target is met, or every pod of the tier is placed
        if not state.step():
            break  # nothing can move
    return best


def undo_moves(
    problem: Problem,
    x: Assignment,
    tier: int,
    until: float,
    clock: Callable[[], float],
    seed: int = 0,
    target: int | None = None,
) -> Assignment:
    """``x`` with fewer moves at the same placed count (a disrupt phase's packing), found until
    ``clock()`` passes ``until`` or the disruption is down to ``target`` (a bound: nothing
    less exists), by an iterated local search: each round sends 1 to KICKS
    moved pods of the best assignment so far back to the nodes they run on (a pod of the same
    class leaves a node that holds more of it than it runs there, so the count stays), which
    overloads those nodes, and the weighted search repairs the overload with disruption
    weighing UNDO_MU (scaled with the weights), for at most REPAIR_STEPS steps. A repair that
    fits and is no worse becomes the best (an equal one too: the search walks across plateaus)."""
    active = problem.active(tier)
    if not feasible(problem, x, active):
        return x
    rng = random.Random(seed)
    best, value = x, tier_value(problem, x, tier)
    while clock() < until and (target is None or -value[1] > target):
        kicked = _kick(problem, best, active, rng, rng.randint(1, KICKS))
        if kicked is None:
            break  # nothing moved: nothing to undo
        state = _State(problem, kicked, tier, rng, UNDO_MU, scaled=True)
        for _ in range(REPAIR_STEPS):
            if state.fits() or clock() >= until or not state.step():
                break
        if not state.fits():
            continue
        found = state.assignment(kicked)
        got = tier_value(problem, found, tier)
        if got >= value and feasible(problem, found, active):
            best, value = found, got
    return best


def _kick(
    problem: Problem, x: Assignment, active: list[int], rng: random.Random, count: int
) -> Assignment | None:
    """``x`` with up to ``count`` of its moved pods (of the classes ``active``, drawn at random)
    back on their node, or None when none can come back. Each takes a slot of its class from a
    node holding more pods of the class than run there (chosen at random), so the placed counts
    do not change; a pod drawn whose class has no such slot was evicted (bringing it back would
    add a pod) and stays away, so the kick is smaller. (Drawing only pods that can come back did
    no better: at 10 s on 12 grid instances of 16-32 nodes, 422 and 426 moves in all in two
    runs, against 396-414 in four runs of this.)"""
    classes = problem.classes
    moved = [
        (c, n) for c in active for n in classes[c].running_nodes if x[c][n] < classes[c].current[n]
    ]
    if not any(k > cur for c, _ in moved for k, cur in zip(x[c], classes[c].current, strict=True)):
        return None
    out = [list(row) for row in x]
    for c, n in rng.sample(moved, min(count, len(moved))):
        current = classes[c].current
        extra = [m for m, k in enumerate(out[c]) if k > current[m]]
        if extra:
            out[c][rng.choice(extra)] -= 1
            out[c][n] += 1
    return out


class _State:
    """The search's state: counts per (class, node) of the classes in play, the nodes' loads and
    the breakout weights."""

    def __init__(
        self,
        problem: Problem,
        x: Assignment,
        tier: int,
        rng: random.Random,
        mu: float = MU,
        scaled: bool = False,
    ) -> None:
        self.rng = rng
        self.mu, self.scaled = mu, scaled
        self.nodes = [n for n in range(len(problem.node_names)) if not problem.overloaded[n]]
        self.classes = problem.active(tier)
        cls = [problem.classes[c] for c in self.classes]
        n_res = len(problem.resources)
        self.demand = np.array([k.requests for k in cls], dtype=np.int64).reshape(-1, n_res)
        self.capacity = np.array([problem.capacity[n] for n in self.nodes], dtype=np.int64).reshape(
            -1, n_res
        )
        counts = np.array([[x[c][n] for n in self.nodes] for c in self.classes], dtype=np.int64)
        self.current = np.array(
            [[k.current[n] for n in self.nodes] for k in cls], dtype=np.int64
        ).reshape(counts.shape)
        self.eligible = np.array(
            [[n in k.eligible for n in self.nodes] for k in cls], dtype=bool
        ).reshape(counts.shape)
        self.own = np.array([k.priority == tier for k in cls], dtype=bool)
        # pods on the nodes left alone count as placed; these are the rest
        elsewhere = np.array([sum(x[c]) for c in self.classes], dtype=np.int64) - counts.sum(axis=1)
        self.running = np.array([k.n_running for k in cls], dtype=np.int64) - elsewhere
        self.total = np.array([k.total for k in cls], dtype=np.int64) - elsewhere
        # pods that never move: a higher tier's pods staying where they run, and pods on nodes
        # where their class is not eligible (they may only stay)
        pinned = np.where(self.own[:, None], 0, np.minimum(counts, self.current))
        pinned = np.where(self.eligible, pinned, counts)
        self.pinned = pinned
        # a class with a disruption budget may not lose running pods to eviction here (the
        # budget is checked at the end; trading such pods out would mostly be wasted)
        self.may_leave = self.own & np.array([not k.pdbs for k in cls], dtype=bool)
        self.counts = counts
        # load of everything on the nodes that is not a class in play (lower tiers are not)
        in_play = set(self.classes)
        others = [[0] * len(row) if c in in_play else row for c, row in enumerate(x)]
        fixed = np.array(loads(problem, others), dtype=np.int64).reshape(-1, n_res)
        self.capacity = self.capacity - fixed[self.nodes]
        self.load = counts.T @ self.demand
        # overload in typical requests: each resource's excess over its mean request
        typical = np.maximum(1.0, self.demand.mean(axis=0)) if len(cls) else np.ones(n_res)
        self.scale = 1.0 / typical
        self.weight = np.ones(self.capacity.shape)
        self.tabu = np.zeros(counts.shape, dtype=np.int64)
        self.steps = 0

    # -- reading the state --------------------------------------------------------------------

    def fits(self) -> bool:
        return bool((self.load <= self.capacity).all())

    def assignment(self, x: Assignment) -> Assignment:
        out = np.array(x, dtype=np.int64).reshape(len(x), -1)
        out[np.ix_(self.classes, self.nodes)] = self.counts
        rows: Assignment = out.tolist()
        return rows

    def _mu(self) -> float:
        return self.mu * (float(self.weight.mean()) if self.scaled else 1.0)

    def _penalty(self, load: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Weighted overload of ``nodes`` at ``load`` (same leading shape)."""
        excess = np.maximum(0, load - self.capacity[nodes]) * self.scale
        return (excess * self.weight[nodes]).sum(axis=-1)

    def _gain_stay(self) -> np.ndarray:
        """Disruption change of adding one pod of class i to node j (-1: it stays home)."""
        return -(self.counts < self.current).astype(np.float64)

    def _lose_stay(self) -> np.ndarray:
        """Disruption change of taking one pod of class i off node j (+1: a stay is lost)."""
        return ((self.counts <= self.current) & (self.current > 0)).astype(np.float64)

    # -- changing it --------------------------------------------------------------------------

    def _move(self, i: int, src: int | None, dst: int | None) -> None:
        """One pod of class i from node src (None: unplaced) to node dst (None: unplaced)."""
        if src is not None:
            self.counts[i, src] -= 1
            self.load[src] -= self.demand[i]
            self.tabu[i, src] = self.steps + TENURE + self.rng.randrange(TENURE + 1)
        if dst is not None:
            self.counts[i, dst] += 1
            self.load[dst] += self.demand[i]

    def insert(self) -> bool:
        """Places one more unplaced pod of the tier where it adds least cost; False when none
        is left."""
        unplaced = np.flatnonzero(self.own & (self.counts.sum(axis=1) < self.total))
        if not unplaced.size:
            return False
        nodes = np.arange(len(self.nodes))
        pen = self._penalty(self.load, nodes)
        after = self._penalty(
            self.load[None, :, :] + self.demand[unplaced][:, None, :], nodes[None, :]
        )
        cost = after - pen[None, :] + self._mu() * self._gain_stay()[unplaced]
        cost = np.where(self.eligible[unplaced], cost, np.inf)
        if not np.isfinite(cost).any():
            return False
        k, b = np.unravel_index(int(np.argmin(cost)), cost.shape)
        self._move(int(unplaced[k]), None, int(b))
        return True

    def step(self) -> bool:
        """Takes the cheapest move that is not tabu; when none lowers the cost, the overloaded
        resources' weights grow instead. False when no pod can move."""
        self.steps += 1
        moves = self._moves()
        if moves is None:
            return False
        best: tuple[float, tuple[str, int, int]] | None = None
        for kind, pen, dis, allowed in moves.options:
            cost = np.where(allowed, pen + self._mu() * dis, np.inf)
            a, b = np.unravel_index(int(np.argmin(cost)), cost.shape)
            if np.isfinite(cost[a, b]) and (best is None or cost[a, b] < best[0]):
                best = (float(cost[a, b]), (kind, int(a), int(b)))
        if best is None or best[0] >= -1e-9:
            # every move is tabu or none helps: a breakout
            self.weight[self.load > self.capacity] += BUMP
            return True
        self._apply(moves, best[1])
        return True

    def _apply(self, moves: _Moves, move: tuple[str, int, int]) -> None:
        kind, a, b = move
        i, j = int(moves.si[a]), int(moves.sj[a])
        if kind == "shift":
            self._move(i, j, b)
        elif kind == "swap":
            k, m = int(moves.ti[b]), int(moves.tj[b])
            self._move(i, j, m)
            self._move(k, m, j)
        else:
            self._move(i, j, None)
            self._move(int(moves.unplaced[b]), None, j)

    def _moves(self) -> _Moves | None:
        """Every move of a pod on one overloaded node: (kind, overload cost change, disruption
        change, allowed) arrays, indexed by source and by destination, other pod or unplaced
        class. None when no such pod may move."""
        hot = np.asarray((self.load > self.capacity).any(axis=1))
        pairs = np.argwhere(self.counts - self.pinned > 0)
        if not pairs.size:
            return None
        hot_nodes = np.flatnonzero(hot)
        if not hot_nodes.size:
            return None
        # the pods of one overloaded node (all of them: 5-10x slower steps on 32 nodes, where
        # the breakout spreads overload over a dozen nodes, and no more pods placed)
        node = int(hot_nodes[self.rng.randrange(hot_nodes.size)])
        sources = pairs[pairs[:, 1] == node]
        if not sources.size:
            return None
        nodes = np.arange(len(self.nodes))
        pen = self._penalty(self.load, nodes)
        gain, lose = self._gain_stay(), self._lose_stay()
        si, sj = sources[:, 0], sources[:, 1]
        ti, tj = pairs[:, 0], pairs[:, 1]
        d_src, d_tgt = self.demand[si], self.demand[ti]
        tabu = self.tabu > self.steps
        options: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []

        # shifts: (source, destination node)
        left = self._penalty(self.load[sj] - d_src, sj) - pen[sj]
        arrive = self._penalty(self.load[None, :, :] + d_src[:, None, :], nodes[None, :])
        options.append(
            (
                "shift",
                left[:, None] + arrive - pen[None, :],
                lose[si, sj][:, None] + gain[si],
                self.eligible[si] & ~tabu[si] & (nodes[None, :] != sj[:, None]),
            )
        )

        # swaps: (source, another movable pod of another class on another node)
        at_src = self.load[sj][:, None, :] - d_src[:, None, :] + d_tgt[None, :, :]
        at_tgt = self.load[tj][None, :, :] - d_tgt[None, :, :] + d_src[:, None, :]
        options.append(
            (
                "swap",
                self._penalty(at_src, sj[:, None])
                - pen[sj][:, None]
                + self._penalty(at_tgt, tj[None, :])
                - pen[tj][None, :],
                lose[si, sj][:, None]
                + gain[si[:, None], tj[None, :]]
                + lose[ti, tj][None, :]
                + gain[ti[None, :], sj[:, None]],
                (si[:, None] != ti[None, :])
                & (sj[:, None] != tj[None, :])
                & self.eligible[si[:, None], tj[None, :]]
                & self.eligible[ti[None, :], sj[:, None]]
                & ~tabu[si[:, None], tj[None, :]]
                & ~tabu[ti[None, :], sj[:, None]],
            )
        )

        # trades: a source pod of the tier leaves, an unplaced pod of the tier takes its place
        unplaced = np.flatnonzero(self.own & (self.counts.sum(axis=1) < self.total))
        leaving = self.may_leave[si]
        if unplaced.size and leaving.any():
            placed = self.counts.sum(axis=1)
            evict_out = (placed <= self.running).astype(np.float64)  # one more eviction
            evict_in = -(placed < self.running).astype(np.float64)  # one fewer
            at_src = self.load[sj][:, None, :] - d_src[:, None, :] + self.demand[unplaced][None]
            options.append(
                (
                    "trade",
                    self._penalty(at_src, sj[:, None]) - pen[sj][:, None],
                    (lose[si, sj] + evict_out[si])[:, None]
                    + gain[unplaced[None, :], sj[:, None]]
                    + evict_in[unplaced][None, :],
                    leaving[:, None]
                    & (si[:, None] != unplaced[None, :])
                    & self.eligible[unplaced[None, :], sj[:, None]]
                    & ~tabu[unplaced[None, :], sj[:, None]],
                )
            )
        return _Moves(si, sj, ti, tj, unplaced, [o for o in options if o[1].size])


class _Moves:
    """The candidate moves of one step and how to read their indices."""

    def __init__(
        self,
        si: np.ndarray,
        sj: np.ndarray,
        ti: np.ndarray,
        tj: np.ndarray,
        unplaced: np.ndarray,
        options: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]],
    ) -> None:
        self.si, self.sj, self.ti, self.tj, self.unplaced = si, sj, ti, tj, unplaced
        self.options = options
