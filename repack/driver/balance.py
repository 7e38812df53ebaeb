"""The balancing engine: from a snapshot and a goal to a checked plan of moves.

The greedy start of the goal (``search.goal_greedy``) runs first, then CP-SAT on the goal's model
(``cpsat.goals``) hinted with it, for the rest of the time budget; the better of the two on the
exact measure (``problem.goals.value``), fewer moves breaking ties, is kept, so a plan is never
worse than the greedy one. A gain below the run's minimum (``goal_spec.enough``) proposes
nothing. The moves are sequenced so that no node is ever over capacity (``sequencing``) and the
plan is re-checked by the independent checker (``checker.check_goal``); a plan that fails is an
ERROR result, never returned as a plan. See ``docs/architecture.md#balancing``. Pure: the clock
is a parameter.
"""

from __future__ import annotations

import time
from dataclasses import replace

from repack.cpsat.goals import GoalModel
from repack.driver.options import Clock, SolveOptions
from repack.problem import checker
from repack.problem.goal_spec import GoalSpec, enough
from repack.problem.goals import (
    GoalView,
    Usage,
    block,
    build_view,
    fits,
    freed,
    imbalance,
    largest_free,
    loads,
    moved,
    node_imbalance,
    touched,
    uses,
    value,
    within,
)
from repack.problem.plan import GoalReport, Move, Plan, empty_plan, outcome
from repack.problem.sequencing import SequencingError, sequence
from repack.problem.snapshot import Snapshot
from repack.search.goal_greedy import greedy

FORMULATION = "goal"
# the model covers at most this many nodes plus twice the nodes a plan may touch; the pods of
# the others stay where they are (a plan touches few nodes, and a model of every node of a large
# cluster takes the whole budget to build)
NEIGHBOURHOOD = 16
GREEDY_SHARE = 0.4  # of the budget, at most, for the greedy start (it mostly ends far sooner)
RESERVE_SHARE = 0.05  # of the budget kept for sequencing and checking the plan


def measure(view: GoalView, where: list[int]) -> float:
    """The goal's measure as reported: imbalance, largest free block or nodes that could go."""
    goal = view.spec.goal
    if goal == "balance":
        return imbalance(view, where)
    if goal == "defragment":
        return block(view, where)
    return float(len(freed(view, where)))


def _report(view: GoalView, where: list[int], greedy_gain: float) -> GoalReport:
    spec = view.spec
    before, after = measure(view, list(view.home)), measure(view, where)
    return GoalReport(
        goal=spec.goal,
        basis=view.basis,
        before=before,
        after=after,
        gain=value(view, where) - value(view, list(view.home)),
        min_gain=spec.min_gain,
        max_moves=spec.limits.max_moves,
        max_nodes=spec.limits.nodes_cap(view.nodes),
        touched=tuple(sorted(view.names[n] for n in touched(view, where))),
        freed=tuple(freed(view, where)) if spec.goal == "consolidate" else (),
        largest_free=largest_free(view, where),
        greedy_gain=greedy_gain,
    )


def neighbourhood(view: GoalView, start: list[int]) -> set[int]:
    """The nodes the CP-SAT model may move pods between: those the greedy start touched, then
    the most promising for the goal (the most imbalanced; the emptiest nodes that could go and
    the fullest that accept pods; the largest free blocks and the fullest nodes)."""
    size = min(view.nodes, NEIGHBOURHOOD + 2 * view.spec.limits.nodes_cap(view.nodes))
    load = loads(view, list(view.home))
    fill = [
        sum(load[n][r] / max(1, view.alloc[n][r]) for r in view.measured) for n in range(view.nodes)
    ]
    if view.spec.goal == "balance":
        w, use = view.balance_weights, uses(view, list(view.home))
        order = sorted(range(view.nodes), key=lambda n: -node_imbalance(w[n], use[n]))
    else:
        low = sorted(range(view.nodes), key=lambda n: (not view.freeable[n], fill[n]))
        high = sorted(range(view.nodes), key=lambda n: (not view.open[n], -fill[n]))
        order = [n for pair in zip(low, high, strict=True) for n in pair]
    keep = set(touched(view, start))
    for n in order:
        if len(keep) >= size:
            break
        keep.add(n)
    return keep


def restricted(view: GoalView, keep: set[int]) -> tuple[GoalView, list[int]]:
    """``view`` with the pods outside ``keep`` fixed where they run and nothing landing outside
    it, and the index in ``view`` of each pod it still moves. The balance weights are the whole
    cluster's (its totals are unchanged)."""
    inside = [p for p in range(len(view.keys)) if view.home[p] in keep]
    fixed = [list(row) for row in view.fixed]
    fixed_use = [list(row) for row in view.fixed_use]
    stuck = set()
    for p in range(len(view.keys)):
        if view.home[p] not in keep:
            n = view.home[p]
            stuck.add(n)
            fixed[n] = [a + b for a, b in zip(fixed[n], view.req[p], strict=True)]
            fixed_use[n] = [a + b for a, b in zip(fixed_use[n], view.use[p], strict=True)]
    sub = replace(
        view,
        fixed=tuple(tuple(r) for r in fixed),
        fixed_use=tuple(tuple(r) for r in fixed_use),
        keys=tuple(view.keys[p] for p in inside),
        home=tuple(view.home[p] for p in inside),
        req=tuple(view.req[p] for p in inside),
        use=tuple(view.use[p] for p in inside),
        eligible=tuple(view.eligible[p] & keep for p in inside),
        freeable=tuple(f and n not in stuck for n, f in enumerate(view.freeable)),
    )
    sub.__dict__["balance_weights"] = view.balance_weights  # the whole cluster's fills
    return sub, inside


def rebalance(
    snapshot: Snapshot,
    spec: GoalSpec,
    options: SolveOptions | None = None,
    usage: Usage | None = None,
    clock: Clock = time.monotonic,
) -> Plan:
    """A checked plan of moves for ``spec``'s goal within its bounds (or why there is none)."""
    options = options or SolveOptions()
    start = clock()
    limit = options.time_limit
    view = build_view(snapshot, spec, usage)
    home = list(view.home)

    def key(where: list[int]) -> tuple[float, int]:
        # rounded: the measure is a float sum, and an equal plan must not win on noise
        return round(value(view, where), 9), -moved(view, where)

    best = greedy(view, start + GREEDY_SHARE * limit, clock)
    greedy_gain = value(view, best) - value(view, home)
    if key(best) <= key(home):
        best = home
    status, proven = "not run", False
    until = start + limit * (1 - RESERVE_SHARE)
    if view.keys and spec.limits.max_moves > 0 and until - clock() > 0.02:
        sub, inside = restricted(view, neighbourhood(view, best))
        model = GoalModel(sub)
        model.hint([best[p] for p in inside])
        status, part = model.solve(until - clock(), options.workers, options.seed)
        found = None
        if part is not None:
            # the greedy start moved pods only between nodes of the model: the others are home
            found = list(best)
            for i, p in enumerate(inside):
                found[p] = part[i]
        if found is not None and fits(view, found) and within(view, found):
            proven = status == "OPTIMAL"
            if key(found) > key(best):
                best = found
    report = _report(view, best, greedy_gain)
    note = f"greedy gain {greedy_gain:.4g}; cp-sat {status}"

    def none(plan_status: str, why: str) -> Plan:
        plan = empty_plan(
            snapshot, plan_status, proven, clock() - start, FORMULATION, message=f"{why} ({note})"
        )
        return replace(plan, goal=_report(view, home, greedy_gain))

    if best == home or not enough(spec.goal, report.gain, report.before, spec.min_gain):
        return none("NO_IMPROVEMENT", f"gain {report.gain:.4g} below the minimum")
    moves = tuple(
        Move(view.keys[p], view.names[view.home[p]], view.names[n])
        for p, n in enumerate(best)
        if n != view.home[p]
    )
    try:
        steps = sequence(snapshot, moves, (), ())
    except SequencingError as exc:
        return none("NO_IMPROVEMENT", f"a better placement cannot be reached safely: {exc}")
    pods = {p.key: p for p in snapshot.pods}
    plan = Plan(
        status="OPTIMAL" if proven else "FEASIBLE",
        optimal=proven,
        solve_seconds=clock() - start,
        formulation=FORMULATION,
        before=outcome(snapshot),
        after=outcome(snapshot, moves),
        moves=moves,
        steps=steps,
        message=note,
        owners={m.pod: pods[m.pod].owner for m in moves},
        uids={m.pod: pods[m.pod].uid for m in moves},
        goal=report,
    )
    errors = checker.check_goal(snapshot, plan, spec, usage)
    if errors:
        return none("ERROR", "plan rejected by the checker: " + "; ".join(errors[:5]))
    return plan
