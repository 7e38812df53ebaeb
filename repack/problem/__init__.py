"""The repacking problem and its plan (see ``docs/architecture.md#repack-problem`` and
``docs/architecture.md#plan-checking``).

* ``snapshot`` — the cluster as the engine sees it (nodes, pods, PDBs) and the parser of a
  ``kubectl get nodes,pods,poddisruptionbudgets -A -o json`` List;
* ``eligibility`` — which node a pod may run on (selectors, affinity, taints, cordons);
* ``classes`` — identical pods grouped into classes, assignments of class counts to nodes, their
  feasibility and a tier's value (placed pods and disruption at priority >= p);
* ``plan`` — the Plan returned (moves, placements, evictions, steps, the phases' reports) and its
  JSON form;
* ``sequencing`` — an order of steps that never overloads a node;
* ``checker`` — an independent validation of every plan before it is returned;
* ``generator`` — benchmark instances generated as in the Priority Matters paper;
* ``goal_spec`` — what a balancing run is asked for: its goal, bounds and exclusion label;
* ``goals`` — the balancing engine's view of a snapshot and each goal's measure.
"""
