"""The lexicographic tier loop: from a snapshot to a checked Plan.

For each priority tier p, highest first, two phases run on the classes with priority >= p:
*place* maximises the pods placed at priority >= p, then *disrupt* minimises the disruption of
running pods there (a move costs 1, an eviction 2). Each result is fixed for the later phases
(== when proven optimal, >= or <= when only feasible); lower tiers are left out of a tier's
phases because they cannot change its objectives. Every phase starts from an incumbent made by
the starting heuristics (``heuristics.best_start`` completes the previous phase's solution for
the new tier; ``repair`` and ``reduce_moves`` polish a place phase's result for its disrupt
phase), within one time budget shared out across the phases (``budget``); how a phase spends its
share is ``dispatch``'s decision tree. A phase that runs out of time keeps the best of incumbent
and found, so a plan is never worse than the greedy one. The plan is then made and checked
(``planning``). See ``docs/architecture.md#repack-phases``; the tuning of the phases is in
``options.Tuning`` and ``docs/repack-tuning.md``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from repack.cpsat.model import Fix
from repack.driver.budget import plan_reserve
from repack.driver.context import SolveContext, better, restrict
from repack.driver.dispatch import run_phase, start_phase
from repack.driver.options import Clock, SolveOptions, Tuning
from repack.driver.planning import make_plan
from repack.problem.classes import Assignment, build_problem, current_assignment, disruption_at
from repack.problem.plan import PhaseReport, Plan, empty_plan
from repack.problem.snapshot import Snapshot
from repack.search.heuristics import best_start, reduce_moves, repair

__all__ = ["SolveOptions", "Tuning", "solve"]


def solve(
    snapshot: Snapshot, options: SolveOptions | None = None, clock: Clock = time.monotonic
) -> Plan:
    """Compute, sequence and check a repacking plan for ``snapshot``."""
    options = options or SolveOptions()
    start = clock()
    problem = build_problem(snapshot)
    name = options.formulation

    def failed(status: str, optimal: bool, message: str, phases: Sequence[PhaseReport]) -> Plan:
        return empty_plan(snapshot, status, optimal, clock() - start, name, phases, message)

    if not any(c.pending for c in problem.classes):
        return failed("NO_IMPROVEMENT", True, "no pending pods", [])
    if not problem.node_names:
        # pending pods and nowhere to put them (a dump of pods without their nodes, say): the
        # searches below index the nodes' capacities and need at least one
        return failed("NO_IMPROVEMENT", True, "no nodes to place the pending pods on", [])
    # the phases end early enough to leave the plan's own making in the budget, which counts
    # from the call's start (building the problem is part of it)
    deadline = start + options.time_limit - plan_reserve(problem, options)
    ctx = SolveContext(problem, options, clock, deadline)
    x: Assignment = current_assignment(problem)
    fixes: list[Fix] = []
    all_optimal = True
    for p in problem.tiers:
        active = problem.active(p)
        new = [c for c, cls in enumerate(problem.classes) if cls.priority == p]
        until = ctx.budget.heuristics_until()
        start_x, ok = best_start(problem, restrict(problem, x, p + 1), p, until, clock)
        incumbent = start_x if ok else None
        # place: at most every pod at priority >= p, or what was fixed above plus this tier
        bound = sum(problem.classes[c].total for c in active)
        placed_fixes = [f for f in fixes if f.kind == "placed"]
        if placed_fixes and placed_fixes[-1].op == "==":
            bound = placed_fixes[-1].value + sum(problem.classes[c].total for c in new)
        place = start_phase(ctx, p, "place", fixes, incumbent, start_x, bound)
        best, value, optimal = run_phase(ctx, place)
        if best is None:
            return failed(_failure(ctx), False, "no placement found in time", ctx.reports)
        fixes.append(Fix("placed", p, "==" if optimal else ">=", value))
        all_optimal &= optimal
        best = ctx.relabelled(best, fixes, p)
        # disrupt: never less than the disruption already fixed for the tiers above; a proven
        # place phase also proved the disruption (its objective breaks ties by disruption)
        dis_fixes = [f for f in fixes if f.kind == "disruption"]
        floor = dis_fixes[-1].value if dis_fixes and dis_fixes[-1].op == "==" else 0
        if optimal and ctx.reports[-1].lexicographic:
            floor = disruption_at(problem, best, p)
        repaired = repair(problem, best, active)
        best = better(problem, p, repaired, best)
        polished = reduce_moves(problem, best, active, ctx.budget.heuristics_until(), clock)
        if ctx.satisfies(polished, fixes, p):
            best = better(problem, p, polished, best)
        best, value, optimal = run_phase(
            ctx, start_phase(ctx, p, "disrupt", fixes, best, best, floor)
        )
        if best is None:
            return failed(_failure(ctx), False, "no placement found in time", ctx.reports)
        fixes.append(Fix("disruption", p, "==" if optimal else "<=", value))
        all_optimal &= optimal
        x = best
    plan = make_plan(snapshot, problem, x, all_optimal, ctx.reports, clock() - start, name)
    return replace(plan, solve_seconds=clock() - start)  # the whole call, the plan's making too


def _failure(ctx: SolveContext) -> str:
    reports = ctx.reports
    return "INFEASIBLE" if reports and reports[-1].status == "INFEASIBLE" else "ERROR"
