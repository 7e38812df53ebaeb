"""Benchmark instances generated the way the Priority Matters paper did (seed 000, §Evaluation).

Identical nodes; ReplicaSets of 1–4 replicas whose cpu (100m–1000m) and memory (100–1000 MB) are
drawn uniformly per ReplicaSet, with a uniform priority among K tiers; about ``pods_per_node`` pods
per node in total; node capacity per resource = max(largest pod, ceil(total request / target usage /
nodes)). The ReplicaSets arrive one after another and are placed by an emulation of the default
kube-scheduler (NodeResourcesFit filter, LeastAllocated + BalancedAllocation scores with weight 1,
ties broken by node name, no preemption). An instance is kept only if some pods stay pending.
Pure: the random source is seeded from the parameters.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from repack.problem.snapshot import Node, Pod, Snapshot

MB = 1_000_000


@dataclass(frozen=True)
class Cell:
    nodes: int
    pods_per_node: int
    usage: int  # percent
    tiers: int

    @property
    def name(self) -> str:
        return f"n{self.nodes}-ppn{self.pods_per_node}-u{self.usage}-k{self.tiers}"


def _score(cap: tuple[int, int], used: tuple[int, int], req: tuple[int, int]) -> float:
    """kube-scheduler's LeastAllocated + BalancedAllocation for cpu and memory (0..200)."""
    frac = [(u + r) / c for u, r, c in zip(used, req, cap, strict=True)]
    least = sum((1 - f) * 100 for f in frac) / 2
    balanced = (1 - abs(frac[0] - frac[1]) / 2) * 100  # std of two values = |a - b| / 2
    return least + balanced


def generate(cell: Cell, seed: int) -> Snapshot:
    """One instance (it may have no pending pod; see ``instances``)."""
    rng = random.Random(f"{cell.name}-{seed}")
    total = cell.nodes * cell.pods_per_node
    sets: list[tuple[int, int, int, int]] = []  # (replicas, millicores, bytes, priority)
    count = 0
    while count < total:
        replicas = min(rng.randint(1, 4), total - count)
        cpu = rng.randint(100, 1000)
        mem = rng.randint(100, 1000) * MB
        prio = rng.randrange(cell.tiers) * 100
        sets.append((replicas, cpu, mem, prio))
        count += replicas
    caps = []
    for r in (1, 2):
        demand = sum(s[0] * s[r] for s in sets)
        largest = max(s[r] for s in sets)
        caps.append(max(largest, math.ceil(demand * 100 / cell.usage / cell.nodes)))
    cap = (caps[0], caps[1])
    names = [f"node-{i:02d}" for i in range(cell.nodes)]
    used = {n: (0, 0) for n in names}
    pods: list[Pod] = []
    for i, (replicas, cpu, mem, prio) in enumerate(sets):
        owner = f"ReplicaSet/rs-{i:03d}"
        for j in range(replicas):
            fits = [n for n in names if used[n][0] + cpu <= cap[0] and used[n][1] + mem <= cap[1]]
            target = None
            if fits:
                # highest score; max() keeps the first of equals, and names are sorted
                target = max(fits, key=lambda n: _score(cap, used[n], (cpu, mem)))
                used[target] = (used[target][0] + cpu, used[target][1] + mem)
            pods.append(
                Pod(
                    "default",
                    f"rs-{i:03d}-{j}",
                    {"cpu": cpu, "memory": mem, "pods": 1},
                    prio,
                    target,
                    uid=f"{cell.name}-{seed}-{i}-{j}",
                    owner=owner,
                )
            )
    nodes = tuple(Node(n, {"cpu": cap[0], "memory": cap[1], "pods": 110}) for n in names)
    return Snapshot(nodes, tuple(pods))


def instances(cell: Cell, count: int, max_tries: int = 1000) -> list[tuple[int, Snapshot]]:
    """The first ``count`` seeds of ``cell`` whose default placement leaves pods pending."""
    out = []
    for seed in range(max_tries):
        snap = generate(cell, seed)
        if any(p.pending for p in snap.pods):
            out.append((seed, snap))
            if len(out) == count:
                break
    return out
