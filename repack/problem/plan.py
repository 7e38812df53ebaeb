"""The Plan the repacker returns, and how it is computed from a snapshot and pod-level actions.

A Plan names individual pods (namespace/name plus uid and owner, so that an executor can later
recognise a controller's replacement pod), the executable ``steps`` from ``sequencing``, the
per-phase solver status and the outcome before and after. ``outcome`` derives the lexicographic
vector from the actions themselves, so a plan cannot claim more than its moves and evictions do.
Serialisation to JSON-ready dicts is here too; printing is the CLI's job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from repack.problem.classes import EVICT_COST, MOVE_COST
from repack.problem.snapshot import Snapshot

STATUSES = ("OPTIMAL", "FEASIBLE", "NO_IMPROVEMENT", "INFEASIBLE", "ERROR")


@dataclass(frozen=True)
class Move:
    pod: str
    from_node: str
    to_node: str


@dataclass(frozen=True)
class Placement:
    pod: str
    to_node: str


@dataclass(frozen=True)
class Eviction:
    pod: str
    from_node: str


@dataclass(frozen=True)
class Step:
    """One executable step. ``action``: ``evict`` (the pod leaves for good), ``move`` (leaves
    ``from_node`` and its replacement lands on ``to_node``), ``evict-first`` (leaves now to break a
    cycle; a later ``land`` step puts it on ``to_node``), ``land``, ``place`` (a pending pod)."""

    action: str
    pod: str
    from_node: str | None = None
    to_node: str | None = None


# The steps a phase may take, in the names ``PhaseStep`` uses (see
# ``docs/architecture.md#repack-phases``): the whole-model CP-SAT search, the swap search (single
# moves of pods off overloaded nodes), its undoing of moves, large-neighbourhood search, the
# pattern LP's bound, its dive (the LP's own packing), and price-and-branch from its columns.
STEP_NAMES = ("cp-sat", "swap-search", "undo-moves", "lns", "pattern-lp", "dive", "pack")


@dataclass(frozen=True)
class PhaseStep:
    """One step a phase took, in the order the steps started (a search run beside other steps
    starts before them and ends with the phase), and what it achieved: the phase's value
    (placed pods or disruption at priority >= tier) of the assignment it produced, and the
    bound on that value it proved (None: none produced, or no bound proven)."""

    name: str  # one of STEP_NAMES
    value: int | None = None
    bound: int | None = None
    cores: int = 1  # cores it ran on (a search beside other work has all but one)


@dataclass(frozen=True)
class PhaseReport:
    tier: int  # the priority p of "priority >= p"
    phase: str  # "place" or "disrupt"
    status: str  # OPTIMAL, FEASIBLE (time ran out, best found kept), INFEASIBLE
    seconds: float
    value: int  # placed pods (place) or disruption cost (disrupt) at priority >= tier
    bound: int  # the solver's proven bound on that value
    skipped: bool = False  # proven without a solve (the hint already met the bound)
    lexicographic: bool = False  # place phase proven with disruption as its tie-break
    steps: tuple[PhaseStep, ...] = ()  # what the phase did, in order


@dataclass(frozen=True)
class Outcome:
    placed_by_priority: dict[int, int]
    disruption_by_priority: dict[int, int]
    vector: tuple[int, ...]  # (placed >= p1, -disruption >= p1, placed >= p2, ...)


@dataclass(frozen=True)
class GoalReport:
    """What a balancing plan claims (``docs/architecture.md#balancing``); the checker recomputes
    every figure. ``before``/``after``: the goal's measure (balance: the imbalance, lower is
    better; defragment: the largest free block, a share of the largest node; consolidate: nodes
    that could go); ``gain`` the improvement, positive when better."""

    goal: str
    basis: str  # what the measure is computed on: "telemetry", "requests" or a mix
    before: float
    after: float
    gain: float
    min_gain: float  # below this the run proposes nothing
    max_moves: int
    max_nodes: int  # nodes the plan may touch
    touched: tuple[str, ...] = ()
    freed: tuple[str, ...] = ()  # nodes with no pod left but DaemonSet and static pods
    largest_free: dict[str, int] = field(default_factory=dict)  # per goal resource, after
    greedy_gain: float = 0.0  # the greedy start's gain, for comparison


@dataclass(frozen=True)
class Plan:
    status: str
    optimal: bool
    solve_seconds: float
    formulation: str
    before: Outcome
    after: Outcome
    moves: tuple[Move, ...] = ()
    placements: tuple[Placement, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    steps: tuple[Step, ...] = ()
    phases: tuple[PhaseReport, ...] = ()
    message: str = ""
    owners: dict[str, str] = field(default_factory=dict)  # pod -> "Kind/name"
    uids: dict[str, str] = field(default_factory=dict)
    goal: GoalReport | None = None  # set by the balancing engine

    @property
    def improved(self) -> bool:
        return self.status in {"OPTIMAL", "FEASIBLE"}


def tiers_of(snapshot: Snapshot) -> list[int]:
    return sorted({p.priority for p in snapshot.pods}, reverse=True)


def outcome(
    snapshot: Snapshot,
    moves: Iterable[Move] = (),
    placements: Iterable[Placement] = (),
    evictions: Iterable[Eviction] = (),
) -> Outcome:
    """The outcome if the given actions were carried out on the snapshot."""
    prio = {p.key: p.priority for p in snapshot.pods}
    node_names = {n.name for n in snapshot.nodes}
    placed: dict[int, int] = {}
    for pod in snapshot.pods:
        if pod.node is not None and pod.node in node_names:
            placed[pod.priority] = placed.get(pod.priority, 0) + 1
    disruption: dict[int, int] = {}
    for m in moves:
        disruption[prio[m.pod]] = disruption.get(prio[m.pod], 0) + MOVE_COST
    for e in evictions:
        disruption[prio[e.pod]] = disruption.get(prio[e.pod], 0) + EVICT_COST
        placed[prio[e.pod]] = placed.get(prio[e.pod], 0) - 1
    for pl in placements:
        placed[prio[pl.pod]] = placed.get(prio[pl.pod], 0) + 1
    vector: list[int] = []
    for p in tiers_of(snapshot):
        vector.append(sum(v for q, v in placed.items() if q >= p))
        vector.append(-sum(v for q, v in disruption.items() if q >= p))
    return Outcome(
        {p: placed.get(p, 0) for p in tiers_of(snapshot)},
        {p: disruption.get(p, 0) for p in tiers_of(snapshot)},
        tuple(vector),
    )


def empty_plan(
    snapshot: Snapshot,
    status: str,
    optimal: bool,
    seconds: float,
    formulation: str,
    phases: Sequence[PhaseReport] = (),
    message: str = "",
) -> Plan:
    now = outcome(snapshot)
    return Plan(
        status, optimal, seconds, formulation, now, now, phases=tuple(phases), message=message
    )


def _outcome_dict(o: Outcome) -> dict[str, Any]:
    return {
        "placed_by_priority": {str(k): v for k, v in o.placed_by_priority.items()},
        "disruption_by_priority": {str(k): v for k, v in o.disruption_by_priority.items()},
        "vector": list(o.vector),
    }


def to_dict(plan: Plan) -> dict[str, Any]:
    """The JSON form printed by ``carico repack --output json``."""
    return {
        "status": plan.status,
        "optimal": plan.optimal,
        "solve_seconds": round(plan.solve_seconds, 4),
        "formulation": plan.formulation,
        "message": plan.message,
        "before": _outcome_dict(plan.before),
        "after": _outcome_dict(plan.after),
        "moves": [
            {"pod": m.pod, "from": m.from_node, "to": m.to_node, "owner": plan.owners.get(m.pod)}
            for m in plan.moves
        ],
        "placements": [{"pod": p.pod, "to": p.to_node} for p in plan.placements],
        "evictions": [
            {"pod": e.pod, "from": e.from_node, "owner": plan.owners.get(e.pod)}
            for e in plan.evictions
        ],
        "steps": [
            {"action": s.action, "pod": s.pod, "from": s.from_node, "to": s.to_node}
            for s in plan.steps
        ],
        "phases": [{**asdict(p), "seconds": round(p.seconds, 4)} for p in plan.phases],
        **({"goal": asdict(plan.goal)} if plan.goal is not None else {}),
    }
