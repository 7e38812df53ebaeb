"""Relabelling interchangeable nodes: the same placement with the fewest pods moved.

Two nodes are *interchangeable* when every pod class sees them alike: the same capacity left by
their immovable pods (``Problem.capacity``; PDB-blocked pods are immovable there too), neither
overloaded, the same eligibility for every class, and no pod running where its class may not be
placed (such a pod may only stay, so its node is not like any other). The contents of the nodes
of one group can then be permuted without changing any placed count, any capacity row or any
PDB budget (evictions depend only on the counts per class). Moves do depend on the labelling:
putting content i on node j keeps min(x[c][i], current[c][j]) pods of class c where they run.
The labelling that keeps the most pods is a linear assignment problem per group, solved exactly
by OR-Tools' ``SimpleLinearSumAssignment``.

With several tiers the fixed disruption of the higher tiers must hold, so two weightings are
tried: the tier's own stays (lower tiers break ties), and the stays at priority >= q for every q,
highest q first (lexicographic). A result is kept only when it disrupts no more at the tier and
at no tier above than ``x`` does. Pure. Neighbours: ``classes`` (assignments), the phase driver
(which applies it to every solution it is about to compare), ``heuristics`` (the starts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ortools.graph.python import linear_sum_assignment

from repack.problem.classes import Assignment, Problem, node_groups_by_key

# weights past this make the lexicographic costs risk int64 overflow: that weighting is skipped
MAX_WEIGHT = 1 << 40


def node_groups(problem: Problem) -> list[list[int]]:
    """The groups (two nodes or more, in index order) of interchangeable nodes."""
    # a pod that may only stay where it is pins its node, like an overloaded node
    groups, _ = node_groups_by_key(problem, range(len(problem.classes)))
    return [members for members in groups.values() if len(members) > 1]


def _weightings(problem: Problem, tier: int) -> list[list[int]]:
    """Per class, the weight of one pod staying: the tier's own stays first (lower classes
    break ties), then the lexicographic order of the stays at priority >= q, highest q first."""
    classes = problem.classes
    below = sum(c.n_running for c in classes if c.priority < tier)
    own = [below + 1 if c.priority >= tier else 1 for c in classes]
    out = [own]
    tiers = [q for q in problem.tiers if q >= tier]
    if len(tiers) > 1:
        running = sum(c.n_running for c in classes if c.priority >= tier)
        # w[j] outweighs every stay counted at the tiers below tiers[j]
        w: list[int] = []
        for _ in tiers:
            w.insert(0, 1 + running * sum(w))
        # a pod at priority q counts in the stays at every tiers[j] <= q
        per_tier = {q: sum(w[j:]) for j, q in enumerate(tiers)}
        weights = [per_tier[c.priority] * (below + 1) if c.priority >= tier else 1 for c in classes]
        if max(weights) * max(1, running + below) < MAX_WEIGHT:
            out.append(weights)
    return out


def _permute(
    counts: np.ndarray, current: np.ndarray, groups: Sequence[Sequence[int]], weight: Sequence[int]
) -> Assignment:
    """``counts`` (pods per class and node) with each group's node contents assigned to its
    nodes so that the weighted number of pods staying where they run (``current``) is largest."""
    out = counts.copy()
    weights = np.asarray(weight, dtype=np.int64)
    for members in groups:
        nodes = np.asarray(members)
        held, running = counts[:, nodes], current[:, nodes]
        if not running.any():
            continue  # nothing runs on the group's nodes: every labelling moves the same
        # gain[a, b]: weighted pods staying if node a's content goes to node b; only the few
        # classes running on b count there (numpy: 128-node groups in milliseconds, where a
        # loop over every class and pair of nodes took a tenth of a second)
        gain = np.zeros((len(members), len(members)), dtype=np.int64)
        for b in range(len(members)):
            here = np.flatnonzero(running[:, b])
            gain[:, b] = weights[here] @ np.minimum(held[here], running[here, b][:, None])
        lap = linear_sum_assignment.SimpleLinearSumAssignment()
        tails, heads = np.divmod(np.arange(gain.size), len(members))
        lap.add_arcs_with_cost(tails, heads, -gain.ravel())
        if lap.solve() != lap.OPTIMAL:
            continue
        mates = np.array([lap.right_mate(a) for a in range(len(members))])
        out[:, nodes[mates]] = held
    rows: Assignment = out.tolist()
    return rows


def _stays(problem: Problem, x: Assignment, tiers: Sequence[int]) -> tuple[int, ...]:
    """Pods staying where they run, at priority >= q for each q of ``tiers`` (the disruption at
    q is a constant minus this: evictions do not depend on the labelling)."""
    per_class = [
        (cls.priority, sum(min(x[c][n], k) for n, k in enumerate(cls.current) if k))
        for c, cls in enumerate(problem.classes)
    ]
    return tuple(sum(s for p, s in per_class if p >= q) for q in tiers)


def relabel(
    problem: Problem,
    x: Assignment,
    tier: int,
    groups: Sequence[Sequence[int]] | None = None,
) -> Assignment:
    """``x`` with the contents of interchangeable nodes permuted to move the fewest pods at
    ``tier`` (priority >= ``tier``) without more disruption at any tier above; ``x`` itself when
    no labelling is better. Placed counts, capacities, eligibility and PDB budgets are those of
    ``x``. ``groups``: ``node_groups(problem)``, when the caller has it already."""
    groups = node_groups(problem) if groups is None else groups
    if not groups:
        return x
    tiers = [q for q in problem.tiers if q >= tier]  # highest first; the tier itself last
    if not tiers:
        return x
    start = _stays(problem, x, tiers)
    lowest = problem.tiers[-1:]
    best, best_key = x, (start[-1], start, _stays(problem, x, lowest))
    # the counts and the current placement as matrices, once for every weighting
    counts = np.asarray(x, dtype=np.int64).reshape(len(x), -1)
    current = np.array([cls.current for cls in problem.classes], dtype=np.int64).reshape(
        counts.shape
    )
    for weight in _weightings(problem, tier):
        y = _permute(counts, current, groups, weight)
        kept = _stays(problem, y, tiers)
        if any(a < b for a, b in zip(kept, start, strict=True)):
            continue  # a tier above would disrupt more than its fixed value allows
        key = (kept[-1], kept, _stays(problem, y, lowest))
        if key > best_key:
            best, best_key = y, key
    return best
