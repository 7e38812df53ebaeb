"""Weighted swap search on a tier's pods: the primal heuristic of tight packings (place phases)
and of undoing moves (disrupt phases).

A tier's place phase on eight pods per node is a tight vector packing: the last pods fit only
after many pods trade nodes, which neither CP-SAT's search on the whole model nor the
neighbourhood refills of ``lns`` (a CP-SAT call each) find within seconds. This search makes
single moves instead, each step weighing every candidate; the steps run compiled
(``swap_kernel``), 20 000-40 000 a second on 16-32 nodes with eight pods each (as numpy calls,
1 400-1 700):

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
overloads least, so the search then works on fitting one pod more. After STALL_STEPS steps
without a gain it starts again from its best state with fresh weights, up to RESTARTS times;
it ends there, at the target or at the deadline. On the benchmark grid's tight cells it places
2-9 pods more than the greedy start within 5-80 ms (``docs/repack-tuning.md``).

A disrupt phase's packing is improved by the same moves (``undo_moves``), as an iterated local
search: a kick sends one to three moved pods back to the nodes they run on, the weighted search
repairs the overload it causes with disruption weighing more, and a repair that fits with no
more moves is kept; 1 000-10 000 rounds a second. Where no search runs beside it, it runs one
chain a core (threads: the compiled rounds release the GIL), the others from other packings when
given; a chain whose run is stuck starts a new run, from a fresh packing when given; the best
run wins.

Higher tiers' pods that stay where they run keep staying; their other pods may change nodes
but never leave the cluster, so every value fixed for the higher tiers holds (as in ``lns``).
Overloaded nodes, and pods on nodes where their class may only stay, are left alone. Every
result passes ``classes.feasible``. Pure: the clock is a parameter. Hand-written because no
library solves this max-cardinality vector packing with a warm start and move costs. See
``docs/architecture.md#repack-phases``. Neighbours: ``swap_state``, ``swap_kernel``,
``driver.improve`` (which calls it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from repack.problem.classes import Assignment, Problem, feasible, tier_value
from repack.search import swap_kernel as kernel
from repack.search.swap_state import SwapState

# disruption's weight, in mean requests of overload: a tie-break only, set small by hand
MU = 0.01
# a try ends after this many steps without a better state that fits, and starts again from its
# best state up to RESTARTS times; measured from 32-node greedy starts (150, 1 000, 2 000 steps)
STALL_STEPS = 1000
RESTARTS = 4
# ``undo_moves``: disruption's weight (scaled); measured with KICKS and REPAIR_STEPS
# (``swap_state``) from 1 s solves' packings: 20.4 moves left on 16 nodes, 22.4-23.8 otherwise
UNDO_MU = 0.05
# the clock is read between calls of the compiled loops: this many steps of the search, this
# many rounds of the undoing of moves (each well under a millisecond on 32 nodes)
CHUNK_STEPS = 32
CHUNK_ROUNDS = 2
# a run of the undoing of moves that has gained nothing for this many rounds, and for
# RESTART_FACTOR times the rounds to its last gain, is stuck (measured in 1 s solves on 8-16 nodes)
RESTART_ROUNDS = 500
RESTART_FACTOR = 2


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
    best = x
    value = tier_value(problem, best, tier)
    if target is not None and value[0] >= target:
        return x
    # after a stall the search starts again from the best state, with fresh weights and its
    # own random draws, up to RESTARTS times
    for restart in range(RESTARTS + 1):
        state = SwapState(problem, best, tier, seed + restart, MU, scaled=False)
        steps = last = 0
        while steps - last < STALL_STEPS and clock() < until:
            if state.fits():
                found = state.assignment(x)
                got = tier_value(problem, found, tier)
                if got > value and feasible(problem, found, active):
                    best, value, last = found, got, steps
                if (target is not None and value[0] >= target) or not state.insert():
                    return best  # the target is met, or every pod of the tier is placed
                continue  # the pod inserted may fit at once
            outcome, taken = state.advance(min(CHUNK_STEPS, STALL_STEPS - (steps - last)))
            steps += taken
            if outcome == kernel.STUCK:
                return best  # nothing can move
        if clock() >= until:
            break
    return best


def undo_moves(
    problem: Problem,
    x: Assignment,
    tier: int,
    until: float,
    clock: Callable[[], float],
    seed: int = 0,
    target: int | None = None,
    chains: int = 1,
    others: Sequence[Assignment] = (),
    fresh: Callable[[int], Assignment | None] | None = None,
) -> Assignment:
    """``x`` with fewer moves at the same placed count (a disrupt phase's packing), found until
    ``clock()`` passes ``until`` or the disruption is down to ``target`` (a bound: nothing
    less exists), by an iterated local search: each round sends 1 to KICKS
    moved pods of the best assignment so far back to the nodes they run on (a pod of the same
    class leaves a node that holds more of it than it runs there, so the count stays), which
    overloads those nodes, and the weighted search repairs the overload with disruption
    weighing UNDO_MU (scaled with the weights), for at most REPAIR_STEPS steps. A repair that
    fits and is no worse becomes the best (an equal one too: the search walks across plateaus).
    ``others``: packings for the chains after the first to start from, in order, where they
    place as many pods as ``x`` and agree with it outside the classes and nodes in play (a
    chain whose start moves fewer pods, or leads elsewhere, finds other outcomes). A chain that
    stalls
    (RESTART_ROUNDS) starts a new run with other draws, from ``fresh(seed)`` when that gives
    such a packing, else from its own start; the best run wins."""
    active = problem.active(tier)
    if not feasible(problem, x, active):
        return x
    value = tier_value(problem, x, tier)

    def state_of(y: Assignment, draws: int) -> SwapState:
        return SwapState(problem, y, tier, draws, UNDO_MU, scaled=True)

    first = state_of(x, seed)
    states = [first] + [first.chain(seed + k) for k in range(1, chains)]
    # (the pods outside the classes and nodes in play must be where ``x`` has them)
    in_play, on = set(first.classes), set(first.nodes)
    outside = [
        (c, n)
        for c in range(len(x) if others or fresh else 0)
        for n in range(len(x[c]))
        if c not in in_play or n not in on
    ]

    def admits(y: Assignment) -> bool:
        return (
            tier_value(problem, y, tier)[0] == value[0]
            and all(y[c][n] == x[c][n] for c, n in outside)
            and feasible(problem, y, active)
        )

    # chains after the first start from ``others`` (the same pods placed), while they last
    bases = [x] * chains
    for k, y in enumerate(others[: chains - 1], start=1):
        if admits(y):
            states[k] = state_of(y, seed + k)
            bases[k] = y
    # each chain's start, for its restarts
    pairs = enumerate(zip(states, bases, strict=True))
    starts = [(state.chain(seed + k), base) for k, (state, base) in pairs]
    # each chain's current run: its best counts and their cost
    bests: list[np.ndarray] = [np.empty(0)] * chains
    costs = [0] * chains

    def begin(k: int, state: SwapState, base: Assignment) -> None:
        """Chain k's new run from ``state`` (made from ``base``)."""
        states[k], bases[k] = state, base
        bests[k] = state.counts.copy()
        costs[k] = int(kernel.cost(state.current, state.running, bests[k]))

    for k in range(chains):
        begin(k, states[k], bases[k])
    # each chain's best run: (cost, counts, base); costs[k] is its current run's
    kept = [(cost, best.copy(), base) for cost, best, base in zip(costs, bests, bases, strict=True)]
    # the disruption outside the nodes in play does not change: the target less that part
    aim = -1 if target is None else target - (-value[1] - costs[0])

    def restart(k: int, draws: int) -> None:
        y = None if fresh is None else fresh(draws)
        if y is not None and admits(y):
            begin(k, state_of(y, draws), y)
        else:
            begin(k, starts[k][0].chain(draws), starts[k][1])

    def walk(k: int) -> None:
        rounds = gained = runs = 0
        while min(cost for cost, _, _ in kept) > aim and clock() < until:
            done, cost = states[k].undo_rounds(bests[k], costs[k], aim, CHUNK_ROUNDS)
            if done < 0:
                break  # nothing moved: nothing to undo
            rounds += done
            if cost < costs[k]:
                gained = rounds
            costs[k] = cost
            if cost < kept[k][0]:
                kept[k] = (cost, bests[k].copy(), bases[k])
            if rounds - gained > max(RESTART_ROUNDS, RESTART_FACTOR * gained):
                # a local minimum the kicks do not leave: a new run, other draws
                runs += 1
                restart(k, seed + k + chains * runs)
                rounds = gained = 0

    # the chains' compiled rounds release the GIL: on free cores they run side by side; a
    # helper's failure (``fresh`` is the caller's code) is raised here, not lost with its thread
    failed: list[BaseException] = []

    def helper(k: int) -> None:
        try:
            walk(k)
        except BaseException as exc:  # re-raised below, in the caller's thread
            failed.append(exc)

    helpers = [threading.Thread(target=helper, args=(k,), daemon=True) for k in range(1, chains)]
    for thread in helpers:
        thread.start()
    walk(0)
    for thread in helpers:
        thread.join()
    if failed:
        raise failed[0]
    _, counts, base = min(kept, key=lambda run: run[0])
    first.counts[:] = counts
    found = first.assignment(base)
    if (
        found != x
        and tier_value(problem, found, tier) >= value
        and feasible(problem, found, active)
    ):
        return found
    return x
