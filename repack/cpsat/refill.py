"""One refill of a large-neighbourhood search: the best placement of a tier's pods on a few
chosen nodes, by a tiny CP-SAT model (one worker, a short wall limit, no presolve).

The chosen nodes are emptied of the tier's pods and refilled together with its unplaced pods.
Place mode: most placed pods, ties broken by small random weights (the walk then moves across
plateaus). Disrupt mode (``keep_placed``): at least the placed count, most pods staying where they
run, fewest evictions. Higher tiers' pods that stay where they run keep staying; only their moved
or newly placed pods may trade places between the chosen nodes, so every value fixed for the
higher tiers holds. Pure. See ``docs/architecture.md#repack-phases``. Neighbours: ``lns`` (the
search that calls it), ``model`` (the ``Model`` it builds on).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ortools.sat.python import cp_model

from repack.cpsat.model import Model
from repack.cpsat.run import configured, found
from repack.problem.classes import EVICT_COST, MOVE_COST, Assignment, Problem, node_load

# largest random tie-break weight of a refill's counts (place mode); set with the LNS, not varied
NOISE = 3


def refill(
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
    # the refills are tiny: presolve costs more than it saves (measured: fewer refills without
    # any answer inside ``lns.SUB_LIMIT`` on a loaded machine)
    solver = configured(seconds, 1, cp_model_presolve=False)
    if not found(solver.solve(m)):
        return None
    out = [list(row) for row in x]
    for c in own:
        for n in chosen:
            out[c][n] = int(solver.value(v[c, n])) if (c, n) in v else 0
    for (c, n), var in v.items():
        if c in settled:
            out[c][n] = problem.classes[c].current[n] + int(solver.value(var))
    return out
