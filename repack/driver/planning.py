"""From the phases' final assignment to a checked Plan.

The class counts are mapped to pods (``classes.pods_for``), the claimed outcome is compared with
the model's counts tier by tier, the steps are sequenced so that no node is ever overloaded
(``sequencing``) and the plan is checked by the independent ``checker``; a plan that fails any
of this is replaced by an ERROR result and never returned. See
``docs/architecture.md#plan-checking``. Neighbours: ``solver`` (which calls it once the phases
end).
"""

from __future__ import annotations

from collections.abc import Sequence

from repack.problem import checker
from repack.problem.classes import Assignment, Problem, disruption_at, placed_at, pods_for
from repack.problem.plan import (
    Eviction,
    Move,
    PhaseReport,
    Placement,
    Plan,
    empty_plan,
    outcome,
)
from repack.problem.sequencing import SequencingError, sequence
from repack.problem.snapshot import Snapshot


def make_plan(
    snapshot: Snapshot,
    problem: Problem,
    x: Assignment,
    optimal: bool,
    phases: Sequence[PhaseReport],
    seconds: float,
    formulation: str,
) -> Plan:
    """The checked plan that carries the cluster from its current placement to ``x``."""
    pa = pods_for(problem, x)
    moves = tuple(Move(k, a, b) for k, a, b in pa.moves)
    evictions = tuple(Eviction(k, a) for k, a in pa.evictions)
    placements = tuple(Placement(k, b) for k, b in pa.placements)
    before = outcome(snapshot)
    after = outcome(snapshot, moves, placements, evictions)

    def no_plan(status: str, proven: bool, reason: str) -> Plan:
        return empty_plan(snapshot, status, proven, seconds, formulation, phases, reason)

    if not after.vector > before.vector:
        return no_plan(
            "NO_IMPROVEMENT",
            optimal,
            "the current placement is already optimal" if optimal else "no better placement found",
        )
    # the claimed vector must be what the counts say, tier by tier
    for p in problem.tiers:
        gained = sum(v for q, v in after.placed_by_priority.items() if q >= p) - sum(
            v for q, v in before.placed_by_priority.items() if q >= p
        )
        model_gain = placed_at(problem, x, p) - sum(
            c.n_running for c in problem.classes if c.priority >= p
        )
        cost = sum(v for q, v in after.disruption_by_priority.items() if q >= p)
        if gained != model_gain or cost != disruption_at(problem, x, p):
            return no_plan(
                "ERROR", False, f"internal: pod-level plan disagrees with the model at priority {p}"
            )
    try:
        steps = sequence(snapshot, moves, placements, evictions)
    except SequencingError as exc:
        return no_plan(
            "NO_IMPROVEMENT",
            False,
            f"a better placement exists but cannot be reached safely: {exc}",
        )
    pods = {p.key: p for p in snapshot.pods}
    displaced = [m.pod for m in moves] + [e.pod for e in evictions]
    plan = Plan(
        status="OPTIMAL" if optimal else "FEASIBLE",
        optimal=optimal,
        solve_seconds=seconds,
        formulation=formulation,
        before=before,
        after=after,
        moves=moves,
        placements=placements,
        evictions=evictions,
        steps=steps,
        phases=tuple(phases),
        owners={k: pods[k].owner for k in displaced},
        uids={k: pods[k].uid for k in displaced},
    )
    errors = checker.check(snapshot, plan)
    if errors:
        return no_plan("ERROR", False, "plan rejected by the checker: " + "; ".join(errors[:5]))
    return plan
