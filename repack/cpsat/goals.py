"""The balancing engine's CP-SAT model: one goal over class counts, moves against the current
placement, hard disruption bounds.

Movable pods with the same requests, use and eligible nodes form a class; x[c,n] counts the pods
of class c on node n and stay[c,n] <= min(x[c,n], current[c,n]) those that stay, so the moves are
Σ (pods − stays) and a node is touched (t_n) when a pod leaves or lands on it. Capacity holds on
every resource; a node that accepts no pods (labelled out, cordoned, or already over capacity)
may only keep or lose pods. The objective is lexicographic, (gain, −moves), as one weighted sum:
the goal's measure scaled to integers (``SCALE``) times (max moves + 1), minus the moves:

* balance: Σ over nodes and goal resources of |e_{n,r}|, e the node's relative fill of r minus
  its mean relative fill, weighted by its capacity share (``goals.balance_weights``);
* defragment: B <= the free share of every goal resource on one chosen node z_n (Σ z = 1);
* consolidate: e_n = 1 only on a node that could go and keeps no movable pod.

The integer coefficients round the measure; the caller compares results on the exact measure
(``goals.value``). See ``docs/architecture.md#balancing``. Neighbours: ``problem.goals`` (the
view), ``driver.balance`` (which builds, hints and solves it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from repack.cpsat.model import Model
from repack.problem.goals import GoalView, loads

SCALE = 100_000  # integer units per unit of the goal's measure


@dataclass
class GoalClass:
    req: tuple[int, ...]
    use: tuple[float, ...]
    eligible: frozenset[int]
    pods: list[int] = field(default_factory=list)  # movable pod indices, in view order


def classes_of(view: GoalView) -> list[GoalClass]:
    groups: dict[tuple[object, ...], GoalClass] = {}
    for p in range(len(view.keys)):
        sig = (view.req[p], view.use[p], view.eligible[p])
        if sig not in groups:
            groups[sig] = GoalClass(view.req[p], view.use[p], view.eligible[p])
        groups[sig].pods.append(p)
    return list(groups.values())


class GoalModel:
    def __init__(self, view: GoalView) -> None:
        self.view = view
        self.classes = classes_of(view)
        m = self.model = Model()
        nodes = range(view.nodes)
        self.current = [[0] * view.nodes for _ in self.classes]
        for c, cls in enumerate(self.classes):
            for p in cls.pods:
                self.current[c][view.home[p]] += 1
        load = loads(view, view.home)
        closed = [
            not view.open[n] or any(v > a for v, a in zip(load[n], view.alloc[n], strict=True))
            for n in nodes
        ]
        self.x: dict[tuple[int, int], cp_model.IntVar] = {}
        self.stay: dict[tuple[int, int], cp_model.IntVar] = {}
        self.ub: dict[cp_model.IntVar, int] = {}  # upper bounds, as built
        on_node: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in nodes]
        stays: list[cp_model.IntVar] = []
        for c, cls in enumerate(self.classes):
            row = []
            for n in sorted(cls.eligible):
                here = self.current[c][n]
                ub = here if closed[n] else len(cls.pods)
                if not closed[n]:
                    for r, need in enumerate(cls.req):
                        if need:
                            ub = min(ub, max(0, view.alloc[n][r] - view.fixed[n][r]) // need)
                ub = max(ub, here)
                if ub <= 0:
                    continue
                var = m.new_int_var(0, ub, f"x{c}_{n}")
                self.ub[var] = ub
                self.x[c, n] = var
                row.append(var)
                on_node[n].append((c, var))
                if here:
                    s = m.new_int_var(0, here, f"s{c}_{n}")
                    m.add(s <= var)
                    self.stay[c, n] = s
                    stays.append(s)
            m.add(cp_model.LinearExpr.sum(row) == len(cls.pods))
        for n in nodes:
            if closed[n] or not on_node[n]:
                continue
            for r in range(len(view.resources)):
                terms = [(var, self.classes[c].req[r]) for c, var in on_node[n]]
                terms = [(v, q) for v, q in terms if q]
                if terms:
                    m.add(
                        cp_model.LinearExpr.weighted_sum(
                            [v for v, _ in terms], [q for _, q in terms]
                        )
                        <= view.alloc[n][r] - view.fixed[n][r]
                    )
        total = len(view.keys)
        self.moves = total - cp_model.LinearExpr.sum(stays)
        limits = view.spec.limits
        m.add(self.moves <= limits.max_moves)
        touched = []
        for n in nodes:
            if not on_node[n]:
                continue
            here = sum(self.current[c][n] for c, _ in on_node[n])
            leave = here - cp_model.LinearExpr.sum(
                [self.stay[c, n] for c, _ in on_node[n] if (c, n) in self.stay]
            )
            arrive = cp_model.LinearExpr.sum([v for _, v in on_node[n]]) - (here - leave)
            t = m.new_bool_var(f"t{n}")
            bound = here + sum(self.ub[v] for _, v in on_node[n])
            m.add(leave + arrive <= bound * t)
            touched.append(t)
        m.add(cp_model.LinearExpr.sum(touched) <= limits.nodes_cap(view.nodes))
        self.on_node = on_node
        self.weight = limits.max_moves + 1
        gain = {"balance": self._balance, "defragment": self._defragment}.get(
            view.spec.goal, self._consolidate
        )()
        m.maximize(self.weight * gain - self.moves)

    def _node_expr(
        self, n: int, coef: Sequence[float], const: float
    ) -> tuple[cp_model.LinearExpr, int]:
        """Σ_c round(coef·x[c,n]) + round(const), and a bound on its absolute value."""
        vars_, coefs = [], []
        for c, var in self.on_node[n]:
            k = round(SCALE * coef[c])
            if k:
                vars_.append(var)
                coefs.append(k)
        base = round(SCALE * const)
        bound = abs(base) + sum(abs(k) * self.ub[v] for v, k in zip(vars_, coefs, strict=True))
        return cp_model.LinearExpr.weighted_sum(vars_, coefs) + base, bound

    def _balance(self) -> cp_model.LinearExpr:
        view, m = self.view, self.model
        w = view.balance_weights
        dims = len(view.measured)
        devs = []
        if dims < 2:
            return cp_model.LinearExpr.sum([])
        for n in range(view.nodes):
            has = [k for k in range(dims) if w[n][k] > 0]
            if not self.on_node[n] or len(has) < 2:
                continue  # no movable pod may be here: its imbalance is a constant
            for k in has:
                # e = (w_k use_k − mean_j w_j use_j) / R, linear in the counts
                def rel(u: Sequence[float], n: int = n, k: int = k, has: list[int] = has) -> float:
                    mean = sum(w[n][j] * u[j] for j in has) / len(has)
                    return (w[n][k] * u[k] - mean) / len(has)

                coef = [rel(cls.use) for cls in self.classes]
                expr, bound = self._node_expr(n, coef, rel(view.fixed_use[n]))
                dev = m.new_int_var(0, bound, f"d{n}_{k}")
                m.add(dev >= expr)
                m.add(dev >= -expr)
                devs.append(dev)
        return -cp_model.LinearExpr.sum(devs)

    def _defragment(self) -> cp_model.LinearExpr:
        view, m = self.view, self.model
        biggest = [max(row[r] for row in view.alloc) for r in view.measured]
        best = m.new_int_var(-SCALE, SCALE, "block")
        chosen = []
        for n in range(view.nodes):
            if not view.open[n]:
                continue
            z = m.new_bool_var(f"z{n}")
            chosen.append(z)
            for r, a in zip(view.measured, biggest, strict=True):
                if a <= 0:
                    continue
                coef = [-cls.req[r] / a for cls in self.classes]
                free = (view.alloc[n][r] - view.fixed[n][r]) / a
                expr, bound = self._node_expr(n, coef, free)
                m.add(best <= expr + (SCALE + bound) * (1 - z))
        if not chosen:
            m.add(best == 0)
        else:
            m.add(cp_model.LinearExpr.sum(chosen) == 1)
        return best

    def _consolidate(self) -> cp_model.LinearExpr:
        view, m = self.view, self.model
        gone = []
        for n in range(view.nodes):
            if not view.freeable[n]:
                continue
            e = m.new_bool_var(f"e{n}")
            here = [v for _, v in self.on_node[n]]
            if here:
                bound = sum(self.ub[v] for v in here)
                m.add(cp_model.LinearExpr.sum(here) <= bound * (1 - e))
            gone.append(e)
        return SCALE * cp_model.LinearExpr.sum(gone)

    def hint(self, where: Sequence[int]) -> None:
        counts = [[0] * self.view.nodes for _ in self.classes]
        index = {p: c for c, cls in enumerate(self.classes) for p in cls.pods}
        for p, n in enumerate(where):
            counts[index[p]][n] += 1
        for (c, n), var in self.x.items():
            self.model.add_hint(var, counts[c][n])
        for (c, n), var in self.stay.items():
            self.model.add_hint(var, min(counts[c][n], self.current[c][n]))

    def solve(self, seconds: float, workers: int, seed: int) -> tuple[str, list[int] | None]:
        """(status name, placement or None). Never longer than ``seconds``."""
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, seconds)
        solver.parameters.num_workers = workers or 0
        solver.parameters.random_seed = seed
        status = solver.solve(self.model)
        name = solver.status_name(status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return name, None
        return name, self._read(solver)

    def _read(self, solver: cp_model.CpSolver) -> list[int]:
        view = self.view
        where = list(view.home)
        for c, cls in enumerate(self.classes):
            counts = [0] * view.nodes
            for n in range(view.nodes):
                var = self.x.get((c, n))
                counts[n] = int(solver.value(var)) if var is not None else 0
            leavers: list[int] = []
            by_node: dict[int, list[int]] = {}
            for p in cls.pods:
                by_node.setdefault(view.home[p], []).append(p)
            for n, pods in sorted(by_node.items()):
                leavers += pods[counts[n] :]
            slots = [
                n for n in range(view.nodes) for _ in range(counts[n] - len(by_node.get(n, [])))
            ]
            for p, n in zip(leavers, slots, strict=True):
                where[p] = n
        return where
