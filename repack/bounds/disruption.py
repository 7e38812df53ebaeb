"""A lower bound on the disruption a tier must cause: a per-node pattern LP with removal costs.

The disrupt phase of tier p minimises moves (cost MOVE_COST each) plus evictions (EVICT_COST)
of running pods at priority >= p while the placed counts settled for the tiers above and for p
itself hold. CP-SAT's own LP relaxation of that model is weak (fractional pods can stay and fit
at the same time), so on 8 or more nodes it rarely proves anything. Here every node chooses a
pattern of slots (``disruption_lp``), priced exactly from listed maximal patterns where they
list and by a knapsack elsewhere (``node_pricing``). A slot never raises a pattern's cost, so
under pi >= 0 a maximal pattern is always at least as good as any pattern it contains.

The bound returned is the Lagrangian one: for any pi, g, b, w >= 0 (worth_c: what a staying pod
of class c is worth, MOVE_COST * (1 + sum_{q <= p_c} w_q)),

    sum_n (sum_c worth_c current_c,n - max over patterns of n of (pi.P + sum_c worth_c stays_c))
      + sum_c min over y_c in [low_c, total_c] of y_c (pi_c - g_c - sum_{q: c in q} b_q)
      + sum_c min over e_c in [0, running_c] of e_c ((EVICT_COST - MOVE_COST) worth_c
                                                      / MOVE_COST - g_c)
      + sum_c g_c running_c + sum_q b_q floor_q - sum_q w_q v_q

(low_c = total_c for a class every floor forces to be placed in full), so it holds even when
time runs out before the column generation converges. PDB budgets are dropped, which only
weakens the bound.

Solutions: the bound's LP dives (``packings``) turn an integral pattern choice into an
assignment (``disruption_choice.fill``); dives after the first break ties at random. With an
incumbent to beat and every node listed, a choice among the cheapest columns by reduced cost
(``reduced_cost_pick``) comes first (on DIVE_FIRST_MIN_NODES nodes or more, after the first,
batched, dive) and after every dive that improves: an assignment costs at least the LP value
plus the reduced costs of its columns, so one cheaper than the incumbent uses only listed
patterns whose reduced cost is below the gap. When they are few, CP-SAT choosing among them
finds the least disruption or proves there is none below the incumbent; else the cheapest few a
node make a quick heuristic. ``disruption_choice.disruption_solution`` is price-and-branch from
every generated column. The timings behind these choices are in ``docs/repack-tuning.md``.
Pure: the clock is a parameter. See ``docs/architecture.md#repack-phases``. Neighbours:
``disruption_lp``, ``node_pricing``, ``disruption_choice``, ``driver.lp`` (which calls it).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from ortools.sat.python import cp_model

from repack.bounds.disruption_choice import fill
from repack.bounds.disruption_lp import SLACK_MARGIN, DisruptionMaster, ceil_bound
from repack.bounds.node_pricing import ListedGroup, listed_groups
from repack.bounds.patterns import Listings
from repack.cpsat.choice import choose_node_patterns
from repack.problem.classes import Assignment, Problem, disruption_at

Clock = Callable[[], float]
# dives from one LP at most; a round figure, not varied
DIVES = 10
# on this many nodes or more the LP's first dive, batched, comes before the reduced-cost pick
# (32 nodes: proofs in 0.38-0.52 s against 0.42-1.72 s; on 16 as often slower as faster)
DIVE_FIRST_MIN_NODES = 24
# the most columns per node a reduced-cost choice takes, the cheapest (more: a heuristic with at
# most PICK_SHARE of the time left). 32 nodes: 8 met the LP's bound in 0.03-0.16 s, 16 took up
# to 0.43 s, 4 left no choice; the choice needs 0.2 s of the 0.25-0.3 s a 1 s solve leaves
PICK_COLUMNS = 8
PICK_SHARE = 0.8
# columns per listed node added before the first round: the patterns keeping the most of its
# pods (32 identical nodes: 16 cut the rounds to converge from 11 to 6-8)
KEEPERS = 16


def disruption_bound(
    problem: Problem,
    tier: int,
    placed_floors: Sequence[tuple[int, int]],
    starts: Sequence[Assignment],
    seconds: float,
    clock: Clock,
    target: int | None = None,
    columns: dict[int, list[dict[int, int]]] | None = None,
    packings: list[Assignment] | None = None,
    listed_only: bool = False,
    disruption_limits: Sequence[tuple[int, int]] = (),
    listings: Listings | None = None,
) -> int:
    """A lower bound on the disruption (priority >= ``tier``) of any assignment that places at
    least ``value`` pods at priority >= q for every (q, value) in ``placed_floors``.

    ``starts``: assignments meeting the floors (they make the master LP feasible). ``target``:
    the value to prove (the incumbent's); the search stops as soon as the bound reaches it.
    ``columns`` collects the generated patterns per node (for ``disruption_solution``).
    ``packings``: when the LP converged below ``target``, its dive appends the assignment it
    reaches (the caller checks it against every constraint).
    ``listed_only``: give up (0) unless every node is priced from a listing (the knapsack
    pricing would be too slow).
    ``disruption_limits``: (q, value) meaning disruption(priority >= q) <= value, settled by the
    higher tiers (rows of the LP, so its dives keep to them and the bound counts them).
    ``listings``: listings made earlier in the solve, reused and added to.
    Returns 0 when nothing better is known.
    """
    deadline = clock() + seconds
    active = problem.active(tier)
    if not active or not starts:
        return 0
    master = DisruptionMaster(problem, tier, placed_floors, columns, disruption_limits)
    if master.lp is None:
        return 0
    for x in starts:
        for n in master.nodes:
            master.add(n, {c: x[c][n] for c in active if x[c][n]})
    listed = listed_groups(problem, active, seconds, deadline, clock, bool(master.limits), listings)
    exact = sum(len(group.members) for group in listed) == len(master.nodes)
    if listed_only and not exact:
        return 0
    for group in listed:
        for n in group.members:
            for i in group.keepers(n, KEEPERS):
                master.add(n, group.listing.pattern(i))
    value, best = master.converge(listed, deadline, clock, target)
    bound = ceil_bound(best)
    # converged with exact pricing, the Lagrangian bound meets the LP value up to the pricing's
    # rounding margins; the LP value itself is not used (a column missed by a rounding error
    # could leave it a hair above the true optimum)
    if value is None or packings is None or (target is not None and bound >= target):
        return bound

    def pick(lp_value: float, worse: int) -> tuple[Assignment | None, int]:
        """The exact choice among the columns that can beat ``worse`` (all nodes listed)."""
        return reduced_cost_pick(
            problem,
            tier,
            master,
            listed,
            lp_value,
            worse,
            placed_floors,
            disruption_limits,
            deadline,
            clock,
        )

    found, worse = None, target
    dive_first = len(master.nodes) >= DIVE_FIRST_MIN_NODES
    if exact and target is not None and not dive_first:
        # first a choice among the cheapest columns by reduced cost: exact when those that can
        # take part in a better assignment are few, else a quick heuristic (measured on 32
        # nodes with frozen upper tiers, 8 columns a node: the LP's bound met in 0.03-0.16 s,
        # where the first dive, one node a step, took 0.3 s or more; batched, as it is from
        # DIVE_FIRST_MIN_NODES, it comes first there)
        found, proven = pick(value, target)
        bound = max(bound, proven)
        if found is not None:
            worse = disruption_at(problem, found, tier)
    if worse is None or bound < worse:
        dived, bound = dives(
            problem,
            tier,
            master,
            listed,
            deadline,
            clock,
            worse,
            bound,
            pick if exact else None,
            batch_first=dive_first,
        )
        found = dived if dived is not None else found
    if found is not None:
        packings.append(found)
    return bound


def reduced_cost_pick(
    problem: Problem,
    tier: int,
    master: DisruptionMaster,
    listed: Sequence[ListedGroup],
    value: float,
    target: int,
    placed_floors: Sequence[tuple[int, int]],
    disruption_limits: Sequence[tuple[int, int]],
    deadline: float,
    clock: Clock,
) -> tuple[Assignment | None, int]:
    """An assignment better than ``target`` (the incumbent's disruption) chosen by CP-SAT
    among the columns that can be part of one, and what that proves: (assignment or None,
    bound; 0 when nothing is proven).

    Any assignment costs at least the LP value plus the reduced cost of each of its columns
    (at the converged LP's duals), so one costing target - 1 or less uses only columns whose
    reduced cost is at most target - 1 - LP value. Every maximal pattern of every node is
    listed, and a node's pods sit no worse in a maximal pattern containing its own, so when
    all those columns are in the choice (at most PICK_COLUMNS a node), its optimum is the
    phase's: below ``target`` it is proven, and no choice (or none below ``target``) proves
    ``target``. With more, the PICK_COLUMNS cheapest a node make a quick heuristic."""
    slack = target - 1 - value
    if slack < -SLACK_MARGIN:
        return None, target  # the LP value alone rules out anything better
    columns, complete = master.candidates(listed, slack, PICK_COLUMNS)
    left = deadline - clock()
    if not complete:
        left *= PICK_SHARE  # a heuristic then: the dives keep the rest
    if left < 0.005:
        return None, 0
    status, chosen, cost = choose_node_patterns(
        problem, tier, placed_floors, columns, left, 1, disruption_limits, exact_lp=True
    )
    if status == cp_model.INFEASIBLE:
        return None, target if complete else 0
    if chosen is None:
        return None, 0
    proven = status == cp_model.OPTIMAL and complete
    if cost >= target:
        return None, target if proven else 0
    return fill(problem, tier, chosen), cost if proven else 0


def dives(
    problem: Problem,
    tier: int,
    master: DisruptionMaster,
    listed: Sequence[ListedGroup],
    deadline: float,
    clock: Clock,
    target: int | None,
    bound: int,
    pick: Callable[[float, int], tuple[Assignment | None, int]] | None,
    batch_first: bool = False,
) -> tuple[Assignment | None, int]:
    """The least disruptive assignment of up to DIVES dives from the converged LP (the first
    deterministic, one node a step unless ``batch_first``, the others batched with random
    tie-breaks; each must beat the best so far), until one meets ``bound`` or ``deadline``,
    and the bound. After a dive that improves, ``pick`` (LP value, disruption to beat)
    chooses among the columns that could beat it: an assignment better still, or, when they
    are few, a proof that none is."""
    rng = random.Random(0)
    best: Assignment | None = None
    worse = target
    for attempt in range(DIVES):
        chosen = master.dive(
            listed, deadline, clock, worse, rng if attempt else None, bool(attempt) or batch_first
        )
        improved = False
        if chosen is not None:
            x = fill(problem, tier, chosen)
            cost = disruption_at(problem, x, tier)
            if worse is None or cost < worse:
                best, worse, improved = x, cost, True
        if (worse is not None and worse <= bound) or clock() >= deadline:
            break
        master.reset()
        value, _ = master.converge(listed, deadline, clock, None)
        if value is None:
            break
        if improved and pick is not None and worse is not None:
            picked, proven = pick(value, worse)
            bound = max(bound, proven)
            if picked is not None:
                best, worse = picked, disruption_at(problem, picked, tier)
            if worse <= bound:
                break
    return best, bound
