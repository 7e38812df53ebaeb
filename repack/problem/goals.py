"""The balancing engine's view of a snapshot, and the measure of each goal on a placement.

A ``GoalView`` splits the bound pods into *movable* ones (a node index each: their placement) and
fixed load: immovable pods (``snapshot.Pod.immovable``: do-not-move, DaemonSet, static, bare,
excluded namespace, PDB without budget), pods labelled out (``goal_spec.EXCLUDE_LABEL``) and every
pod on a node labelled out. Pending pods are not the balancing engine's business and are left out.
Fit is always on requests (that is what kube-scheduler admits on); the *use* the balance goal
measures is the agents' measured footprint when one is given for a pod, else its requests.

The measures (``docs/architecture.md#balancing``), larger ``value`` is better:

* balance: ``imbalance`` = Σ over nodes of s(n) · (1/R) Σ_r |g_r(n) − mean_r g_r(n)|, with
  g_r(n) = use_r(n) / (F_r · cap_r(n)) the node's fill of resource r relative to the cluster's
  fill F_r, and s(n) the node's share of the cluster's capacity; 0 when every node's mix of use
  is the cluster's. value = −imbalance;
* defragment: the largest free block, max over nodes that accept pods of min_r free_r(n) / A_r
  (A_r the largest allocatable of r): 1.0 is a whole largest node free on every resource;
* consolidate: nodes that could go, those with no pod left but DaemonSet and static pods.

Pure, no I/O. Neighbours: ``goal_spec`` (the request), ``search.goal_greedy`` and
``cpsat.goals`` (which optimise these), ``checker`` (which recomputes them on its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from repack.problem.eligibility import eligible
from repack.problem.goal_spec import GOAL_RESOURCES, GoalSpec, excluded
from repack.problem.snapshot import Snapshot

Number = TypeVar("Number", int, float)

Usage = Mapping[str, Mapping[str, float]]  # pod key -> measured use per resource
# fixed pods that do not keep a node from going (they run on every node anyway)
PER_NODE = frozenset({"daemonset", "mirror"})


@dataclass(frozen=True)
class GoalView:
    snapshot: Snapshot
    spec: GoalSpec
    resources: tuple[str, ...]  # every resource, for fit
    measured: tuple[int, ...]  # indices into resources of the goal's resources
    names: tuple[str, ...]
    alloc: tuple[tuple[int, ...], ...]  # per node, per resource
    fixed: tuple[tuple[int, ...], ...]  # requests of the pods that stay, per node
    fixed_use: tuple[tuple[float, ...], ...]  # their use, per node and measured resource
    keys: tuple[str, ...]  # movable pods
    home: tuple[int, ...]  # the node each runs on now
    req: tuple[tuple[int, ...], ...]
    use: tuple[tuple[float, ...], ...]  # per movable pod and measured resource
    eligible: tuple[frozenset[int], ...]  # nodes each may land on
    open: tuple[bool, ...]  # the node accepts pods (not labelled out, not cordoned)
    freeable: tuple[bool, ...]  # the node could be emptied (no fixed pod but per-node ones)
    basis: str  # what the balance goal measures: "telemetry", "requests" or a mix

    @property
    def nodes(self) -> int:
        return len(self.names)

    @cached_property
    def balance_weights(self) -> tuple[tuple[float, ...], ...]:
        """b[n][k] = s(n) / (F_k cap_k(n)), so that s(n) g_k(n) = b[n][k] use_k(n)."""
        total_cap = [sum(row[r] for row in self.alloc) for r in self.measured]
        total_use = [
            sum(row[k] for row in self.fixed_use) + sum(u[k] for u in self.use)
            for k in range(len(self.measured))
        ]
        live = [k for k in range(len(self.measured)) if total_cap[k] > 0 and total_use[k] > 0]
        out = []
        for row in self.alloc:
            share = sum(row[self.measured[k]] / total_cap[k] for k in live) / max(1, len(live))
            weights = []
            for k, r in enumerate(self.measured):
                fill = total_use[k] / total_cap[k] if k in live else 0.0
                weights.append(share / (fill * row[r]) if k in live and row[r] > 0 else 0.0)
            out.append(tuple(weights))
        return tuple(out)


def build_view(snapshot: Snapshot, spec: GoalSpec, usage: Usage | None = None) -> GoalView:
    resources = snapshot.resources
    measured = tuple(resources.index(r) for r in GOAL_RESOURCES if r in resources)
    names = tuple(n.name for n in snapshot.nodes)
    index = {name: i for i, name in enumerate(names)}
    out_nodes = {i for i, n in enumerate(snapshot.nodes) if excluded(n.labels, spec.exclude_label)}
    alloc = [tuple(n.allocatable.get(r, 0) for r in resources) for n in snapshot.nodes]
    fixed = [[0] * len(resources) for _ in names]
    fixed_use = [[0.0] * len(measured) for _ in names]
    pinned = set(out_nodes)
    keys, home, req, use, elig = [], [], [], [], []
    usage = usage or {}
    counted = measured_pods = 0
    for pod in sorted(snapshot.pods, key=lambda p: p.key):
        if pod.node is None or pod.node not in index:
            continue
        n = index[pod.node]
        reqs = tuple(pod.requests.get(r, 0) for r in resources)
        got = usage.get(pod.key)
        counted += 1
        measured_pods += got is not None
        uses = tuple(
            float(got[resources[r]]) if got and resources[r] in got else float(reqs[r])
            for r in measured
        )
        if pod.immovable or n in out_nodes or excluded(pod.labels, spec.exclude_label):
            fixed[n] = [a + b for a, b in zip(fixed[n], reqs, strict=True)]
            fixed_use[n] = [a + b for a, b in zip(fixed_use[n], uses, strict=True)]
            if pod.immovable not in PER_NODE:
                pinned.add(n)
            continue
        keys.append(pod.key)
        home.append(n)
        req.append(reqs)
        use.append(uses)
        elig.append(
            frozenset(
                i
                for i, node in enumerate(snapshot.nodes)
                if i not in out_nodes and (i == n or eligible(pod, node))
            )
        )
    if spec.goal != "balance" or not measured_pods:
        basis = "requests"
    elif measured_pods == counted:
        basis = "telemetry"
    else:
        basis = f"telemetry for {measured_pods} of {counted} pods, requests for the rest"
    return GoalView(
        snapshot=snapshot,
        spec=spec,
        resources=resources,
        measured=measured,
        names=names,
        alloc=tuple(alloc),
        fixed=tuple(tuple(row) for row in fixed),
        fixed_use=tuple(tuple(row) for row in fixed_use),
        keys=tuple(keys),
        home=tuple(home),
        req=tuple(req),
        use=tuple(use),
        eligible=tuple(elig),
        open=tuple(
            i not in out_nodes and not n.unschedulable for i, n in enumerate(snapshot.nodes)
        ),
        freeable=tuple(i not in pinned for i in range(len(names))),
        basis=basis,
    )


def _placed(
    fixed: Sequence[Sequence[Number]], per_pod: Sequence[Sequence[Number]], where: Sequence[int]
) -> list[list[Number]]:
    """Per node, ``fixed`` plus the rows of the movable pods ``where`` puts on it."""
    out = [list(row) for row in fixed]
    for p, n in enumerate(where):
        row = out[n]
        for r, v in enumerate(per_pod[p]):
            row[r] += v
    return out


def loads(view: GoalView, where: Sequence[int]) -> list[list[int]]:
    """Requests per node and resource with the movable pods on ``where``."""
    return _placed(view.fixed, view.req, where)


def uses(view: GoalView, where: Sequence[int]) -> list[list[float]]:
    """Use per node and measured resource with the movable pods on ``where``."""
    return _placed(view.fixed_use, view.use, where)


def node_imbalance(weights: Sequence[float], use: Sequence[float]) -> float:
    """One node's s(n) · (1/R) Σ_r |g_r − mean g|, over the resources it has (weight > 0)."""
    rel = [w * u for w, u in zip(weights, use, strict=True) if w > 0]
    if len(rel) < 2:
        return 0.0
    mean = sum(rel) / len(rel)
    return sum(abs(g - mean) for g in rel) / len(rel)


def imbalance(view: GoalView, where: Sequence[int]) -> float:
    w = view.balance_weights
    return sum(node_imbalance(w[n], row) for n, row in enumerate(uses(view, where)))


def largest_free(view: GoalView, where: Sequence[int]) -> dict[str, int]:
    """Per goal resource, the most of it free on one node that accepts pods."""
    load = loads(view, where)
    out = {}
    for r in view.measured:
        frees = [view.alloc[n][r] - load[n][r] for n in range(view.nodes) if view.open[n]]
        out[view.resources[r]] = max(frees, default=0)
    return out


def block(view: GoalView, where: Sequence[int]) -> float:
    """The largest free block: max over open nodes of min_r free_r(n) / A_r."""
    load = loads(view, where)
    biggest = [max((row[r] for row in view.alloc), default=0) for r in view.measured]
    best = 0.0
    for n in range(view.nodes):
        if not view.open[n]:
            continue
        shares = [
            (view.alloc[n][r] - load[n][r]) / a
            for r, a in zip(view.measured, biggest, strict=True)
            if a > 0
        ]
        best = max(best, min(shares, default=0.0))
    return best


def freed(view: GoalView, where: Sequence[int]) -> list[str]:
    """The nodes that could go: freeable and with no movable pod left."""
    busy = set(where)
    return [name for n, name in enumerate(view.names) if view.freeable[n] and n not in busy]


def value(view: GoalView, where: Sequence[int]) -> float:
    """The goal's measure, larger is better."""
    goal = view.spec.goal
    if goal == "balance":
        return -imbalance(view, where)
    if goal == "defragment":
        return block(view, where)
    return float(len(freed(view, where)))


def moved(view: GoalView, where: Sequence[int]) -> int:
    return sum(1 for p, n in enumerate(where) if n != view.home[p])


def touched(view: GoalView, where: Sequence[int]) -> set[int]:
    out: set[int] = set()
    for p, n in enumerate(where):
        if n != view.home[p]:
            out.update((n, view.home[p]))
    return out


def fits(view: GoalView, where: Sequence[int]) -> bool:
    """Every node that receives a pod has room for its load on every resource."""
    load = loads(view, where)
    receiving = {n for p, n in enumerate(where) if n != view.home[p]}
    return all(
        all(v <= a for v, a in zip(load[n], view.alloc[n], strict=True)) for n in receiving
    ) and all(n in view.eligible[p] for p, n in enumerate(where))


def within(view: GoalView, where: Sequence[int]) -> bool:
    """The placement respects the disruption bounds of the run."""
    limits = view.spec.limits
    return moved(view, where) <= limits.max_moves and len(touched(view, where)) <= (
        limits.nodes_cap(view.nodes)
    )
