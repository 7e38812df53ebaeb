"""Every CP-SAT model of the engine, and how it is run (see
``docs/architecture.md#repack-phases``).

* ``model`` — the two formulations of a phase (``classes``, ``per-pod``) and their fixes;
* ``run`` — a configured solver for any of these models;
* ``lns`` — large-neighbourhood search on a tier's pods;
* ``refill`` — one LNS refill: the tier's pods on a few chosen nodes;
* ``choice`` — price-and-branch: integral choices among the pattern LPs' columns;
* ``knapsack`` — the last-resort pricing of a place-LP column;
* ``goals`` — the balancing engine's model of one goal (``docs/architecture.md#balancing``).
"""

# The two formulations of the phase models (``model``), here so that naming them (the command
# line's choices, option checks) does not load OR-Tools.
FORMULATIONS = ("classes", "per-pod")
