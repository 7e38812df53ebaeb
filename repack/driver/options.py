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

from repack.cpsat import FORMULATIONS

Clock = Callable[[], float]  # seconds; the driver never reads the time any other way


@dataclass(frozen=True)
class Tuning:
    """The phase driver's shares, thresholds and cost estimates (defaults: the measured ones;
    the figures are in ``docs/repack-tuning.md``). A share is of the phase's time unless it
    says otherwise."""

    # -- the solve's budget --
    # a place phase's weight against its disrupt phase's in the share-out; set by hand
    place_weight: int = 2
    # the starting heuristics' most of what is left of the solve; set by hand, they end sooner
    heuristic_share: float = 0.25
    # kept for making the plan: this much a pod (measured 40-75 us), at most this share of the
    # limit
    plan_seconds_per_pod: float = 60e-6
    plan_reserve_share: float = 0.1
    # the least time worth starting a step; CP-SAT never gets less. About CP-SAT's start-up,
    # not measured
    min_step_seconds: float = 0.005

    # -- cost estimates --
    # building and hinting a search's model, per placement variable (measured 15-22 us and
    # 10 us); a search is started only with twice that
    setup_seconds_per_variable: float = 20e-6
    # building a price-and-branch choice, per column (measured 0.054-0.094 s for 2 300 columns)
    pack_seconds_per_column: float = 40e-6

    # -- cluster sizes that change a phase's course --
    # from here LNS runs before a place phase's search and a disrupt phase's last one; set with
    # the LNS (smaller clusters: the search alone proves sooner)
    lns_min_nodes: int = 12
    # from here a place phase on several cores searches beside the pattern LP and LNS
    # (measured on 32 nodes: proofs in 0.2 s, against 0.5 s in sequence)
    place_beside_min_nodes: int = 12
    # from here a phase under ``min_bound_seconds`` is short: no pattern LP (a place phase),
    # no search (a disrupt phase); measured: both return nothing in time on 32 nodes
    short_min_nodes: int = 24
    min_bound_seconds: float = 1.0
    # ... and from here where the patterns do not list, a short disrupt phase is all undoing of
    # moves (measured: 87.0 against 86.25 grid instances reached a run at 1 s)
    unlisted_short_min_nodes: int = 8

    # -- place phases --
    # the swap search first where the patterns do not list; set by hand (it stops when stalled)
    swap_share: float = 0.25
    # ... then this share of the rest may prove the count, the rest flows on (measured: the
    # same pods placed on the grid at 1 s, fewer moves after)
    unlisted_proof_share: float = 0.2
    # the pattern LP and its dive when they come first; set by hand (they mostly prove sooner)
    pattern_share: float = 0.8
    # a pattern-LP bound that does not come first (also a one-core disrupt phase's); set by hand
    bound_share: float = 0.3
    # a one-core place phase's first search; set by hand
    quick_share: float = 0.15
    # LNS when a place phase's first steps did not prove it; set by hand
    lns_share: float = 0.5
    # a short listed phase's swap search for a packing kept aside in case the dive runs out of
    # time (measured: 85.5 against 85.0 grid instances reached a run at 1 s)
    pre_swap_share: float = 0.1
    # price-and-branch from the pattern LP's columns, of what is left; set by hand
    pack_share: float = 0.2

    # -- disrupt phases --
    # a one-core disrupt phase's first search; set by hand (it often proves the phase)
    quick_disrupt_share: float = 0.3
    # a one-core large disrupt phase's undoing of moves and LNS, before its last search; set by
    # hand
    lns_disrupt_share: float = 0.3
    # of an improvement's time, the undoing of moves' share; LNS has the rest (measured: 86.25
    # against 85.5 grid instances reached a run at 1 s with 0.7)
    undo_share: float = 0.9
    # a fresh packing for each chain after the first, of its time (measured: 86 against 85
    # grid instances reached at 1 s from the incumbent)
    fresh_share: float = 0.1
    # on several cores the pattern LP runs beside the search from this many seconds, for at
    # most this share; set with that strategy on 4-16 nodes
    side_bound_seconds: float = 0.2
    side_bound_share: float = 0.7
    # ... on ``short_min_nodes`` or more with listed patterns, alone first for this share
    # (measured on 32 nodes at 1 s: 0.9 met the bound in three runs, 0.7 ran out of time)
    alone_bound_share: float = 0.9
    # a short disrupt phase's try at listing its patterns (measured on 32 nodes: listing,
    # bound and dive in 0.1-0.4 s)
    list_share: float = 0.25
    # the top tier's short disrupt phase gets its LP with this many seconds a node (measured on
    # 32 nodes: proofs in 0.45-0.52 s phases, none in 0.3 s)
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
