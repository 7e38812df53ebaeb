"""What a solve is told: the caller's ``SolveOptions`` and the driver's ``Tuning``.

``Tuning`` holds every share of a phase's time, node-count threshold and cost estimate the phase
driver steers by (see ``docs/architecture.md#repack-phases``). Each field says what it is and how
its value was chosen; the measurements behind them (instances, seeds, run-by-run figures) are in
``docs/repack-tuning.md``. The defaults are the measured values; tests and experiments pass
another ``Tuning`` in ``SolveOptions`` instead of changing module globals. Neighbours: ``solver``
(which takes the options), ``budget``, ``phase``, ``place``, ``disrupt``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from repack.cpsat.model import FORMULATIONS

Clock = Callable[[], float]  # seconds; the driver never reads the time any other way


@dataclass(frozen=True)
class Tuning:
    """The phase driver's shares, thresholds and cost estimates (defaults: the measured ones)."""

    # -- the solve's budget ------------------------------------------------------------------
    # a place phase weighs this many times its disrupt phase in the share-out of the budget
    # (placed pods come first); set by hand, never varied
    place_weight: int = 2
    # the starting heuristics of a phase get at most this share of what is left of the solve;
    # a round figure set with them, not measured since (they mostly end far sooner)
    heuristic_share: float = 0.25
    # the time kept for making the plan once the phases end: this much a pod (measured 40-75 us
    # a pod), at most this share of the limit
    plan_seconds_per_pod: float = 60e-6
    plan_reserve_share: float = 0.1
    # the least time worth starting a step (a search, an LP, a packing): a step given less is
    # skipped, and CP-SAT is never given less. About CP-SAT's own start-up; not varied
    min_step_seconds: float = 0.005

    # -- cost estimates (measured on a 2-core machine) ----------------------------------------
    # seconds to build, copy and hint a whole-model search's model, per placement variable
    # (15-22 us to build, 10 us to copy and hint, 16 to 128 nodes); a search is started only
    # with twice that time
    setup_seconds_per_variable: float = 20e-6
    # seconds CP-SAT needs to build a price-and-branch choice of one pattern a node, per column
    # (0.054-0.094 s for 2 300-2 450 columns on 32 nodes); given less it is not tried
    pack_seconds_per_column: float = 40e-6

    # -- cluster sizes that change a phase's course ---------------------------------------------
    # from this many nodes LNS runs before a place phase's search and a disrupt phase's last
    # search (on smaller clusters the search alone is quicker); set with the LNS, on 8-32 nodes
    lns_min_nodes: int = 12
    # ... and from this many nodes a place phase on several cores runs its search in a thread
    # beside the pattern LP and LNS (measured: proofs 0.2 s against 0.5 s on 32 nodes)
    place_beside_min_nodes: int = 12
    # from this many nodes a phase with less than ``min_bound_seconds`` changes course: a place
    # phase runs LNS then one search without the pattern LP, a disrupt phase is all undoing of
    # moves and LNS (on 32 nodes such searches returned nothing; on 16 they often prove)
    short_min_nodes: int = 24
    # ... and from this many nodes where the place phase found that the patterns do not list,
    # a sub-second disrupt phase is left to the undoing of moves (grid at 1 s: 87.0 against
    # 86.25 instances reaching the best-known outcome a run)
    unlisted_short_min_nodes: int = 8
    # a phase with less time than this is "short" in the sense above (the pattern LP does not
    # converge in it on 24-32 nodes)
    min_bound_seconds: float = 1.0

    # -- place phases --------------------------------------------------------------------------
    # a place phase whose patterns do not list first gives the swap search up to this share;
    # set with the swap search (it stops when it stalls, mostly far sooner)
    swap_share: float = 0.25
    # ... and keeps this share of what the swap search leaves for the searches that may prove
    # its count; the rest flows on to the disrupt phase (grid at 1 s: same pods placed, fewer
    # moves after)
    unlisted_proof_share: float = 0.2
    # up to this share of a place phase for the pattern LP and its dive when they come first;
    # set when the dive was added (it mostly proves the phase far sooner)
    pattern_share: float = 0.8
    # at most this share of a phase for a pattern-LP bound that does not come first (and for a
    # single-core disrupt phase's LP); a round figure set with the LP, not varied
    bound_share: float = 0.3
    # a single-core place phase's first search gets this share (with pattern bounds); set with
    # that sequence, not varied
    quick_share: float = 0.15
    # a place phase not proven by its first steps gives LNS this share of what is left; a round
    # figure set with the LNS, not varied
    lns_share: float = 0.5
    # a short listed place phase on several cores first gives a swap search this share, for a
    # packing kept in case the dive runs out of time (grid at 1 s: 85.5 against 85.0 reached)
    pre_swap_share: float = 0.1
    # price-and-branch from the pattern LP's columns gets this share of what is left of the
    # phase; a round figure set with it, not varied
    pack_share: float = 0.2

    # -- disrupt phases ------------------------------------------------------------------------
    # a single-core disrupt phase first searches for this share (on the class model it often
    # proves the phase outright); set with that sequence, not varied
    quick_disrupt_share: float = 0.3
    # a single-core disrupt phase on ``lns_min_nodes`` or more gives this share of what is left
    # to undoing moves and LNS before its last search; a round figure set with the LNS
    lns_disrupt_share: float = 0.3
    # of the time a disrupt phase's improvement gets, this share goes to the swap search's
    # undoing of moves, the rest to LNS (grid at 1 s, four seeds: 86.25 against 85.5 reached
    # with 0.7; the 30 hardest at 10 s: 25 against 23)
    undo_share: float = 0.9
    # where the undoing of moves runs a chain a core, the chains after the first start from a
    # fresh packing made in at most this share of its time (grid at 1 s: 86 against 85 reached)
    fresh_share: float = 0.1
    # a disrupt phase on several cores runs its pattern-LP bound beside the search from this many
    # seconds on, for at most this share of the phase (the LNS gets the rest); set with the
    # side-by-side phase on 4-16 nodes
    side_bound_seconds: float = 0.2
    side_bound_share: float = 0.7
    # ... and on ``short_min_nodes`` or more with listed patterns the LP runs alone first for this
    # share (32 nodes, two tiers, 1 s: 0.9 met the bound in three runs, 0.7 ran out of time)
    alone_bound_share: float = 0.9
    # a try at listing the patterns for a short disrupt phase's bound may take this share of the
    # phase (32 nodes, four pods per node: listings and bound in 0.1-0.4 s)
    list_share: float = 0.25
    # the top tier's short disrupt phase gets its pattern LP when it has this many seconds a node
    # (32 nodes, four pods per node: the LP proved in 0.45-0.52 s phases, and lost in 0.3 s)
    quick_top_seconds: float = 0.0125


@dataclass(frozen=True)
class SolveOptions:
    time_limit: float = 10.0  # seconds for the whole solve, all tiers and phases
    formulation: str = "classes"
    workers: int = 0  # CP-SAT search workers; 0 = every core
    seed: int = 0
    symmetry: bool = True  # order identical nodes where that is valid (classes only)
    # place phases also minimise disruption as a tie-break (proves both at once, but the proof of
    # the placed count alone is often much faster without it)
    tie_break: bool = False
    bounds: bool = True  # pattern-LP bounds, dives and the strategies built on them (classes only)
    tuning: Tuning = field(default_factory=Tuning)

    def __post_init__(self) -> None:
        if self.formulation not in FORMULATIONS:
            raise ValueError(f"unknown formulation {self.formulation!r}; choose {FORMULATIONS}")
        if not self.time_limit > 0:
            raise ValueError("time_limit must be positive")

    @property
    def patterns(self) -> bool:
        """Whether the phases use the pattern LPs and the strategies built on them."""
        return self.bounds and self.formulation == "classes"


def cores(options: SolveOptions) -> int:
    """Cores the solve may use: the option, else those this process may run on."""
    if options.workers:
        return options.workers
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1
