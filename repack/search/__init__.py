"""Local searches on assignments (see ``docs/architecture.md#repack-phases``).

* ``heuristics`` — the starting assignments of a phase (keep-and-fill, make-room, first- and
  best-fit-decreasing), a repair and a move-reducing local search;
* ``swap_search`` — the weighted swap search that finds the last pods of tight packings, and its
  iterated undoing of moves;
* ``swap_state`` — the swap search's state and its calls into the compiled kernel;
* ``swap_kernel`` — the swap search's compiled loops (steps, insertions, rounds of undoing);
* ``compiled`` — compiling those loops with numba at import, cached on disk where possible;
* ``relabel`` — relabelling interchangeable nodes so that an assignment moves the fewest pods;
* ``goal_greedy`` — the balancing engine's greedy start for each goal.
"""
