"""Large-neighbourhood search on a tier's pods: a primal heuristic for both phases.

On identical nodes the place phase is a max-cardinality vector bin packing, where CP-SAT's
search on the whole model rarely improves a greedy start within seconds (its bound is weak and
the nodes are interchangeable). Here a few nodes at a time are emptied of the tier's pods and
refilled, together with the tier's unplaced pods, by a tiny CP-SAT model (``refill``: one
worker, a short wall limit). Place mode: most placed pods, ties broken by small random weights,
and the walk takes any refill that places no fewer pods, so it drifts across plateaus; the best
assignment seen (placed, then less disruption) is returned. Disrupt mode (``keep_placed``):
each refill keeps its placed count and maximises pods staying where they run, minus evictions;
most neighbourhoods hold a node a pod left and a node where its class arrived. Every assignment kept
passes ``classes.feasible`` (capacities, eligibility, PDB budgets).

Higher tiers: their pods that stay where they run keep staying, and their placed counts per
class do not change; only their moved or newly placed pods may trade places inside a
neighbourhood. So every value fixed for the higher tiers holds. The node sets come from a
seeded generator; the sub-solves' wall limit makes results depend on machine load. Pure: the
clock is a parameter. See ``docs/architecture.md#repack-phases``. Neighbours: ``refill``,
``heuristics`` (the starts), ``driver.improve`` (which calls this).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from repack.cpsat.refill import refill
from repack.problem.classes import (
    Assignment,
    Problem,
    feasible,
    tier_value,
)

# nodes freed per neighbourhood (measured on 16-32 nodes: 2 improved less often, 4 mostly got no
# answer within SUB_LIMIT on a loaded machine)
NEIGHBOURHOOD = 3
# share of the disrupt phase's neighbourhoods built around a move (the rest are random); set
# by hand
LINKED_SHARE = 0.7
# chance that a linked neighbourhood's next node follows the chain of moves, else it is random
# (measured in 1 s disrupt phases, six seeds: 9.8 moves against 11.3 with random third nodes)
CHAIN_SHARE = 0.5
# wall seconds for one refill; its best answer by then is used (it need not be proven); set by
# hand
SUB_LIMIT = 0.05


def improve(
    problem: Problem,
    x: Assignment,
    tier: int,
    until: float,
    clock: Callable[[], float],
    seed: int = 0,
    target: int | None = None,
    keep_placed: bool = False,
) -> Assignment:
    """Better (or equal) assignment than ``x`` for ``tier`` by large-neighbourhood search,
    until ``clock()`` passes ``until`` or the objective reaches ``target`` (placed pods; with
    ``keep_placed``, disruption). With ``keep_placed`` every neighbourhood keeps at least its
    placed count and minimises disruption (the disrupt phase)."""
    active = problem.active(tier)
    own = [c for c, cls in enumerate(problem.classes) if cls.priority == tier]
    settled = [c for c in active if c not in own]
    nodes = [n for n in range(len(problem.node_names)) if not problem.overloaded[n]]
    if not own or len(nodes) < 2 or not feasible(problem, x, active):
        return x
    rng = random.Random(seed)
    best = walk = [list(row) for row in x]
    value = tier_value(problem, best, tier)
    placed = value[0]
    while clock() < until:
        if target is not None and (-value[1] <= target if keep_placed else value[0] >= target):
            break
        chosen = neighbourhood(problem, walk, own, nodes, rng, keep_placed)
        found = refill(
            problem, walk, own, settled, chosen, min(SUB_LIMIT, until - clock()), keep_placed, rng
        )
        if found is None:
            continue
        got = tier_value(problem, found, tier)
        # placing: the walk takes any refill that places no fewer pods (drifting across the
        # plateau finds room); the best seen is what is returned
        if (got >= value or (not keep_placed and got[0] >= placed)) and feasible(
            problem, found, active
        ):
            walk, placed = found, got[0]
            if got > value:
                best, value = found, got
    return best


def neighbourhood(
    problem: Problem,
    x: Assignment,
    own: Sequence[int],
    nodes: Sequence[int],
    rng: random.Random,
    linked: bool,
) -> list[int]:
    """NEIGHBOURHOOD random nodes; with ``linked``, usually a node a pod of the tier left and a
    node where a pod of its class arrived (undoing a move needs both in one neighbourhood), and
    often next the node that a pod now on the first one left (undoing a cycle of moves needs
    all of its nodes)."""
    size = min(NEIGHBOURHOOD, len(nodes))
    chosen: list[int] = []
    if linked and rng.random() < LINKED_SHARE:
        left = [(c, n) for c in own for n in nodes if x[c][n] < problem.classes[c].current[n]]
        if left:
            c, n = rng.choice(left)
            chosen.append(n)
            arrived = [k for k in nodes if x[c][k] > problem.classes[c].current[k]]
            if arrived:
                chosen.append(rng.choice(arrived))
            # then along the chain of moves: a node that a pod now on the first one left
            # (putting the pod back needs the room that pod took)
            while len(chosen) < size and rng.random() < CHAIN_SHARE:
                came = [
                    k
                    for d in own
                    if x[d][n] > problem.classes[d].current[n]
                    for k in nodes
                    if x[d][k] < problem.classes[d].current[k] and k not in chosen
                ]
                if not came:
                    break
                n = rng.choice(came)
                chosen.append(n)
    rest = [n for n in nodes if n not in chosen]
    return chosen + rng.sample(rest, size - len(chosen))
