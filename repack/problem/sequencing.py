"""Order a plan's actions so that no node is ever over capacity on the way.

Evictions go first (they only free room). Then, repeatedly, the first move or placement whose
target has room right now is carried out; a move frees its source as it lands. When nothing fits
(a cycle of moves with no free room), one move is split: its pod is evicted first and lands later.
That temporary disruption is taken only from a pod whose PDBs still have budget after the plan's
own evictions and the other pods already waiting to land. If no such pod exists the plan cannot be
executed safely and ``SequencingError`` is raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from repack.problem.plan import Eviction, Move, Placement, Step
from repack.problem.snapshot import Pod, Snapshot


class SequencingError(RuntimeError):
    """No safe order exists for the plan."""


def _fits(load: Mapping[str, int], need: Mapping[str, int], alloc: Mapping[str, int]) -> bool:
    return all(load.get(r, 0) + v <= alloc.get(r, 0) for r, v in need.items() if v)


def _shift(load: dict[str, int], need: Mapping[str, int], sign: int) -> None:
    for r, v in need.items():
        load[r] = load.get(r, 0) + sign * v


def sequence(
    snapshot: Snapshot,
    moves: Sequence[Move],
    placements: Sequence[Placement],
    evictions: Sequence[Eviction],
) -> tuple[Step, ...]:
    pods = {p.key: p for p in snapshot.pods}
    alloc = {n.name: n.allocatable for n in snapshot.nodes}
    load: dict[str, dict[str, int]] = {n.name: {} for n in snapshot.nodes}
    for pod in snapshot.pods:
        if pod.node in load:
            _shift(load[pod.node], pod.requests, +1)
    budget = {p.key: p.disruptions_allowed for p in snapshot.pdbs}
    steps: list[Step] = []
    for e in evictions:
        _shift(load[e.from_node], pods[e.pod].requests, -1)
        steps.append(Step("evict", e.pod, e.from_node, None))
        for pdb in pods[e.pod].pdbs:
            budget[pdb] = budget.get(pdb, 0) - 1
    # (action, pod, from, to); "move" becomes "land" once its pod was evicted first
    todo: list[tuple[str, str, str | None, str]] = [
        ("move", m.pod, m.from_node, m.to_node) for m in moves
    ]
    todo += [("place", p.pod, None, p.to_node) for p in placements]
    while todo:
        for i, (action, key, src, dst) in enumerate(todo):
            need = pods[key].requests
            if _fits(load[dst], need, alloc[dst]):
                if action == "move" and src is not None:
                    _shift(load[src], need, -1)
                _shift(load[dst], need, +1)
                if action == "land":
                    for pdb in pods[key].pdbs:
                        budget[pdb] += 1
                steps.append(Step(action, key, src, dst))
                del todo[i]
                break
        else:
            _break_cycle(todo, pods, load, budget, steps)
    return tuple(steps)


def _break_cycle(
    todo: list[tuple[str, str, str | None, str]],
    pods: Mapping[str, Pod],
    load: dict[str, dict[str, int]],
    budget: dict[str, int],
    steps: list[Step],
) -> None:
    candidates = []
    for i, (action, key, src, _dst) in enumerate(todo):
        pod = pods[key]
        if action != "move" or src is None:
            continue
        if all(budget.get(pdb, 0) >= 1 for pdb in pod.pdbs):
            # prefer a pod whose node another waiting step needs, then the one holding most cpu
            wanted = any(d == src for _, _, _, d in todo)
            candidates.append((not wanted, -pod.requests.get("cpu", 0), key, i))
    if not candidates:
        raise SequencingError(
            "a cycle of moves has no free room and no pod in it may be evicted first "
            "(their PodDisruptionBudgets allow no further disruption)"
        )
    *_, i = min(candidates)
    action, key, src, dst = todo[i]
    pod = pods[key]
    assert src is not None
    _shift(load[src], pod.requests, -1)
    for pdb in pod.pdbs:
        budget[pdb] -= 1
    steps.append(Step("evict-first", key, src, dst))
    todo[i] = ("land", key, None, dst)
