"""The extender's repacker: when to run the engine, on what, and how a plan is carried out.

The engine itself (snapshot, classes, bounds, searches, solver, plan, sequencing, checker) is the
pure package ``repack``; ``carico repack`` and ``carico repack-bench`` are
``carico_app.repack_cmd`` and ``carico_app.repack_bench``. This package is the glue that runs the
engine inside the extender (docs/architecture.md#repack-execution):

* ``trigger`` — when pods stuck Unschedulable call for a run (debounce, cooldown, no rerun);
* ``live`` — raw API list responses to a snapshot, its fingerprint and a plan (the unit of work of
  the extender's solver process);
* ``service`` — runs, the plan history, dry-run/apply and the ``PlanRunner`` seam of apply mode,
  and the balancing engine's periodic and on-demand runs (docs/architecture.md#balancing);
* ``request`` — the body of ``POST /repack`` (time limit, dry run, mode) and its validation;
* ``executor`` — apply mode: the plan's steps one at a time, evictions through the Eviction API,
  plan slots for the replacements, abort on drift or timeout;
* ``recheck`` — the live state a step is checked against before it runs;
* ``evictions`` — what an eviction can come to (the cluster interfaces' reply to the executor).

``trigger``, ``live`` and ``recheck`` are pure: no I/O, the clock is a parameter.
"""
