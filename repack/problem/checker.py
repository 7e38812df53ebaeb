"""An independent check of a plan against the snapshot it was made for.

It shares only the snapshot types with the solver: node eligibility, loads, the outcome vector and
step simulation are re-implemented here from the pods themselves, so that a bug in the model, in
the count-to-pod mapping or in sequencing shows up as a rejected plan rather than as a bad
eviction. ``check`` returns the list of problems; an empty list means the plan is valid.
``check_goal`` does the same for the balancing engine's plans, recomputing their goal's measure.
"""

from __future__ import annotations

from collections.abc import Mapping

from repack.problem.goal_spec import GOAL_RESOURCES, GoalSpec, enough, excluded
from repack.problem.plan import Plan
from repack.problem.snapshot import Node, Pod, Snapshot, Taint

_COSTS = {"move": 1, "evict": 2}


def _label_ok(pod: Pod, node: Node) -> bool:
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if pod.affinity is None:
        return True
    for term in pod.affinity:
        ok = bool(term)
        for req in term:
            have = (
                (node.name if req.key == "metadata.name" else None)
                if req.field
                else node.labels.get(req.key)
            )
            op = req.operator
            if op == "In":
                ok &= have in req.values
            elif op == "NotIn":
                ok &= have not in req.values
            elif op == "Exists":
                ok &= have is not None
            elif op == "DoesNotExist":
                ok &= have is None
            else:
                try:
                    a, b = int(have or ""), int(req.values[0])
                except (ValueError, IndexError):
                    ok = False
                    continue
                ok &= a > b if op == "Gt" else a < b
        if ok:
            return True
    return False


def _taints_ok(pod: Pod, node: Node) -> bool:
    taints = [t for t in node.taints if t.effect in ("NoSchedule", "NoExecute")]
    if node.unschedulable:
        taints.append(Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"))
    for taint in taints:
        tolerated = False
        for tol in pod.tolerations:
            effect_ok = tol.effect in ("", taint.effect)
            if tol.operator == "Exists":
                key_ok = tol.key in ("", taint.key)
            else:
                key_ok = tol.key == taint.key and tol.value == taint.value
            tolerated |= effect_ok and key_ok
        if not tolerated:
            return False
    return True


def may_run(pod: Pod, node: Node) -> bool:
    return _label_ok(pod, node) and _taints_ok(pod, node)


def _over(load: Mapping[str, int], node: Node) -> list[str]:
    return [r for r, v in load.items() if v > node.allocatable.get(r, 0)]


def check(snapshot: Snapshot, plan: Plan) -> list[str]:
    errors: list[str] = []
    pods = {p.key: p for p in snapshot.pods}
    nodes = {n.name: n for n in snapshot.nodes}
    seen: set[str] = set()
    where = {k: p.node for k, p in pods.items()}  # final node of every pod, None = not running

    def once(key: str) -> Pod | None:
        if key in seen:
            errors.append(f"{key}: appears in more than one action")
        seen.add(key)
        pod = pods.get(key)
        if pod is None:
            errors.append(f"{key}: no such pod")
        return pod

    for m in plan.moves:
        pod = once(m.pod)
        if pod is None:
            continue
        if pod.node != m.from_node:
            errors.append(f"{m.pod}: move from {m.from_node} but it runs on {pod.node}")
        if pod.immovable:
            errors.append(f"{m.pod}: moved but immovable ({pod.immovable})")
        if m.to_node not in nodes or m.to_node == m.from_node:
            errors.append(f"{m.pod}: bad move target {m.to_node}")
        elif not may_run(pod, nodes[m.to_node]):
            errors.append(f"{m.pod}: not allowed on {m.to_node}")
        where[m.pod] = m.to_node
    for e in plan.evictions:
        pod = once(e.pod)
        if pod is None:
            continue
        if pod.node != e.from_node:
            errors.append(f"{e.pod}: evicted from {e.from_node} but it runs on {pod.node}")
        if pod.immovable:
            errors.append(f"{e.pod}: evicted but immovable ({pod.immovable})")
        where[e.pod] = None
    for pl in plan.placements:
        pod = once(pl.pod)
        if pod is None:
            continue
        if pod.node is not None:
            errors.append(f"{pl.pod}: placed but it is already bound to {pod.node}")
        if pl.to_node not in nodes:
            errors.append(f"{pl.pod}: bad target {pl.to_node}")
        elif not may_run(pod, nodes[pl.to_node]):
            errors.append(f"{pl.pod}: not allowed on {pl.to_node}")
        where[pl.pod] = pl.to_node
    if errors:
        return errors

    # capacity of every node that receives a pod, in the final state
    receiving = {m.to_node for m in plan.moves} | {p.to_node for p in plan.placements}
    final: dict[str, dict[str, int]] = {n: {} for n in nodes}
    for key, node_name in where.items():
        if node_name in final:
            for r, v in pods[key].requests.items():
                final[node_name][r] = final[node_name].get(r, 0) + v
    for name in sorted(receiving):
        over = _over(final[name], nodes[name])
        if over:
            errors.append(f"{name}: over capacity after the plan ({', '.join(over)})")

    # PDB budgets for pods removed for good
    for pdb in snapshot.pdbs:
        gone = sum(1 for e in plan.evictions if pdb.key in pods[e.pod].pdbs)
        if gone > pdb.disruptions_allowed:
            errors.append(f"{pdb.key}: {gone} evictions exceed disruptionsAllowed")

    # the outcome, recomputed from the final placement
    prios = sorted({p.priority for p in pods.values()}, reverse=True)
    cost: dict[str, int] = {m.pod: _COSTS["move"] for m in plan.moves}
    cost.update({e.pod: _COSTS["evict"] for e in plan.evictions})

    def vector(final_nodes: Mapping[str, str | None], costs: Mapping[str, int]) -> list[int]:
        out = []
        for p in prios:
            out.append(
                sum(1 for k, n in final_nodes.items() if n in nodes and pods[k].priority >= p)
            )
            out.append(-sum(c for k, c in costs.items() if pods[k].priority >= p))
        return out

    before = vector({k: p.node for k, p in pods.items()}, {})
    after = vector(where, cost)
    if list(plan.before.vector) != before:
        errors.append(f"claimed 'before' {list(plan.before.vector)} is really {before}")
    if list(plan.after.vector) != after:
        errors.append(f"claimed 'after' {list(plan.after.vector)} is really {after}")
    placed_after = {
        p: sum(1 for k, n in where.items() if n in nodes and pods[k].priority == p) for p in prios
    }
    if dict(plan.after.placed_by_priority) != placed_after:
        errors.append("claimed placed_by_priority does not match the actions")
    has_actions = bool(plan.moves or plan.evictions or plan.placements)
    if has_actions and not after > before:
        errors.append(f"not strictly better: {after} vs {before}")
    errors += _check_steps(snapshot, plan, pods, nodes)
    return errors


def _check_steps(
    snapshot: Snapshot, plan: Plan, pods: Mapping[str, Pod], nodes: Mapping[str, Node]
) -> list[str]:
    errors: list[str] = []
    expected: set[tuple[str, str, str | None, str | None]] = {
        ("move", m.pod, m.from_node, m.to_node) for m in plan.moves
    }
    expected |= {("place", p.pod, None, p.to_node) for p in plan.placements}
    expected |= {("evict", e.pod, e.from_node, None) for e in plan.evictions}
    load: dict[str, dict[str, int]] = {n: {} for n in nodes}
    for pod in pods.values():
        if pod.node in load:
            for r, v in pod.requests.items():
                load[pod.node][r] = load[pod.node].get(r, 0) + v
    budget = {p.key: p.disruptions_allowed for p in snapshot.pdbs}
    budget_ev = dict(budget)
    for e in plan.evictions:
        for pdb in pods[e.pod].pdbs:
            budget_ev[pdb] = budget_ev.get(pdb, 0) - 1
    down: dict[str, str] = {}  # evicted first: pod -> planned target
    done: set[tuple[str, str, str | None, str | None]] = set()

    def shift(node: str | None, pod: Pod, sign: int) -> None:
        if node is None:
            return
        for r, v in pod.requests.items():
            load[node][r] = load[node].get(r, 0) + sign * v
        if sign > 0 and _over(load[node], nodes[node]):
            errors.append(f"step {pod.key} -> {node}: node over capacity")

    for step in plan.steps:
        pod = pods[step.pod]
        if step.action == "evict-first":
            if step.from_node is None or step.to_node is None:
                errors.append(f"step {step}: incomplete")
                continue
            down[step.pod] = step.to_node
            for pdb in pod.pdbs:
                budget_ev[pdb] = budget_ev.get(pdb, 0) - 1
                if budget_ev[pdb] < 0:
                    errors.append(f"step {step.pod}: evict-first exceeds PDB {pdb}")
            shift(step.from_node, pod, -1)
            continue
        if step.action == "land":
            if down.pop(step.pod, None) != step.to_node:
                errors.append(f"step {step.pod}: lands without being evicted first")
                continue
            for pdb in pod.pdbs:
                budget_ev[pdb] += 1
            shift(step.to_node, pod, +1)
            done.add(("move", step.pod, pod.node, step.to_node))
            continue
        shift(step.from_node, pod, -1)
        shift(step.to_node, pod, +1)
        done.add((step.action, step.pod, step.from_node, step.to_node))
    if down:
        errors.append(f"pods evicted first never land: {sorted(down)}")
    if done != expected or len(plan.steps) != len(expected) + sum(
        1 for s in plan.steps if s.action == "evict-first"
    ):
        errors.append("steps do not carry out exactly the plan's actions")
    return errors


# --- balancing plans (docs/architecture.md#balancing) -------------------------------------------


def _goal_measure(
    snapshot: Snapshot,
    spec: GoalSpec,
    usage: Mapping[str, Mapping[str, float]],
    where: Mapping[str, str | None],
) -> tuple[float, list[str]]:
    """The goal's measure of a placement (imbalance, largest free block or nodes that could go)
    and the nodes that could go, computed from the pods themselves."""
    pods = {p.key: p for p in snapshot.pods}
    nodes = {n.name: n for n in snapshot.nodes}
    on: dict[str, list[Pod]] = {n: [] for n in nodes}
    for key, at in where.items():
        if at in on:
            on[at].append(pods[key])
    if spec.goal == "consolidate":
        gone = [
            name
            for name, node in nodes.items()
            if not excluded(node.labels, spec.exclude_label)
            and all(p.immovable in ("daemonset", "mirror") for p in on[name])
        ]
        return float(len(gone)), gone
    names = [r for r in GOAL_RESOURCES if r in snapshot.resources]
    if spec.goal == "defragment":
        biggest = {
            r: max((n.allocatable.get(r, 0) for n in nodes.values()), default=0) for r in names
        }
        best = 0.0
        for name, node in nodes.items():
            if node.unschedulable or excluded(node.labels, spec.exclude_label):
                continue
            free = [
                (node.allocatable.get(r, 0) - sum(p.requests.get(r, 0) for p in on[name]))
                / biggest[r]
                for r in names
                if biggest[r] > 0
            ]
            best = max(best, min(free, default=0.0))
        return best, []

    def used(pod: Pod, r: str) -> float:
        got = usage.get(pod.key)
        return float(got[r]) if got is not None and r in got else float(pod.requests.get(r, 0))

    cap = {r: sum(n.allocatable.get(r, 0) for n in nodes.values()) for r in names}
    total = {r: sum(used(p, r) for ps in on.values() for p in ps) for r in names}
    live = [r for r in names if cap[r] > 0 and total[r] > 0]
    out = 0.0
    for name, node in nodes.items():
        share = sum(node.allocatable.get(r, 0) / cap[r] for r in live) / max(1, len(live))
        fills = [
            sum(used(p, r) for p in on[name]) / node.allocatable[r] / (total[r] / cap[r])
            for r in live
            if node.allocatable.get(r, 0) > 0
        ]
        if len(fills) >= 2:
            mean = sum(fills) / len(fills)
            out += share * sum(abs(f - mean) for f in fills) / len(fills)
    return out, []


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def check_goal(
    snapshot: Snapshot,
    plan: Plan,
    spec: GoalSpec,
    usage: Mapping[str, Mapping[str, float]] | None = None,
) -> list[str]:
    """The problems of a balancing plan: only moves of movable pods, none touching a pod or node
    labelled out, onto nodes that accept them; PDBs with budget; no node over capacity at any
    step; within the run's bounds; and the claimed measures and gain, recomputed here."""
    usage = usage or {}
    report = plan.goal
    if report is None:
        return ["a balancing plan without its goal report"]
    errors: list[str] = []
    if plan.placements or plan.evictions:
        errors.append("a balancing plan only moves pods")
    if report.goal != spec.goal:
        errors.append(f"plan for goal {report.goal}, asked for {spec.goal}")
    pods = {p.key: p for p in snapshot.pods}
    nodes = {n.name: n for n in snapshot.nodes}
    out = {n.name for n in snapshot.nodes if excluded(n.labels, spec.exclude_label)}
    budget = {p.key: p.disruptions_allowed for p in snapshot.pdbs}
    where = {k: p.node for k, p in pods.items() if p.node is not None}
    for m in plan.moves:
        pod = pods.get(m.pod)
        if pod is None:
            errors.append(f"{m.pod}: no such pod")
            continue
        if where.get(m.pod) != pod.node:
            errors.append(f"{m.pod}: appears in more than one move")
        if pod.node != m.from_node:
            errors.append(f"{m.pod}: move from {m.from_node} but it runs on {pod.node}")
        if pod.immovable:
            errors.append(f"{m.pod}: moved but immovable ({pod.immovable})")
        if excluded(pod.labels, spec.exclude_label):
            errors.append(f"{m.pod}: moved but labelled out ({spec.exclude_label})")
        if m.from_node in out or m.to_node in out:
            errors.append(f"{m.pod}: touches a node labelled out ({spec.exclude_label})")
        if m.to_node not in nodes or m.to_node == m.from_node:
            errors.append(f"{m.pod}: bad move target {m.to_node}")
        elif not may_run(pod, nodes[m.to_node]) or nodes[m.to_node].unschedulable:
            errors.append(f"{m.pod}: not allowed on {m.to_node}")
        for pdb in pod.pdbs:
            if budget.get(pdb, 0) < 1:
                errors.append(f"{m.pod}: its PDB {pdb} allows no disruption")
        where[m.pod] = m.to_node
    if errors:
        return errors
    touched = {m.from_node for m in plan.moves} | {m.to_node for m in plan.moves}
    if len(plan.moves) > spec.limits.max_moves:
        errors.append(f"{len(plan.moves)} moves exceed the bound of {spec.limits.max_moves}")
    cap = spec.limits.nodes_cap(len(nodes))
    if len(touched) > cap:
        errors.append(f"{len(touched)} nodes touched exceed the bound of {cap}")
    if tuple(sorted(touched)) != tuple(report.touched):
        errors.append("claimed touched nodes do not match the moves")
    before, _ = _goal_measure(snapshot, spec, usage, {k: p.node for k, p in pods.items()})
    after, gone = _goal_measure(snapshot, spec, usage, where)
    gain = before - after if spec.goal == "balance" else after - before
    for name, claimed, real in (
        ("before", report.before, before),
        ("after", report.after, after),
        ("gain", report.gain, gain),
    ):
        if not _close(claimed, real):
            errors.append(f"claimed {name} {claimed:.6g} is really {real:.6g}")
    if spec.goal == "consolidate" and tuple(report.freed) != tuple(gone):
        errors.append(f"claimed freed nodes {list(report.freed)} are really {gone}")
    if plan.moves and not enough(spec.goal, gain, before, spec.min_gain):
        errors.append(f"gain {gain:.6g} is below the minimum (min_gain {spec.min_gain:g})")
    errors += _check_steps(snapshot, plan, pods, nodes)
    return errors
