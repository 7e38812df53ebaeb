"""The phase driver: the tier loop, the time budget and which steps each phase takes (see
``docs/architecture.md#repack-phases``; the figures behind its tuning are in
``docs/repack-tuning.md``).

* ``solver`` — ``solve``: the lexicographic tier loop from a snapshot to a checked Plan;
* ``options`` — ``SolveOptions`` and the ``Tuning`` record of the driver's shares and thresholds;
* ``budget`` — one time budget shared out across the phases;
* ``context`` — what the phases of one solve share, and checks on assignments;
* ``dispatch`` — the decision tree: which strategy runs a phase;
* ``phase`` — a phase while it runs (``PhaseState``), its steps, search steps and how it ends;
* ``place`` — the place phase's strategies (swap search first, side by side, in sequence);
* ``disrupt`` — the disrupt phase's strategies (undoing of moves only, side by side, in sequence);
* ``search`` — the whole-model CP-SAT search, on one thread or beside other work;
* ``lp`` — a phase's pattern-LP step: bound, dive and price-and-branch;
* ``improve`` — the swap search, the undoing of moves and LNS for a share of a phase;
* ``listing`` — whether a phase's patterns list quickly, and the solve's listings;
* ``freeze`` — phases below tiers that may disrupt nothing, on the frozen problem;
* ``planning`` — from the final assignment to a sequenced, checked Plan;
* ``balance`` — the balancing engine: a goal's greedy start, its CP-SAT model, a checked plan
  (``docs/architecture.md#balancing``).
"""
