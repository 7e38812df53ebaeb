"""Builders of small kubectl-style objects and snapshots for the repacker's unit and integration
tests (``tests/support`` is on the import path through pytest's ``pythonpath`` option)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from repack.problem.classes import (
    Assignment,
    Problem,
    empty_assignment,
    feasible,
    stays,
    tier_value,
)
from repack.problem.snapshot import Node, Pod, Snapshot
from repack.search.heuristics import best_start

MB = 1_000_000


def node_obj(
    name: str,
    cpu: str = "1000m",
    memory: str = "2G",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}},
    }


def pod_obj(
    name: str,
    cpu: str,
    memory: str,
    node: str | None = None,
    namespace: str = "default",
    owner: tuple[str, str] | None = ("ReplicaSet", "rs"),
    priority: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    body: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        "priority": priority,
        **(spec or {}),
    }
    if node:
        body["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": body,
        "status": {"phase": "Running" if node else "Pending"},
    }


def kube_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def fragmentation_list() -> dict[str, Any]:
    """The fragmentation article's example: three nodes of 1000m / 2 GB, nine ReplicaSet pods
    leaving 600m / 1200 MB free in total but no node with both 300m and 600 MB, and a pending
    300m / 600 MB pod. (The article gives only the totals; the per-pod requests are ours.)"""
    running = {
        "node-a": [("300m", "700M"), ("200m", "600M"), ("200m", "600M")],
        "node-b": [("400m", "500M"), ("200m", "400M"), ("200m", "400M")],
        "node-c": [("300m", "600M"), ("300m", "500M"), ("300m", "500M")],
    }
    items = [node_obj(n) for n in running]
    for node, pods in running.items():
        for i, (cpu, mem) in enumerate(pods):
            items.append(
                pod_obj(f"{node}-p{i}", cpu, mem, node=node, owner=("ReplicaSet", f"rs-{node}-{i}"))
            )
    items.append(pod_obj("pending", "300m", "600M", owner=("ReplicaSet", "rs-new")))
    return kube_list(*items)


def simple_snapshot(
    nodes: list[tuple[str, int, int]],
    pods: list[tuple[str, int, int, str | None, int]],
) -> Snapshot:
    """Nodes (name, millicores, bytes) and movable pods (name, millicores, bytes, node,
    priority)."""
    return Snapshot(
        tuple(Node(n, {"cpu": c, "memory": m, "pods": 110}) for n, c, m in nodes),
        tuple(
            Pod(
                "default",
                name,
                {"cpu": c, "memory": m, "pods": 1},
                prio,
                node,
                owner="ReplicaSet/x",
            )
            for name, c, m, node, prio in pods
        ),
    )


def lowest_tier_start(problem: Problem) -> tuple[int, Assignment]:
    """The lowest tier and its best start below the best start of the highest tier."""
    top, low = problem.tiers[0], problem.tiers[-1]
    higher, _ = best_start(problem, empty_assignment(problem), top)
    x, ok = best_start(problem, higher, low)
    assert ok
    return low, x


def assert_higher_tiers_kept(problem: Problem, x: Assignment, y: Assignment, tier: int) -> None:
    """The values fixed for the tiers above ``tier`` cannot have changed from x to y: each of
    their classes has the same placed count and the same pods staying on every node."""
    for c, cls in enumerate(problem.classes):
        if cls.priority > tier:
            assert sum(y[c]) == sum(x[c])
            assert stays(cls, y[c]) == stays(cls, x[c])
            assert [min(a, b) for a, b in zip(y[c], cls.current, strict=True)] == [
                min(a, b) for a, b in zip(x[c], cls.current, strict=True)
            ]


def assert_no_worse(problem: Problem, x: Assignment, y: Assignment, tier: int) -> None:
    """y, a search's result from x, is valid for the tier, at least as good there, and leaves
    the values fixed for the tiers above as they were."""
    assert feasible(problem, y, problem.active(tier))
    assert tier_value(problem, y, tier) >= tier_value(problem, x, tier)
    assert_higher_tiers_kept(problem, x, y, tier)


def ticks(step: float = 1.0) -> Callable[[], float]:
    """A clock that advances by ``step`` per reading: a search then runs a fixed number of
    iterations (clock readings) whatever the machine load (LNS sub-solves keep their own small
    wall limit)."""
    counter = itertools.count()
    return lambda: next(counter) * step
