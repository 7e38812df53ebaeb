"""The last-resort pricing of a place-phase LP column by CP-SAT: the best pattern of a node group
for the LP's duals when the branch and bound of ``bounds.pricing`` hits its limit (most calls
never get here). CP-SAT needs integral coefficients: the duals are scaled by PRICE_SCALE and
rounded up, so its bound over-estimates every pattern's value (it stays valid). Pure. See
``docs/architecture.md#repack-phases``. Neighbours: ``bounds.pricing`` (which calls it), ``run``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from repack.cpsat.model import Model
from repack.cpsat.run import configured, found
from repack.problem.classes import Problem

# the duals' scale: the bound over-estimates by at most a pod count / PRICE_SCALE. A round figure
# set with this fallback, which few calls reach
PRICE_SCALE = 10_000


def best_pattern(
    problem: Problem,
    most: dict[int, int],
    duals: dict[int, float],
    cap: Sequence[int],
    seconds: float,
) -> tuple[dict[int, int] | None, float | None]:
    """The pattern (pods per class, at most ``most[c]`` of class c) of highest value under
    ``duals`` that fits ``cap``, and an upper bound on every pattern's value; (None, None) when
    CP-SAT found nothing in ``seconds``."""
    m = Model()
    a = {c: m.new_int_var(0, ub, f"a{c}") for c, ub in most.items()}
    for r in range(len(problem.resources)):
        terms = [
            problem.classes[c].requests[r] * v
            for c, v in a.items()
            if problem.classes[c].requests[r]
        ]
        if terms:
            m.add(sum(terms) <= max(0, cap[r]))
    m.maximize(sum(math.ceil(duals[c] * PRICE_SCALE) * v for c, v in a.items()))
    solver = configured(max(0.01, seconds), 1)
    if not found(solver.solve(m)):
        return None, None
    pattern = {c: int(solver.value(v)) for c, v in a.items() if solver.value(v)}
    return pattern, solver.best_objective_bound / PRICE_SCALE
