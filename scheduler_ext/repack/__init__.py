"""The extender's side of repacking: when to run, the live cluster as input, applying plans.

Design: docs/architecture.md#repack-execution. The engine itself (snapshot, classes, bounds,
searches, solver, plan, sequencing, checker) is the pure package ``repack``; ``carico repack`` and
``carico repack-bench`` are ``carico_app.repack_cmd`` and ``carico_app.repack_bench``.

* ``trigger`` — when pods stuck Unschedulable call for a run (debounce, cooldown, no rerun);
* ``live`` — raw API list responses to a snapshot, its fingerprint and a plan (the unit of work of
  the extender's solver process);
* ``service`` — the extender's repacker: runs, the plan history, dry-run/apply and the
  ``PlanRunner`` seam of apply mode;
* ``recheck`` — what the live state says before and after each plan step (pure);
* ``executor`` — apply mode: evictions, plan slots and waiting, step by step.

``trigger``, ``live`` and ``recheck`` are pure: no I/O, the clock is a parameter.
"""
