"""The count-based view of a snapshot that both formulations solve on.

Identical movable or pending pods (same requests, priority, eligible nodes and PDBs) form a
*class*; a placement is an *assignment* ``x[c][n]`` = how many pods of class c sit on node n.
Immovable bound pods are fixed load. This module also holds what is computed on assignments:
feasibility, a tier's placed pods and disruption (``tier_value``, the one definition every part
uses), a greedy first-fit-decreasing completion, and the mapping from counts back to individual
pods (running pods stay where they can, then move, and only then are pending pods placed, so a
running pod is never displaced for an identical pending one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from repack.problem.eligibility import eligible
from repack.problem.snapshot import Pod, Snapshot

Assignment = list[list[int]]  # x[class][node]
MOVE_COST = 1
EVICT_COST = 2


@dataclass(frozen=True)
class PodClass:
    requests: tuple[int, ...]  # aligned with Problem.resources
    priority: int
    eligible: frozenset[int]  # node indices a pod of the class may be placed on
    pdbs: tuple[str, ...]
    running: tuple[tuple[str, ...], ...]  # per node: keys of the class's pods there, sorted
    pending: tuple[str, ...]  # keys of pending pods, sorted

    @cached_property
    def current(self) -> tuple[int, ...]:
        return tuple(len(p) for p in self.running)

    @cached_property
    def running_nodes(self) -> tuple[int, ...]:
        """The nodes where pods of the class run now (few: stays and disruption sum over these)."""
        return tuple(n for n, p in enumerate(self.running) if p)

    @cached_property
    def n_running(self) -> int:
        return sum(len(p) for p in self.running)

    @cached_property
    def total(self) -> int:
        return self.n_running + len(self.pending)

    def allowed(self, n: int) -> bool:
        return n in self.eligible or bool(self.running[n])

    def upper(self, n: int) -> int:
        """Most pods of this class node n may hold regardless of other classes."""
        if n not in self.eligible:
            return len(self.running[n])
        return self.total


@dataclass(frozen=True)
class Problem:
    snapshot: Snapshot
    resources: tuple[str, ...]
    node_names: tuple[str, ...]
    capacity: tuple[tuple[int, ...], ...]  # per node, per resource: allocatable - fixed load
    overloaded: tuple[bool, ...]  # fixed plus current load already exceeds allocatable
    classes: tuple[PodClass, ...]
    pdb_budget: dict[str, int]

    @property
    def tiers(self) -> list[int]:
        """Distinct priorities of the classes, highest first."""
        return sorted({c.priority for c in self.classes}, reverse=True)

    def active(self, tier: int) -> list[int]:
        """The classes a phase of ``tier`` works on: priority ``tier`` and above."""
        return [c for c, cls in enumerate(self.classes) if cls.priority >= tier]

    @cached_property
    def running_here(self) -> tuple[tuple[int, ...], ...]:
        """Per node, the classes with pods running there (a few of many: per-node sums over
        current pods read these instead of every class)."""
        return tuple(
            tuple(c for c, cls in enumerate(self.classes) if cls.current[n])
            for n in range(len(self.node_names))
        )

    def node_upper(self, c: int, n: int) -> int:
        """Upper bound of x[c][n] from capacity alone."""
        cls = self.classes[c]
        bound = cls.upper(n)
        if self.overloaded[n]:
            return min(bound, len(cls.running[n]))
        for r, need in enumerate(cls.requests):
            if need > 0:
                bound = min(bound, max(0, self.capacity[n][r]) // need)
        return bound


def _signature(
    pod: Pod,
    snapshot: Snapshot,
    resources: Sequence[str],
    seen: dict[tuple[object, ...], frozenset[int]],
) -> tuple[object, ...]:
    # eligibility depends only on the pod's selector, affinity and tolerations, which most pods
    # share with many others: ``seen`` keeps it per combination (a check per pod and node took
    # half a second on 256 nodes with eight pods per node)
    rules = (tuple(sorted(pod.node_selector.items())), pod.affinity, pod.tolerations)
    elig = seen.get(rules)
    if elig is None:
        elig = seen[rules] = frozenset(
            i for i, node in enumerate(snapshot.nodes) if eligible(pod, node)
        )
    reqs = tuple(pod.requests.get(r, 0) for r in resources)
    return (reqs, pod.priority, elig, pod.pdbs)


def build_problem(snapshot: Snapshot) -> Problem:
    resources = snapshot.resources
    names = tuple(n.name for n in snapshot.nodes)
    index = {name: i for i, name in enumerate(names)}
    alloc = [[node.allocatable.get(r, 0) for r in resources] for node in snapshot.nodes]
    fixed = [[0] * len(resources) for _ in names]
    movable_load = [[0] * len(resources) for _ in names]
    groups: dict[tuple[object, ...], tuple[list[list[str]], list[str]]] = {}
    seen: dict[tuple[object, ...], frozenset[int]] = {}
    for pod in sorted(snapshot.pods, key=lambda p: p.key):
        if pod.node is not None and pod.node not in index:
            continue  # bound to a node outside the snapshot: nothing to do with it
        reqs = [pod.requests.get(r, 0) for r in resources]
        if pod.node is not None and pod.immovable:
            n = index[pod.node]
            fixed[n] = [a + b for a, b in zip(fixed[n], reqs, strict=True)]
            continue
        sig = _signature(pod, snapshot, resources, seen)
        if sig not in groups:  # (not setdefault: its default would be built for every pod)
            groups[sig] = ([[] for _ in names], [])
        running, pending = groups[sig]
        if pod.node is None:
            pending.append(pod.key)
        else:
            n = index[pod.node]
            running[n].append(pod.key)
            movable_load[n] = [a + b for a, b in zip(movable_load[n], reqs, strict=True)]
    classes = tuple(
        PodClass(
            requests=sig[0],  # type: ignore[arg-type]
            priority=sig[1],  # type: ignore[arg-type]
            eligible=sig[2],  # type: ignore[arg-type]
            pdbs=sig[3],  # type: ignore[arg-type]
            running=tuple(tuple(p) for p in running),
            pending=tuple(pending),
        )
        for sig, (running, pending) in sorted(
            groups.items(),
            key=lambda kv: (-kv[0][1], kv[1][1] or [""], str(kv[0][0])),  # type: ignore[operator]
        )
    )
    capacity = tuple(
        tuple(a - f for a, f in zip(alloc[n], fixed[n], strict=True)) for n in range(len(names))
    )
    overloaded = tuple(
        any(m > c for m, c in zip(movable_load[n], capacity[n], strict=True))
        for n in range(len(names))
    )
    budget = {p.key: max(0, p.disruptions_allowed) for p in snapshot.pdbs}
    return Problem(snapshot, resources, names, capacity, overloaded, classes, budget)


# a node group's key: (free capacity per resource, eligibility of each class considered)
GroupKey = tuple[tuple[int, ...], tuple[bool, ...]]


def node_groups_by_key(
    problem: Problem, active: Sequence[int]
) -> tuple[dict[GroupKey, list[int]], list[int]]:
    """The nodes a per-node pattern describes, grouped by free capacity and by which of the
    ``active`` classes may be placed there (the nodes of a group are interchangeable for those
    classes), and the others: overloaded nodes and nodes holding a pod of an active class that
    may only stay where it is."""
    groups: dict[GroupKey, list[int]] = {}
    others: list[int] = []
    for n in range(len(problem.node_names)):
        if problem.overloaded[n] or any(
            problem.classes[c].current[n] and n not in problem.classes[c].eligible for c in active
        ):
            others.append(n)
            continue
        elig = tuple(n in problem.classes[c].eligible for c in active)
        groups.setdefault((problem.capacity[n], elig), []).append(n)
    return groups, others


def freeze_above(problem: Problem, tier: int) -> Problem | None:
    """The problem in which the running pods of the classes above ``tier`` stay where they are:
    their load leaves the nodes' free capacity and they are no longer running pods of their
    class (its pending pods remain, to be placed). Class indices are unchanged, so an
    assignment of it plus ``current_assignment`` of the classes above is one of ``problem``.
    None when a node is overloaded (its load is not a capacity there)."""
    if any(problem.overloaded):
        return None
    empty: tuple[tuple[str, ...], ...] = tuple(() for _ in problem.node_names)
    capacity = [list(row) for row in problem.capacity]
    classes = []
    for cls in problem.classes:
        if cls.priority <= tier:
            classes.append(cls)
            continue
        for n in cls.running_nodes:
            for r, need in enumerate(cls.requests):
                capacity[n][r] -= need * cls.current[n]
        classes.append(replace(cls, running=empty))
    return replace(
        problem,
        capacity=tuple(tuple(row) for row in capacity),
        classes=tuple(classes),
    )


def current_assignment(problem: Problem) -> Assignment:
    return [list(c.current) for c in problem.classes]


def empty_assignment(problem: Problem) -> Assignment:
    return [[0] * len(problem.node_names) for _ in problem.classes]


def loads(problem: Problem, x: Assignment) -> list[list[int]]:
    out = [[0] * len(problem.resources) for _ in problem.node_names]
    for c, cls in enumerate(problem.classes):
        needs = [(r, q) for r, q in enumerate(cls.requests) if q]
        for n, count in enumerate(x[c]):
            if count:
                row = out[n]
                for r, need in needs:
                    row[r] += need * count
    return out


def node_load(problem: Problem, x: Assignment, n: int) -> list[int]:
    """The load of node n alone (``loads(problem, x)[n]`` without the other nodes)."""
    out = [0] * len(problem.resources)
    for c, cls in enumerate(problem.classes):
        count = x[c][n]
        if count:
            for r, need in enumerate(cls.requests):
                out[r] += need * count
    return out


def evictions(cls: PodClass, row: Sequence[int]) -> int:
    return max(0, cls.n_running - sum(row))


def stays(cls: PodClass, row: Sequence[int]) -> int:
    current = cls.current
    return sum(min(row[n], current[n]) for n in cls.running_nodes)


def disruption(cls: PodClass, row: Sequence[int]) -> int:
    """Moves cost 1, evictions 2: (running - staying) + evicted."""
    return cls.n_running - stays(cls, row) + evictions(cls, row)


def leaving(problem: Problem, least: int, n: int, pattern: dict[int, int]) -> int:
    """The pods running on node n at priority >= ``least`` that a node offering ``pattern``
    (slots per class) cannot keep: those that leave it."""
    classes = problem.classes
    return sum(
        max(0, classes[c].current[n] - pattern.get(c, 0))
        for c in problem.running_here[n]
        if classes[c].priority >= least
    )


def feasible(problem: Problem, x: Assignment, only: Sequence[int] | None = None) -> bool:
    """Does ``x`` respect every constraint? ``only``: the classes in play (others are ignored,
    as in a phase model of a higher tier)."""
    chosen = range(len(problem.classes)) if only is None else list(dict.fromkeys(only))
    overloaded = problem.overloaded
    for c in chosen:
        cls = problem.classes[c]
        eligible, current = cls.eligible, cls.current
        placed = 0
        for n, count in enumerate(x[c]):
            if not count:
                continue
            if count < 0:
                return False
            # off its eligible nodes (or on an overloaded one) a class may only keep pods there
            if (n not in eligible or overloaded[n]) and count > current[n]:
                return False
            placed += count
        if placed > cls.total:
            return False
    for n, row in enumerate(loads(problem, x)):
        if not overloaded[n] and any(
            v > cap for v, cap in zip(row, problem.capacity[n], strict=True)
        ):
            return False
    used: dict[str, int] = {}
    for c in chosen:
        cls = problem.classes[c]
        for pdb in cls.pdbs:
            used[pdb] = used.get(pdb, 0) + evictions(cls, x[c])
    return all(v <= problem.pdb_budget.get(k, 0) for k, v in used.items())


def placed_at(problem: Problem, x: Assignment, tier: int) -> int:
    """The pods ``x`` places at priority >= ``tier``: what a place phase maximises."""
    return sum(sum(x[c]) for c, cls in enumerate(problem.classes) if cls.priority >= tier)


def disruption_at(problem: Problem, x: Assignment, tier: int) -> int:
    """The disruption of ``x`` at priority >= ``tier``: what a disrupt phase minimises."""
    return sum(
        disruption(cls, x[c]) for c, cls in enumerate(problem.classes) if cls.priority >= tier
    )


def tier_value(problem: Problem, x: Assignment, tier: int) -> tuple[int, int]:
    """(placed >= tier, -disruption >= tier): the tier's entries of the lexicographic outcome
    vector, larger is better (see ``docs/architecture.md#repack-problem``)."""
    return placed_at(problem, x, tier), -disruption_at(problem, x, tier)


def greedy_complete(problem: Problem, base: Assignment, fill: Sequence[int]) -> Assignment:
    """Add the classes ``fill`` to ``base``: running pods where they are if they still fit, then
    the rest first-fit-decreasing (largest relative size first, nodes in name order)."""
    x = [list(row) for row in base]
    for c in fill:
        x[c] = [0] * len(problem.node_names)
    load = loads(problem, x)
    caps = problem.capacity
    totals = [
        max(1, sum(max(0, caps[n][r]) for n in range(len(caps)))) for r in range(len(caps[0]))
    ]

    def fits(c: int, n: int) -> bool:
        if problem.overloaded[n]:
            return False
        reqs = problem.classes[c].requests
        return all(load[n][r] + reqs[r] <= caps[n][r] for r in range(len(reqs)))

    def put(c: int, n: int) -> None:
        x[c][n] += 1
        for r, need in enumerate(problem.classes[c].requests):
            load[n][r] += need

    leftover: list[int] = []
    for c in fill:
        cls = problem.classes[c]
        for n, count in enumerate(cls.current):
            for _ in range(count):
                if fits(c, n) or problem.overloaded[n]:
                    put(c, n)
                else:
                    leftover.append(c)
        leftover += [c] * (cls.total - cls.n_running)
    size = {
        c: sum(problem.classes[c].requests[r] / totals[r] for r in range(len(totals))) for c in fill
    }
    leftover.sort(key=lambda c: (-problem.classes[c].priority, -size[c], c))
    for c in leftover:
        cls = problem.classes[c]
        if sum(x[c]) >= cls.total:
            continue
        for n in sorted(cls.eligible):
            if fits(c, n):
                put(c, n)
                break
    return x


@dataclass(frozen=True)
class PodAssignment:
    """Individual pods for an assignment: who stays, moves, is evicted or placed."""

    stay: tuple[tuple[str, str], ...]  # (pod, node)
    moves: tuple[tuple[str, str, str], ...]  # (pod, from, to)
    evictions: tuple[tuple[str, str], ...]  # (pod, from)
    placements: tuple[tuple[str, str], ...]  # (pod, to)


def pods_for(problem: Problem, x: Assignment) -> PodAssignment:
    names = problem.node_names
    stay: list[tuple[str, str]] = []
    moves: list[tuple[str, str, str]] = []
    evicted: list[tuple[str, str]] = []
    placed: list[tuple[str, str]] = []
    for c, cls in enumerate(problem.classes):
        row = x[c]
        leavers: list[tuple[str, str]] = []
        slots: list[str] = []
        # pod lists only on the nodes where the class runs; elsewhere a count is compared (pod
        # lists on every node took half a second for 2 048 pods on 256 nodes)
        for n in cls.running_nodes:
            keys = cls.running[n]
            keep = min(row[n], len(keys))
            stay += [(k, names[n]) for k in keys[:keep]]
            leavers += [(k, names[n]) for k in keys[keep:]]
        for n, count in enumerate(row):
            if count > len(cls.running[n]):
                slots += [names[n]] * (count - len(cls.running[n]))
        for (key, src), dst in zip(leavers, slots, strict=False):
            moves.append((key, src, dst))
        evicted += leavers[len(slots) :]
        placed += list(zip(cls.pending, slots[len(leavers) :], strict=False))
    return PodAssignment(tuple(stay), tuple(moves), tuple(evicted), tuple(placed))
