"""One time budget for the whole solve, shared out across its phases.

The phases end early enough to leave the plan's own making (pods, sequence, checks) in the
budget. Each phase gets a share of what is left in proportion to its size (the pods at or above
its tier; a place phase weighs ``place_weight`` times its disrupt phase), so whatever a phase
leaves unused flows on to the next. See ``docs/architecture.md#repack-phases``. Neighbours:
``solver`` (the tier loop that asks for the shares), ``options``.
"""

from __future__ import annotations

from repack.driver.options import Clock, SolveOptions
from repack.problem.classes import Problem


def plan_reserve(problem: Problem, options: SolveOptions) -> float:
    """The seconds kept at the end of the solve for making and checking the plan (measured
    40-75 us a pod: 10 ms for 256 pods, 50-80 ms for 1024)."""
    pods = sum(c.total for c in problem.classes)
    tuning = options.tuning
    return min(tuning.plan_reserve_share * options.time_limit, tuning.plan_seconds_per_pod * pods)


class Budget:
    """The phases' deadline and the share of the time left each phase gets, in order (place
    then disrupt, tier by tier, highest first)."""

    def __init__(
        self, problem: Problem, options: SolveOptions, clock: Clock, deadline: float
    ) -> None:
        self.clock = clock
        self.deadline = deadline
        self.tuning = options.tuning
        sizes = [sum(c.total for c in problem.classes if c.priority >= p) for p in problem.tiers]
        self.weights = [w for s in sizes for w in (options.tuning.place_weight * s, s)]
        self.index = 0

    def allot(self) -> float:
        """The next phase's seconds: its weight's share of what is left."""
        remaining = self.deadline - self.clock()
        total = sum(self.weights[self.index :]) or 1
        share = remaining * self.weights[self.index] / total
        self.index += 1
        return max(0.0, share)

    def heuristics_until(self) -> float:
        """When a phase's starting heuristics must stop: ``heuristic_share`` of what is left."""
        now = self.clock()
        return now + self.tuning.heuristic_share * max(0.0, self.deadline - now)
