"""How the repacker runs CP-SAT: one configured solver for any of its models.

Every CP-SAT model of the repacker is built in this package (``model``: the phase models;
``refill``: an LNS neighbourhood; ``choice``: price-and-branch choices of LP columns;
``knapsack``: the last-resort pricing of a column) on ``model.Model``, and solved by a solver
from ``configured``: a wall limit, a number of workers and the few parameters a model needs.
See ``docs/architecture.md#repack-phases``. Neighbours: the modules named above.
"""

from __future__ import annotations

from typing import Any

from ortools.sat.python import cp_model


def configured(seconds: float, workers: int, **parameters: Any) -> cp_model.CpSolver:
    """A solver limited to ``seconds`` of wall time on ``workers`` (0: every core), with any
    further CP-SAT ``parameters`` (``random_seed``, ``cp_model_presolve``, ...)."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = workers
    for name, value in parameters.items():
        setattr(solver.parameters, name, value)
    return solver


def found(status: Any) -> bool:
    """Whether a solve's status comes with a solution."""
    return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
