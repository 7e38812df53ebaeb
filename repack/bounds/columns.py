"""The column pool of a column-generation master LP (GLOP), shared by the pattern LPs.

Both pattern LPs (``placement``: one column per node group and pattern; ``disruption_lp``: one
per node and pattern) add each generated pattern once per key, keep every pattern added for the
price-and-branch that follows, and read the LP's solution in one call. See
``docs/architecture.md#repack-phases``. Neighbours: ``placement``, ``disruption_lp``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import numpy as np
from ortools.linear_solver import linear_solver_pb2, pywraplp

# GLOP without scaling and presolve (``ColumnPool(plain=True)``, the disruption LP): measured on
# 32 nodes, 800 simplex iterations against 3 500; the place LP keeps the defaults (measured)
GLOP_PARAMETERS = "use_scaling: false use_preprocessing: false"

K = TypeVar("K")


class ColumnPool(Generic[K]):
    """The columns of a column-generation master LP (GLOP): each pattern (pod counts per class)
    is added once per key (node group or node), and every pattern added is recorded in
    ``columns`` for the price-and-branch that follows. Serves this module and
    ``disruption_bound``; ``plain``: GLOP with GLOP_PARAMETERS."""

    def __init__(self, columns: dict[K, list[dict[int, int]]] | None, plain: bool = False) -> None:
        self.lp = pywraplp.Solver.CreateSolver("GLOP")
        if plain and not self.lp.SetSolverSpecificParametersAsString(GLOP_PARAMETERS):
            raise RuntimeError(f"GLOP refused its parameters: {GLOP_PARAMETERS}")
        self.columns = columns
        self.seen: set[tuple[K, tuple[tuple[int, int], ...]]] = set()

    def new(self, key: K, pattern: dict[int, int], upper: float, empty: bool = False) -> Any:
        """A fresh master variable for ``pattern`` at ``key`` (bounds 0..upper), or None when
        it is already there (or empty and ``empty`` is not set)."""
        counts = tuple(sorted((c, k) for c, k in pattern.items() if k))
        if (key, counts) in self.seen or not (counts or empty):
            return None
        self.seen.add((key, counts))
        if self.columns is not None:
            self.columns.setdefault(key, []).append(dict(counts))
        return self.lp.NumVar(0, upper, f"l{len(self.seen)}")


def solution_values(lp: pywraplp.Solver) -> np.ndarray:
    """Every variable's value in the LP just solved, by variable index, in one call (read one
    by one through the wrapper, 3 000 columns took 2 ms, and a dive reads them at every step:
    a fifth of a 32-node place phase's dive at 1 s)."""
    response = linear_solver_pb2.MPSolutionResponse()
    lp.FillSolutionResponseProto(response)
    return np.asarray(response.variable_value)
