"""Phases below tiers that may disrupt nothing: their running pods stay frozen where they are.

When the last disruption settled before a lower tier's phase is 0, the pods running at higher
priority may not move, so the pattern LPs of that phase work on ``classes.freeze_above`` (their
load taken off the nodes) and the place phase's LP may dive, which moving those pods freely would
forbid. ``Frozen`` maps counts, floors and assignments between that problem and the solve's;
``Freezes`` finds and keeps the freeze of the current tier. See
``docs/architecture.md#repack-phases``. Neighbours: ``listing`` and ``lp`` (which work on the
frozen problem), ``context``.
"""

from __future__ import annotations

from collections.abc import Sequence

from repack.cpsat.model import Fix
from repack.problem.classes import Assignment, Problem, freeze_above


class Frozen:
    """A lower tier's problem with the running pods of the tiers above frozen in place, and the
    maps between its assignments and the solve's."""

    def __init__(self, problem: Problem, tier: int, frozen: Problem) -> None:
        self.original = problem
        self.problem = frozen
        self.above = [c for c, cls in enumerate(problem.classes) if cls.priority > tier]

    def held(self, q: int) -> int:
        """The running pods at priority >= q that stay by the freeze."""
        return sum(
            self.original.classes[c].n_running
            for c in self.above
            if self.original.classes[c].priority >= q
        )

    def down(self, x: Assignment) -> Assignment | None:
        """``x`` without the frozen pods, or None when it moved one of them."""
        out = self._shifted(x, -1)
        return None if any(k < 0 for c in self.above for k in out[c]) else out

    def up(self, x: Assignment) -> Assignment:
        """``x`` with the frozen pods back where they run."""
        return self._shifted(x, 1)

    def _shifted(self, x: Assignment, sign: int) -> Assignment:
        out = [list(row) for row in x]
        for c in self.above:
            for n, k in enumerate(self.original.classes[c].current):
                out[c][n] += sign * k
        return out


def first_tier(fixes: Sequence[Fix]) -> bool:
    """Whether no tier above has settled its disruption: the phase's tier is the first."""
    return not any(f.kind == "disruption" for f in fixes)


class Freezes:
    """The freeze of the tier whose phases run now (made once per tier)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self._last: tuple[int, Frozen | None] | None = None

    def of(self, tier: int, fixes: Sequence[Fix]) -> Frozen | None:
        """The freeze of a phase of ``tier`` whose higher tiers may disrupt nothing (the last
        disruption fix before the phase covers every class above ``tier``), if it applies."""
        settled = [f for f in fixes if f.kind == "disruption"]
        if not settled or settled[-1].value != 0 or settled[-1].op == ">=":
            return None
        if self._last is None or self._last[0] != tier:
            frozen = freeze_above(self.problem, tier)
            self._last = (tier, None if frozen is None else Frozen(self.problem, tier, frozen))
        return self._last[1]

    def may_dive(self, tier: int, fixes: Sequence[Fix]) -> bool:
        """Whether a place phase's pattern LP may dive: the dive moves pods freely, so its
        packing cannot meet the disruption settled for a higher tier (and dives are not cheap);
        only the first tier dives, or a lower one whose higher tiers' pods are frozen."""
        return self.of(tier, fixes) is not None or first_tier(fixes)
