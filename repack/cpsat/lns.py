"""Large-neighbourhood search on a tier's pods: a primal heuristic for both phases.

On identical nodes the place phase is a max-cardinality vector bin packing, where CP-SAT's
search on the whole model rarely improves a greedy start within seconds (its bound is weak and
the nodes are interchangeable). Here a few nodes at a time are emptied of the tier's pods and
refilled, together with the tier's unplaced pods, by a tiny CP-SAT model (one worker, a short
wall limit). Place mode: most placed pods, ties broken by small random weights, and the walk
takes any refill that places no fewer pods, so it drifts across plateaus; the best assignment
seen (placed, then less disruption) is returned. Disrupt mode (``keep_placed``): each refill
keeps its placed count and maximises pods staying where they run, minus evictions; most
neighbourhoods hold a node a pod left and a node where its class arrived. Every assignment kept
passes ``classes.feasible`` (capacities, eligibility, PDB budgets).

Higher tiers: their pods that stay where they run keep staying, and their placed counts per
class do not change; only their moved or newly placed pods may trade places inside a
neighbourhood. So every value fixed for the higher tiers holds. The node sets come from a
seeded generator; the sub-solves' wall limit makes results depend on machine load. Pure: the
clock is a parameter. Neighbours: ``heuristics`` (the starts), ``solver`` (which calls this).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from ortools.sat.python import cp_model

from repack.cpsat.model import Model
from repack.problem.classes import (
    EVICT_COST,
    MOVE_COST,
    Assignment,
    Problem,
    feasible,
    node_load,
    tier_value,
)

# nodes freed per neighbourhood (measured on 16-32 nodes: 2 improved less often, 4 mostly got no
# answer within SUB_LIMIT on a loaded machine)
NEIGHBOURHOOD = 3
# share of the disrupt phase's neighbourhoods built around a move (the rest are random)
LINKED_SHARE = 0.7
# chance that a linked neighbourhood's next node follows the chain of moves, else it is random
# (measured on the 1 s disrupt phases of a 32-node, 8-pods-per-node and a 16-node 4-tier
# instance, six seeds each: disruption 9.8 and 12.7 on average, against 11.3 and 15.0 with
# random third nodes; 0.3 and 0.75 did about as well as 0.5, 1.0 worse)
CHAIN_SHARE = 0.5
# largest random tie-break weight of a refill's counts (place mode)
NOISE = 3
# wall seconds for one refill; its best answer by then is used (it need not be proven)
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
        chosen = _neighbourhood(problem, walk, own, nodes, rng, keep_placed)
        found = _refill(
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


def _neighbourhood(
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


def _refill(
    problem: Problem,
    x: Assignment,
    own: Sequence[int],
    settled: Sequence[int],
    chosen: Sequence[int],
    seconds: float,
    keep_placed: bool,
    rng: random.Random,
) -> Assignment | None:
    """The best refill of the ``chosen`` nodes with the tier's pods, or None."""
    if seconds <= 0.001:
        return None
    # the load of the chosen nodes only (the whole cluster's costs more than the refill)
    load = {n: node_load(problem, x, n) for n in chosen}
    m = Model()
    v: dict[tuple[int, int], cp_model.IntVar] = {}
    stays: list[cp_model.IntVar] = []
    pool = {c: problem.classes[c].total - sum(x[c]) + sum(x[c][n] for n in chosen) for c in own}
    movable = {c: [n for n in chosen if n in problem.classes[c].eligible] for c in settled}
    # pods of a settled class beyond those staying where they run, on the chosen nodes; only
    # classes with some take part (the others' terms below are all zero)
    extra = {
        c: sum(
            x[c][k] - problem.classes[c].current[k]
            for k in movable[c]
            if x[c][k] >= problem.classes[c].current[k]
        )
        for c in settled
    }
    settled = [c for c in settled if extra[c]]
    for n in chosen:
        room = [
            problem.capacity[n][r]
            - load[n][r]
            + sum(problem.classes[c].requests[r] * x[c][n] for c in own)
            for r in range(len(problem.resources))
        ]
        # a settled class's pods that stay on n keep staying (its disruption cannot change);
        # only its pods beyond those (moved or newly placed) may trade places between the nodes
        for c in settled:
            if n in movable[c] and x[c][n] >= problem.classes[c].current[n]:
                room = [
                    a + q * (x[c][n] - problem.classes[c].current[n])
                    for a, q in zip(room, problem.classes[c].requests, strict=True)
                ]
        rows: list[list[cp_model.LinearExprT]] = [[] for _ in room]
        for c in settled:
            if n not in movable[c] or x[c][n] < problem.classes[c].current[n]:
                continue
            most = min(
                [extra[c]]
                + [max(0, room[r]) // q for r, q in enumerate(problem.classes[c].requests) if q]
            )
            v[c, n] = m.new_int_var(0, max(0, most), f"w{c}_{n}")
            m.add_hint(v[c, n], min(x[c][n] - problem.classes[c].current[n], max(0, most)))
            for r, q in enumerate(problem.classes[c].requests):
                if q:
                    rows[r].append(q * v[c, n])
        for c in own:
            cls = problem.classes[c]
            if not pool[c] or n not in cls.eligible:
                continue
            most = min([pool[c]] + [max(0, room[r]) // q for r, q in enumerate(cls.requests) if q])
            if most <= 0:
                continue
            v[c, n] = m.new_int_var(0, most, f"v{c}_{n}")
            m.add_hint(v[c, n], min(x[c][n], most))
            for r, q in enumerate(cls.requests):
                if q:
                    rows[r].append(q * v[c, n])
            if cls.current[n]:
                s = m.new_int_var(0, min(cls.current[n], most), f"s{c}_{n}")
                m.add(s <= v[c, n])
                stays.append(s)
        for r, terms in enumerate(rows):
            if terms:
                m.add(sum(terms) <= room[r])
    for c in settled:
        row = [v[c, n] for n in movable[c] if (c, n) in v]
        if row:
            m.add(
                sum(row)
                == sum(x[c][n] - problem.classes[c].current[n] for n in movable[c] if (c, n) in v)
            )
    if not v:
        return None
    evicted: list[cp_model.IntVar] = []
    for c in own:
        row = [v[c, n] for n in chosen if (c, n) in v]
        if not row:
            continue
        m.add(sum(row) <= pool[c])
        cls = problem.classes[c]
        outside = sum(x[c]) - sum(x[c][n] for n in chosen)
        if cls.n_running > outside:
            e = m.new_int_var(0, cls.n_running - outside, f"e{c}")
            m.add(e >= cls.n_running - outside - sum(row))
            evicted.append(e)
    placed = sum(v[c, n] for c in own for n in chosen if (c, n) in v)
    if keep_placed:
        m.add(placed >= sum(x[c][n] for c in own for n in chosen))
    # placed pods first: one more pod outweighs every stay and eviction of the neighbourhood
    # (a variable's domain is [0, upper]; ortools 9.15's proto wrapper reads domain[-1] as 0,
    # which made these weights 1 and let the noise outweigh a placed pod)
    spread = MOVE_COST * sum(int(s.proto.domain[1]) for s in stays) + (
        EVICT_COST - MOVE_COST
    ) * sum(int(e.proto.domain[1]) for e in evicted)
    weight = 1 + spread
    if keep_placed:
        m.maximize(
            weight * placed + MOVE_COST * sum(stays) - (EVICT_COST - MOVE_COST) * sum(evicted)
        )
    else:
        # placed pods first; random small weights break the ties so that equal refills differ
        # from the incumbent and the walk moves across the plateau
        noise = {key: rng.randint(0, NOISE) for key in v}
        top = 1 + NOISE * sum(int(var.proto.domain[1]) for var in v.values())
        m.maximize(top * placed + sum(noise[key] * var for key, var in v.items()))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = 1
    # the refills are tiny: presolve costs more than it saves (measured: fewer refills without
    # any answer inside SUB_LIMIT on a loaded machine)
    solver.parameters.cp_model_presolve = False
    if solver.solve(m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    out = [list(row) for row in x]
    for c in own:
        for n in chosen:
            out[c][n] = int(solver.value(v[c, n])) if (c, n) in v else 0
    for (c, n), var in v.items():
        if c in settled:
            out[c][n] = problem.classes[c].current[n] + int(solver.value(var))
    return out
