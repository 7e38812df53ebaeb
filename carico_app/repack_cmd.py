"""``carico repack``: compute a repacking plan from a cluster dump or a live cluster.

``kubectl get nodes,pods,poddisruptionbudgets -A -o json > cluster.json`` then
``carico repack --from-file cluster.json``; or ``carico repack --kubeconfig PATH [--context C]``,
which lists the same objects from the API server and parses them with the same code
(``live.merge_lists``). The plan is printed (a table, or one JSON object with ``--output json``);
nothing is changed anywhere — executing plans is the extender's job in apply mode. Exit status: 0
when a plan or a definite "no improvement" was produced, 1 when solving failed (ERROR,
INFEASIBLE), 2 on unreadable input or an unreachable cluster.

``--mode`` picks the engine: ``place`` (the default) makes pending pods fit; ``balance``,
``defragment`` and ``consolidate`` run the balancing engine on the running pods
(docs/architecture.md#balancing), within ``--max-moves`` / ``--max-nodes`` / ``--max-share`` and
only for a gain of at least ``--min-gain``; ``--usage FILE`` gives measured use per pod (else the
balance goal is measured on requests).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from carico.pods import DEFAULT_EXCLUDED_NAMESPACES
from repack.cpsat import FORMULATIONS
from repack.problem.goal_spec import EXCLUDE_LABEL, GOALS, Limits

if TYPE_CHECKING:
    from repack.problem.plan import Plan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from-file",
        metavar="FILE",
        help="output of `kubectl get nodes,pods,poddisruptionbudgets -A -o json` ('-' = stdin)",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="list nodes, pods and PDBs from the cluster of this kubeconfig (read only)",
    )
    parser.add_argument(
        "--context", help="kubeconfig context to use (with --kubeconfig; default: current)"
    )
    parser.add_argument(
        "--scheduler",
        action="append",
        default=None,
        metavar="NAME",
        help="repack only for pending pods of this spec.schedulerName (repeatable; default: "
        "every pending pod)",
    )
    parser.add_argument(
        "--time-limit", type=float, default=10.0, metavar="SECONDS", help="total solve time"
    )
    parser.add_argument("--formulation", choices=FORMULATIONS, default="classes")
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--workers", type=int, default=0, help="CP-SAT search workers (0 = every core)"
    )
    parser.add_argument("--seed", type=int, default=0, help="CP-SAT random seed")
    parser.add_argument(
        "--exclude-namespace",
        action="append",
        default=None,
        metavar="NS",
        help="namespace whose pods are never moved (repeatable; default: kube-system)",
    )

    goal = parser.add_argument_group("balancing engine (docs/architecture.md#balancing)")
    goal.add_argument(
        "--mode",
        choices=("place", *GOALS),
        default="place",
        help="place: make pending pods fit (default); balance: even each node's mix of use; "
        "defragment: the largest free block; consolidate: free whole nodes",
    )
    goal.add_argument(
        "--max-moves", type=int, default=Limits.max_moves, help="most pods a plan moves"
    )
    goal.add_argument(
        "--max-nodes", type=int, default=None, help="most nodes a plan touches (default: no cap)"
    )
    goal.add_argument(
        "--max-share",
        type=float,
        default=Limits.max_share,
        help="most nodes a plan touches as a share of the cluster (rounded up, at least 2)",
    )
    goal.add_argument(
        "--min-gain",
        type=float,
        default=None,
        help="least gain worth a plan (balance: share of the imbalance, 0.05; defragment: share "
        "of the largest node, 0.05; consolidate: nodes, 1)",
    )
    goal.add_argument(
        "--exclude-label",
        default=EXCLUDE_LABEL,
        metavar="KEY",
        help="nodes and pods with this label (any value but false) are left as they are",
    )
    goal.add_argument(
        "--usage",
        metavar="FILE",
        help='measured use per pod, {"namespace/name": {"cpu": millicores, "memory": bytes}}',
    )


def one_line(text: str) -> str:
    """``text`` with its control characters escaped: a message may quote the input's own strings
    (a resource named ``"\\r"``), and the error must stay one line.

    >>> one_line("memory\\n: bad")
    'memory\\\\n: bad'
    """
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _read(path: str) -> Any:
    try:
        if path == "-":
            return json.load(sys.stdin)
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except RecursionError:
        # json gives up on deep nesting with Python's recursion limit, not a JSONDecodeError
        raise ValueError(f"{path}: the JSON is nested too deeply") from None


def render_table(plan: Plan, out: TextIO) -> None:
    print(f"status: {plan.status}   optimal: {str(plan.optimal).lower()}", file=out)
    print(f"formulation: {plan.formulation}   solve time: {plan.solve_seconds:.3f} s", file=out)
    if plan.message:
        print(f"note: {plan.message}", file=out)
    print("\npriority  placed before  placed after  disruption", file=out)
    for prio in plan.after.placed_by_priority:
        print(
            f"{prio:>8}  {plan.before.placed_by_priority.get(prio, 0):>13}"
            f"  {plan.after.placed_by_priority[prio]:>12}"
            f"  {plan.after.disruption_by_priority.get(prio, 0):>10}",
            file=out,
        )
    if plan.steps:
        print("\nsteps (in order):", file=out)
        for i, s in enumerate(plan.steps, 1):
            where = " -> ".join(x for x in (s.from_node or "(pending)", s.to_node or "(gone)"))
            print(f"{i:>4}. {s.action:<12} {s.pod:<40} {where}", file=out)
    print(
        f"\n{len(plan.moves)} move(s), {len(plan.placements)} placement(s), "
        f"{len(plan.evictions)} eviction(s)",
        file=out,
    )
    if plan.goal is not None:
        g = plan.goal
        print(
            f"\ngoal: {g.goal} (measured on {g.basis})   before: {g.before:.4g}"
            f"   after: {g.after:.4g}   gain: {g.gain:.4g} (minimum {g.min_gain:g})",
            file=out,
        )
        print(
            f"bounds: {g.max_moves} move(s), {g.max_nodes} node(s)   touched: "
            f"{', '.join(g.touched) or '-'}",
            file=out,
        )
        if g.goal == "consolidate":
            print(f"nodes that could go: {', '.join(g.freed) or '-'}", file=out)
        free = ", ".join(f"{r} {v}" for r, v in g.largest_free.items())
        print(f"largest free block per resource: {free}", file=out)
    if plan.phases:
        print("\ntier  phase    status      value  bound  seconds  steps", file=out)
        for ph in plan.phases:
            steps = "(no solve needed)" if ph.skipped else " ".join(s.name for s in ph.steps)
            print(
                f"{ph.tier:>4}  {ph.phase:<7}  {ph.status:<10}  {ph.value:>5}  {ph.bound:>5}"
                f"  {ph.seconds:>7.3f}  {steps}",
                file=out,
            )


def _list_cluster(kubeconfig: str, context: str | None) -> dict[str, Any]:
    from kubernetes import config

    from repack.problem.snapshot import SnapshotError
    from scheduler_ext.kube import fetch_cluster_lists
    from scheduler_ext.repack.live import merge_lists

    try:
        api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
    except (config.ConfigException, OSError) as exc:
        raise ValueError(f"cannot load {kubeconfig}: {exc}") from exc
    try:
        return merge_lists(fetch_cluster_lists(api_client))
    except (SnapshotError, OSError, ValueError):
        raise
    except Exception as exc:  # ApiException, urllib3 connection errors
        from scheduler_ext.kube import api_error_message

        raise ValueError(f"cannot list the cluster: {api_error_message(exc)}") from exc
    finally:
        api_client.close()


def _usage(doc: Any) -> dict[str, dict[str, float]]:
    if not isinstance(doc, dict):
        raise ValueError("--usage: expected a JSON object of pod -> {resource: amount}")
    out: dict[str, dict[str, float]] = {}
    for key, amounts in doc.items():
        if not isinstance(amounts, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
            for v in amounts.values()
        ):
            raise ValueError(f"--usage: {key}: expected {{resource: non-negative number}}")
        out[str(key)] = {str(r): float(v) for r, v in amounts.items()}
    return out


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: ``carico repack --help`` must not load OR-Tools, numba and
    # the solver's compiled loops (seconds).
    from repack.driver.balance import rebalance
    from repack.driver.solver import SolveOptions, solve
    from repack.problem.goal_spec import GoalSpec
    from repack.problem.plan import to_dict
    from repack.problem.snapshot import SnapshotError, parse_list
    from scheduler_ext.repack.live import only_pending_of

    if args.context and not args.kubeconfig:
        print("carico repack: --context needs --kubeconfig", file=sys.stderr)
        return 2
    try:
        if args.kubeconfig:
            document = _list_cluster(args.kubeconfig, args.context)
        else:
            document = _read(args.from_file)
        if args.scheduler and isinstance(document, dict):
            document = only_pending_of(document, args.scheduler)
        excluded = (
            DEFAULT_EXCLUDED_NAMESPACES
            if args.exclude_namespace is None
            else frozenset(args.exclude_namespace)
        )
        snapshot = parse_list(document, excluded)
        options = SolveOptions(
            time_limit=args.time_limit,
            formulation=args.formulation,
            workers=args.workers,
            seed=args.seed,
        )
        spec = GoalSpec(
            "balance" if args.mode == "place" else args.mode,
            Limits(args.max_moves, args.max_nodes, args.max_share, args.min_gain),
            args.exclude_label,
        )
        usage = _usage(_read(args.usage)) if args.usage else None
    except (OSError, json.JSONDecodeError, SnapshotError, ValueError) as exc:
        print(f"carico repack: {one_line(str(exc))}", file=sys.stderr)
        return 2
    if args.mode == "place":
        plan = solve(snapshot, options)
    else:
        plan = rebalance(snapshot, spec, options, usage)
    if args.output == "json":
        json.dump(to_dict(plan), sys.stdout, indent=2)
        print()
    else:
        render_table(plan, sys.stdout)
    return 1 if plan.status in {"ERROR", "INFEASIBLE"} else 0
