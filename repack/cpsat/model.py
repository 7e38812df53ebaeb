"""The two CP-SAT formulations of one solve phase.

``classes`` (the default): an integer x[c,n] per pod class and eligible node, stay[c,n] <=
min(x[c,n], current[c,n]) and per-class eviction counts, so identical pods are never told apart.
It adds redundant cluster-wide resource totals (an aggregate knapsack the LP and propagation use to
bound the placement objective) and, when the phase is symmetric, orders identical nodes by load.

``per-pod`` (the Priority Matters baseline): a boolean per pod and allowed node.

Both expose the same expressions (placed and disruption for every tier at or above the phase's),
take a class-count hint and return class counts, so the phase driver (``driver.search``) drives
either one.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ortools.sat.python import cp_model

from repack.cpsat import FORMULATIONS
from repack.problem.classes import EVICT_COST, MOVE_COST, Assignment, Problem


class Model(cp_model.CpModel):
    """A CpModel without the deprecated camelCase aliases, which ``CpModel.__init__`` attaches
    to every instance one by one (measured: ~0.3 ms per model, a large share of a
    large-neighbourhood search's small refills). If ortools renames that hook, this override
    is simply never called and models keep the aliases."""

    def _add_pre_pep8_methods(self) -> None:
        pass

    def copy(self) -> Model:
        """A copy of the model (variables keep their indices, so expressions carry over)."""
        out = Model()
        out.proto.copy_from(self.proto)
        out.rebuild_constant_map()
        return out


@dataclass(frozen=True)
class Fix:
    """A value settled by an earlier phase: ``kind(priority >= tier) op value``."""

    kind: Literal["placed", "disruption"]
    tier: int
    op: Literal["==", ">=", "<="]
    value: int


class PhaseModel:
    """A CP-SAT model over the classes with priority >= ``tier``."""

    def __init__(self, problem: Problem, tier: int) -> None:
        self.problem = problem
        self.tier = tier
        self.active = problem.active(tier)
        self.model = Model()
        self.placed: dict[int, cp_model.LinearExprT] = {}  # class -> placed pods
        self.disrupted: dict[int, cp_model.LinearExprT] = {}  # class -> 1*moves + 2*evictions

    def placed_ge(self, p: int) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.sum(
            [self.placed[c] for c in self.active if self.problem.classes[c].priority >= p]
        )

    def disruption_ge(self, p: int) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.sum(
            [self.disrupted[c] for c in self.active if self.problem.classes[c].priority >= p]
        )

    def add_fixes(self, fixes: Sequence[Fix]) -> None:
        for fix in fixes:
            expr = (
                self.placed_ge(fix.tier) if fix.kind == "placed" else self.disruption_ge(fix.tier)
            )
            if fix.op == "==":
                self.model.add(expr == fix.value)
            elif fix.op == ">=":
                self.model.add(expr >= fix.value)
            else:
                self.model.add(expr <= fix.value)

    def hint(self, x: Assignment) -> None:
        raise NotImplementedError

    def read(self, solver: cp_model.CpSolver) -> Assignment:
        raise NotImplementedError

    def break_symmetry(self) -> None:
        """Add symmetry-breaking constraints where the formulation has them."""

    def copy(self) -> PhaseModel:
        """The same model with its own constraint store: constraints and an objective added to
        the copy leave this one as it is. The variables and expressions are shared."""
        out = copy.copy(self)
        out.model = self.model.copy()
        return out


class ClassModel(PhaseModel):
    def __init__(self, problem: Problem, tier: int, symmetry: bool = False) -> None:
        super().__init__(problem, tier)
        m = self.model
        nodes = range(len(problem.node_names))
        resources = range(len(problem.resources))
        classes = problem.classes
        self.x: dict[tuple[int, int], cp_model.IntVar] = {}
        self.stay: dict[tuple[int, int], cp_model.IntVar] = {}
        evicted_of: dict[int, cp_model.IntVar] = {}
        self.evicted = evicted_of  # class -> its running pods left unplaced
        # per node, the (class, x, upper bound) on it in class order: the capacity rows and the
        # cardinality cuts below read these instead of scanning every class per node
        on_node: list[list[tuple[int, cp_model.IntVar, int]]] = [[] for _ in nodes]
        free = [[max(0, v) for v in row] for row in problem.capacity]
        for c in self.active:
            cls = classes[c]
            current, eligible = cls.current, cls.eligible
            needs = [(r, q) for r, q in enumerate(cls.requests) if q > 0]
            row: list[cp_model.IntVar] = []
            stays: list[cp_model.IntVar] = []
            for n in nodes:
                here = current[n]
                if n not in eligible:
                    if not here:
                        continue
                    ub = here  # problem.node_upper, inlined: this loop dominates the build
                else:
                    ub = here if problem.overloaded[n] else cls.total
                if not problem.overloaded[n]:
                    for r, q in needs:
                        ub = min(ub, free[n][r] // q)
                if ub <= 0 and not here:
                    continue
                var = m.new_int_var(0, max(ub, 0), f"x{c}_{n}")
                self.x[c, n] = var
                row.append(var)
                on_node[n].append((c, var, max(ub, 0)))
                if here:
                    s = m.new_int_var(0, min(here, max(ub, 0)), f"s{c}_{n}")
                    m.add(s <= var)
                    self.stay[c, n] = s
                    stays.append(s)
            total = cp_model.LinearExpr.sum(row)
            m.add(total <= cls.total)
            self.placed[c] = total
            if cls.n_running:
                evicted = m.new_int_var(0, cls.n_running, f"e{c}")
                m.add(evicted >= cls.n_running - total)
                staying = cp_model.LinearExpr.sum(stays)
                self.disrupted[c] = (
                    MOVE_COST * (cls.n_running - staying) + (EVICT_COST - MOVE_COST) * evicted
                )
                evicted_of[c] = evicted
            else:
                self.disrupted[c] = 0
        for n in nodes:
            if problem.overloaded[n]:
                continue  # only current pods may stay there (bounded above); load can only drop
            for r in resources:
                weighed = [c for c, _, _ in on_node[n] if classes[c].requests[r]]
                if weighed:
                    row = [var for c, var, _ in on_node[n] if classes[c].requests[r]]
                    coeffs = [classes[c].requests[r] for c in weighed]
                    m.add(
                        cp_model.LinearExpr.weighted_sum(row, coeffs)
                        <= max(0, problem.capacity[n][r])
                    )
        # Redundant cardinality cuts: at most k pods larger than 1/(k+1) of a node's room fit
        # on it. The LP relaxation of the capacity rows alone lets 1.8 pods of 55 % share a node.
        for n in nodes:
            if problem.overloaded[n]:
                continue
            for r in resources:
                cap = problem.capacity[n][r]
                for k in (1, 2, 3):
                    big = [
                        (var, ub)
                        for c, var, ub in on_node[n]
                        if classes[c].requests[r] * (k + 1) > cap
                    ]
                    if len(big) > 1 or (big and big[0][1] > k):
                        m.add(cp_model.LinearExpr.sum([var for var, _ in big]) <= k)
        # Redundant cluster-wide totals: an aggregate knapsack that bounds how many pods can be
        # placed at all, which lets the solver prove the placement phases optimal early.
        for r in range(len(problem.resources)):
            room = sum(
                max(0, problem.capacity[n][r])
                if not problem.overloaded[n]
                else sum(
                    problem.classes[c].requests[r] * problem.classes[c].current[n]
                    for c in self.active
                )
                for n in nodes
            )
            demand: list[cp_model.LinearExprT] = [
                problem.classes[c].requests[r] * self.placed[c]
                for c in self.active
                if problem.classes[c].requests[r]
            ]
            if demand:
                m.add(sum(demand) <= room)
        for pdb, budget in problem.pdb_budget.items():
            covered = [evicted_of[c] for c in evicted_of if pdb in problem.classes[c].pdbs]
            if covered:
                m.add(sum(covered) <= budget)
        self.symmetry_groups: list[list[int]] = []
        if symmetry:
            self.break_symmetry()

    def copy(self) -> PhaseModel:
        out = super().copy()
        assert isinstance(out, ClassModel)
        out.symmetry_groups = list(self.symmetry_groups)
        return out

    def break_symmetry(self) -> None:
        """Order identical nodes (same capacity, labels, taints, no current pods that matter to
        the objective) by their load of a weighted resource sum. Valid only in phases whose
        constraints do not depend on the current placement."""
        problem = self.problem
        groups: dict[tuple[object, ...], list[int]] = {}
        by_name = {node.name: node for node in problem.snapshot.nodes}
        for n, name in enumerate(problem.node_names):
            if problem.overloaded[n]:
                continue
            node = by_name[name]
            elig = tuple(
                (n in problem.classes[c].eligible)
                or -problem.classes[c].current[n]  # pods that may only stay where they are
                for c in self.active
            )
            key = (problem.capacity[n], tuple(sorted(node.labels.items())), node.taints, elig)
            groups.setdefault(key, []).append(n)
        weight = self._load_weights()
        for members in groups.values():
            if len(members) < 2:
                continue
            self.symmetry_groups.append(members)
            loads = []
            for n in members:
                here = [c for c in self.active if (c, n) in self.x]
                loads.append(
                    cp_model.LinearExpr.weighted_sum(
                        [self.x[c, n] for c in here], [weight[c] for c in here]
                    )
                )
            for a, b in zip(loads, loads[1:], strict=False):
                self.model.add(a >= b)

    def _load_weights(self) -> dict[int, int]:
        """Per active class, the integer weight of its pods in the load that orders nodes."""
        problem = self.problem
        totals = [
            max(1, sum(max(0, cap[r]) for cap in problem.capacity))
            for r in range(len(problem.resources))
        ]
        return {
            c: max(
                1,
                round(
                    1000
                    * sum(q / t for q, t in zip(problem.classes[c].requests, totals, strict=True))
                ),
            )
            for c in self.active
        }

    def symmetric_hint(self, x: Assignment) -> Assignment:
        """Permute the hint's columns inside each symmetry group to satisfy the ordering (by
        the same load the ordering constraints use)."""
        out = [list(row) for row in x]
        weight = self._load_weights()

        def load(n: int) -> int:
            return sum(weight[c] * x[c][n] for c in self.active)

        for members in self.symmetry_groups:
            order = sorted(members, key=lambda n: -load(n))
            for c in self.active:
                column = [x[c][n] for n in order]
                for n, v in zip(members, column, strict=True):
                    out[c][n] = v
        return out

    def hint(self, x: Assignment) -> None:
        self.model.clear_hints()
        if self.symmetry_groups:
            x = self.symmetric_hint(x)
        for (c, n), var in self.x.items():
            self.model.add_hint(var, x[c][n])
        for (c, n), var in self.stay.items():
            self.model.add_hint(var, min(x[c][n], self.problem.classes[c].current[n]))
        # a complete hint: CP-SAT takes it as a first solution at once instead of completing
        # it by search after presolve (measured: 0.2 s on 32 nodes)
        for c, var in self.evicted.items():
            self.model.add_hint(var, max(0, self.problem.classes[c].n_running - sum(x[c])))

    def read(self, solver: cp_model.CpSolver) -> Assignment:
        out = [[0] * len(self.problem.node_names) for _ in self.problem.classes]
        for (c, n), var in self.x.items():
            out[c][n] = int(solver.value(var))
        return out


class PerPodModel(PhaseModel):
    """One boolean per (pod, allowed node), as in the Priority Matters paper."""

    def __init__(self, problem: Problem, tier: int) -> None:
        super().__init__(problem, tier)
        m = self.model
        nodes = range(len(problem.node_names))
        # pods of class c: (current node index or None)
        self.b: dict[tuple[int, int, int], cp_model.IntVar] = {}  # (class, pod, node)
        self.pods: dict[int, list[int | None]] = {}
        evicted_by_pdb: dict[str, list[cp_model.LinearExprT]] = {}
        for c in self.active:
            cls = problem.classes[c]
            members: list[int | None] = [n for n in nodes for _ in cls.running[n]]
            members += [None] * len(cls.pending)
            self.pods[c] = members
            placed_terms = []
            disrupted_terms = []
            for j, cur in enumerate(members):
                allowed = [
                    n
                    for n in nodes
                    if (n in cls.eligible and not problem.overloaded[n]) or n == cur
                ]
                vars_j = []
                for n in allowed:
                    var = m.new_bool_var(f"b{c}_{j}_{n}")
                    self.b[c, j, n] = var
                    vars_j.append(var)
                placed_j = sum(vars_j)
                m.add(placed_j <= 1)
                placed_terms.append(placed_j)
                if cur is not None:
                    stay_j = self.b[c, j, cur]
                    # moved: placed and not staying (1); evicted: not placed (2)
                    disrupted_terms.append(
                        MOVE_COST * (placed_j - stay_j) + EVICT_COST * (1 - placed_j)
                    )
                    for pdb in cls.pdbs:
                        evicted_by_pdb.setdefault(pdb, []).append(1 - placed_j)
            self.placed[c] = sum(placed_terms)
            self.disrupted[c] = sum(disrupted_terms)
        on_node: dict[int, list[tuple[int, cp_model.IntVar]]] = {n: [] for n in nodes}
        for (c, _j, n), var in self.b.items():
            on_node[n].append((c, var))
        for n in nodes:
            if problem.overloaded[n]:
                continue
            for r in range(len(problem.resources)):
                terms = [
                    problem.classes[c].requests[r] * var
                    for c, var in on_node[n]
                    if problem.classes[c].requests[r]
                ]
                if terms:
                    m.add(sum(terms) <= max(0, problem.capacity[n][r]))
        for pdb, gone in evicted_by_pdb.items():
            m.add(sum(gone) <= problem.pdb_budget.get(pdb, 0))

    def hint(self, x: Assignment) -> None:
        self.model.clear_hints()
        chosen: dict[tuple[int, int], int | None] = {}
        for c in self.active:
            members = self.pods[c]
            slots = list(x[c])
            where: list[int | None] = [None] * len(members)
            for j, cur in enumerate(members):  # running pods stay where the counts allow
                if cur is not None and slots[cur] > 0:
                    slots[cur] -= 1
                    where[j] = cur
            free = [n for n, k in enumerate(slots) for _ in range(k)]
            for j in range(len(members)):
                if where[j] is None and free:
                    where[j] = free.pop(0)
            chosen.update({(c, j): w for j, w in enumerate(where)})
        for (c, j, n), var in self.b.items():
            self.model.add_hint(var, int(chosen[c, j] == n))

    def read(self, solver: cp_model.CpSolver) -> Assignment:
        out = [[0] * len(self.problem.node_names) for _ in self.problem.classes]
        for (c, _j, n), var in self.b.items():
            if solver.boolean_value(var):
                out[c][n] += 1
        return out


def build_phase_model(
    formulation: str, problem: Problem, tier: int, fixes: Sequence[Fix], symmetry: bool
) -> PhaseModel:
    model: PhaseModel
    if formulation == "classes":
        model = ClassModel(problem, tier, symmetry=symmetry)
    elif formulation == "per-pod":
        model = PerPodModel(problem, tier)
    else:
        raise ValueError(f"unknown formulation {formulation!r}; choose from {FORMULATIONS}")
    model.add_fixes(fixes)
    return model


class PhaseModels:
    """The phase models of one solve. A tier's model is built once; every phase of the tier
    gets a copy with its own fixes, cuts and objective (a copy costs a few milliseconds, a
    rebuild tens of them on 32 nodes). The result is the model ``build_phase_model`` builds."""

    def __init__(self, formulation: str, problem: Problem) -> None:
        if formulation not in FORMULATIONS:
            raise ValueError(f"unknown formulation {formulation!r}; choose from {FORMULATIONS}")
        self.formulation = formulation
        self.problem = problem
        self._base: PhaseModel | None = None  # the last tier's model, without fixes

    def variables(self, tier: int) -> int:
        """How many placement variables the tier's model has: one per class and eligible node
        (classes), one per pod and eligible node (per-pod). Building, copying and hinting the
        model cost time in proportion."""
        return sum(
            len(cls.eligible) * (1 if self.formulation == "classes" else cls.total)
            for cls in self.problem.classes
            if cls.priority >= tier
        )

    def build(self, tier: int, fixes: Sequence[Fix], symmetry: bool) -> PhaseModel:
        if self._base is None or self._base.tier != tier:
            self._base = build_phase_model(self.formulation, self.problem, tier, (), False)
        model = self._base.copy()
        if symmetry:
            model.break_symmetry()
        model.add_fixes(fixes)
        return model
