"""What a balancing run is asked for: the goal, the disruption it may cause, what it must not touch.

The balancing engine (``docs/architecture.md#balancing``) rearranges running pods for one of three
goals the operator picks: ``balance`` (every node's mix of use close to the cluster's),
``defragment`` (the largest free block as large as possible) and ``consolidate`` (whole nodes
freed). A ``GoalSpec`` carries the goal, the disruption bounds of one run (``Limits``) and the
exclusion labels. Both the engine (``driver.balance``) and the independent checker read it, so it
holds no logic beyond the caps it implies. No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

GOALS = ("balance", "defragment", "consolidate")
# A node or pod carrying this label (any value but "false") is left out of balancing: nothing
# leaves or lands on such a node, such a pod stays where it runs.
EXCLUDE_LABEL = "carico.io/repack-exclude"
# The resources whose use the goals measure (the agents report these two); every resource still
# counts for fit.
GOAL_RESOURCES = ("cpu", "memory")
# The least gain worth a plan, per goal (docs/architecture.md#balancing): balance, a share of the
# current imbalance; defragment, a share of the largest node; consolidate, nodes freed.
DEFAULT_MIN_GAIN: Mapping[str, float] = {"balance": 0.05, "defragment": 0.05, "consolidate": 1.0}


@dataclass(frozen=True)
class Limits:
    """The disruption one run may cause. A pod moved counts once however far it goes; a node is
    touched when a pod leaves or lands on it. ``max_share``: of the cluster's nodes, rounded up
    and never below two (one move touches two nodes), like Karpenter's default budget of 10 %."""

    max_moves: int = 10
    max_nodes: int | None = None
    max_share: float = 0.1
    min_gain: float | None = None  # None: DEFAULT_MIN_GAIN of the goal

    def __post_init__(self) -> None:
        if self.max_moves < 0:
            raise ValueError("max_moves must be >= 0")
        if self.max_nodes is not None and self.max_nodes < 0:
            raise ValueError("max_nodes must be >= 0")
        if not 0 < self.max_share <= 1:
            raise ValueError("max_share must be in (0, 1]")
        if self.min_gain is not None and not self.min_gain >= 0:
            raise ValueError("min_gain must be >= 0")

    def nodes_cap(self, nodes: int) -> int:
        """The most nodes a plan may touch in a cluster of ``nodes`` nodes."""
        cap = max(2, math.ceil(self.max_share * nodes - 1e-9))
        return cap if self.max_nodes is None else min(cap, self.max_nodes)


@dataclass(frozen=True)
class GoalSpec:
    goal: str = "balance"
    limits: Limits = field(default_factory=Limits)
    exclude_label: str = EXCLUDE_LABEL

    def __post_init__(self) -> None:
        if self.goal not in GOALS:
            raise ValueError(f"unknown goal {self.goal!r}; choose from {GOALS}")

    @property
    def min_gain(self) -> float:
        given = self.limits.min_gain
        return DEFAULT_MIN_GAIN[self.goal] if given is None else given


def excluded(labels: Mapping[str, str], label: str) -> bool:
    """Does this node's or pod's label set opt it out of balancing?

    >>> excluded({"carico.io/repack-exclude": "true"}, EXCLUDE_LABEL)
    True
    >>> excluded({"carico.io/repack-exclude": "false"}, EXCLUDE_LABEL), excluded({}, EXCLUDE_LABEL)
    (False, False)
    """
    value = labels.get(label)
    return value is not None and value.lower() != "false"


def enough(goal: str, gain: float, before: float, min_gain: float) -> bool:
    """Is ``gain`` worth a plan? Balance asks for ``min_gain`` of the current imbalance
    ``before``, the other goals for ``min_gain`` itself; never for nothing.

    >>> enough("balance", 0.01, 0.4, 0.05), enough("balance", 0.03, 0.4, 0.05)
    (False, True)
    >>> enough("consolidate", 1.0, 0.0, 1.0), enough("defragment", 0.0, 0.2, 0.0)
    (True, False)
    """
    need = min_gain * before if goal == "balance" else min_gain
    return gain > 1e-9 and gain >= need - 1e-9
