"""The state of the swap search for the compiled kernel (``swap_kernel``): counts per (class,
node) of the classes in play on the nodes that are not overloaded, the nodes' loads, the pods
pinned where they run, the breakout weights, the tabu list and the random draws.

``SwapState`` wraps the kernel's calls: ``advance`` (steps of the search), ``insert`` (one more
unplaced pod where it overloads least), ``undo_rounds`` (the iterated undoing of moves) and
``chain`` (another chain from the same counts). See ``docs/architecture.md#repack-phases``.
Neighbours: ``swap_search`` (which drives it), ``swap_kernel``.
"""

from __future__ import annotations

import copy

import numpy as np

from repack.problem.classes import Assignment, Problem, loads
from repack.search import swap_kernel as kernel

# ``undo_rounds``: most pods sent back per round, and the steps a repair may take (measured with
# ``swap_search.UNDO_MU``: 5 and 8 pods did no better than 3; repairs of 50 steps left more
# moves than 100)
KICKS = 3
REPAIR_STEPS = 100


class SwapState:
    """The swap search's state (see the module's docstring)."""

    def __init__(
        self, problem: Problem, x: Assignment, tier: int, seed: int, mu: float, scaled: bool
    ) -> None:
        self.mu, self.scaled = mu, scaled
        self.nodes = [n for n in range(len(problem.node_names)) if not problem.overloaded[n]]
        self.classes = problem.active(tier)
        cls = [problem.classes[c] for c in self.classes]
        n_res = len(problem.resources)
        shape = (len(cls), len(self.nodes))
        self.demand = np.array([k.requests for k in cls], dtype=np.int64).reshape(-1, n_res)
        counts = np.array([[x[c][n] for n in self.nodes] for c in self.classes], dtype=np.int64)
        self.counts = counts.reshape(shape)
        self.current = np.array(
            [[k.current[n] for n in self.nodes] for k in cls], dtype=np.int64
        ).reshape(shape)
        self.eligible = np.array(
            [[n in k.eligible for n in self.nodes] for k in cls], dtype=bool
        ).reshape(shape)
        self.own = np.array([k.priority == tier for k in cls], dtype=bool)
        # pods on the nodes left alone count as placed; these are the rest
        elsewhere = np.array([sum(x[c]) for c in self.classes], dtype=np.int64)
        elsewhere = elsewhere - self.counts.sum(axis=1)
        self.running = np.array([k.n_running for k in cls], dtype=np.int64) - elsewhere
        self.total = np.array([k.total for k in cls], dtype=np.int64) - elsewhere
        # a class with a disruption budget may not lose running pods to eviction here (the
        # budget is checked at the end; trading such pods out would mostly be wasted)
        self.may_leave = self.own & np.array([not k.pdbs for k in cls], dtype=bool)
        # what is left of each node for the classes in play (lower tiers are not in play)
        in_play = set(self.classes)
        others = [[0] * len(row) if c in in_play else row for c, row in enumerate(x)]
        fixed = np.array(loads(problem, others), dtype=np.int64).reshape(-1, n_res)
        capacity = np.array([problem.capacity[n] for n in self.nodes], dtype=np.int64)
        self.capacity = capacity.reshape(-1, n_res) - fixed[self.nodes]
        # overload in typical requests: each resource's excess over its mean request
        typical = np.maximum(1.0, self.demand.mean(axis=0)) if len(cls) else np.ones(n_res)
        self.scale = 1.0 / typical
        self.load = np.zeros((len(self.nodes), n_res), dtype=np.int64)
        self.pinned = np.zeros(shape, dtype=np.int64)
        self.weight = np.ones((len(self.nodes), n_res))
        self.tabu = np.zeros(shape, dtype=np.int64)
        self.meta = np.array([0, kernel.seed_state(seed)], dtype=np.int64)
        # the arrays as the kernel takes them (``swap_kernel.FIXED`` and ``STATE``)
        self.fixed = (
            self.demand,
            self.capacity,
            self.current,
            self.eligible,
            self.own,
            self.may_leave,
            self.running,
            self.total,
            self.scale,
        )
        self.state = (self.counts, self.load, self.pinned, self.weight, self.tabu, self.meta)
        kernel.reset(self.fixed, self.state)

    def chain(self, seed: int) -> SwapState:
        """Another chain from the same counts: the fixed arrays shared, the mutable ones copied,
        its own random draws."""
        other = copy.copy(self)
        other.counts, other.load = self.counts.copy(), self.load.copy()
        other.pinned, other.weight = self.pinned.copy(), self.weight.copy()
        other.tabu, other.meta = self.tabu.copy(), self.meta.copy()
        other.meta[kernel.RANDOM] = kernel.seed_state(seed)
        other.state = (other.counts, other.load, other.pinned, other.weight, other.tabu, other.meta)
        return other

    def fits(self) -> bool:
        return bool(kernel.fits(self.load, self.capacity))

    def assignment(self, x: Assignment) -> Assignment:
        out = np.array(x, dtype=np.int64).reshape(len(x), -1)
        out[np.ix_(self.classes, self.nodes)] = self.counts
        rows: Assignment = out.tolist()
        return rows

    def insert(self) -> bool:
        return bool(kernel.insert(self.fixed, self.state, self.mu, self.scaled))

    def advance(self, budget: int) -> tuple[int, int]:
        outcome, taken = kernel.advance(self.fixed, self.state, self.mu, self.scaled, budget)
        return int(outcome), int(taken)

    def undo_rounds(self, best: np.ndarray, cost: int, target: int, rounds: int) -> tuple[int, int]:
        done, cost = kernel.undo_rounds(
            self.fixed, self.state, self.mu, best, cost, target, rounds, KICKS, REPAIR_STEPS
        )
        return int(done), int(cost)
