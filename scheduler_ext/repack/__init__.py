"""The CP-SAT repacker: make pending pods fit by moving the fewest others (DESIGN §4.3).

Modules, from input to output:

* ``snapshot`` — the cluster as the solver sees it (nodes, pods, PDBs) and the parser of a
  ``kubectl get nodes,pods,poddisruptionbudgets -A -o json`` List;
* ``eligibility`` — which node a pod may run on (selectors, affinity, taints, cordons);
* ``classes`` — identical pods grouped into classes, the count-based view both formulations share;
* ``model`` — the two CP-SAT formulations (``classes`` and ``per-pod``);
* ``heuristics`` — starting solutions (keep-and-fill, make-room, first/best-fit-decreasing) and a
  move-reducing local search;
* ``bounds`` — the pattern-LP upper bound on placed pods and price-and-branch packing;
* ``disruption_bound`` — the per-node pattern-LP lower bound on a tier's disruption (priced
  exactly from listed maximal patterns where possible), its LP dive and price-and-branch;
* ``solver`` — the lexicographic tier loop, time budget, hints and bounds;
* ``plan`` — the Plan the solver returns (moves, placements, evictions, steps, phases);
* ``sequencing`` — an order of steps that never overloads a node;
* ``checker`` — an independent validation of every plan before it is returned;
* ``generator`` — benchmark instances generated as in the Priority Matters paper;
* ``cli`` and ``bench`` — ``carico repack`` and ``carico repack-bench``;
* ``live`` — raw API list responses to a snapshot, its fingerprint and a plan (the unit of work of
  the extender's solver process);
* ``trigger`` — when pods stuck Unschedulable call for a run (debounce, cooldown, no rerun);
* ``service`` — the extender's repacker: runs, the plan history, dry-run/apply and the
  ``PlanRunner`` seam of apply mode.

Everything except ``cli``, ``bench`` and ``service`` is pure: no I/O, the clock is a parameter.
"""
