"""The repacking engine: make pending pods fit by moving the fewest others.

Given a snapshot of a cluster's nodes, pods and PodDisruptionBudgets, it finds the placement that
places the most pods, priority tier by priority tier, with the least disruption (a move costs 1,
an eviction 2), and a plan of steps that reaches it without overloading a node. Pure: no I/O,
the clock is a parameter. Callers use ``driver.solver.solve`` and the ``problem.plan.Plan`` it
returns. See ``docs/architecture.md#repack-problem`` (the problem),
``docs/architecture.md#repack-phases`` (how it is solved) and
``docs/architecture.md#plan-checking`` (how a plan is checked).

Sub-packages, from input to output:

* ``problem`` — the problem and the plan: the snapshot, pod classes and assignments, the plan,
  its sequencing and its independent checker, and the benchmark's instance generator;
* ``search`` — local searches on assignments: starting heuristics, the swap search and its
  undoing of moves, relabelling of interchangeable nodes;
* ``bounds`` — the pattern LPs: the place phase's upper bound on placed pods, the disrupt phase's
  lower bound on disruption, their dives and price-and-branch;
* ``cpsat`` — every CP-SAT model: the phase models of both formulations, the LNS and its refills,
  the price-and-branch choices, the last-resort column pricing;
* ``driver`` — the phase driver: the tier loop, the time budget, and which steps each phase takes.

The *balancing engine* (``driver.balance.rebalance``) is the second mode: on the same snapshot,
it moves running pods for a goal (balance, defragment, consolidate) within bounds on the moves
and nodes touched, from a greedy start (``search.goal_greedy``) and a CP-SAT model
(``cpsat.goals``), its plans checked by ``checker.check_goal``
(``docs/architecture.md#balancing``).
"""
