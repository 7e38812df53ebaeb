"""``carico repack``: compute a repacking plan from a cluster dump or a live cluster.

``kubectl get nodes,pods,poddisruptionbudgets -A -o json > cluster.json`` then
``carico repack --from-file cluster.json``; or ``carico repack --kubeconfig PATH [--context C]``,
which lists the same objects from the API server and parses them with the same code
(``live.merge_lists``). The plan is printed (a table, or one JSON object with ``--output json``);
nothing is changed anywhere — executing plans is the extender's job in apply mode. Exit status: 0
when a plan or a definite "no improvement" was produced, 1 when solving failed (ERROR,
INFEASIBLE), 2 on unreadable input or an unreachable cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from carico.pods import DEFAULT_EXCLUDED_NAMESPACES
from repack.cpsat import FORMULATIONS

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


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: ``carico repack --help`` must not load OR-Tools, numba and
    # the solver's compiled loops (seconds).
    from repack.driver.solver import SolveOptions, solve
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
    except (OSError, json.JSONDecodeError, SnapshotError, ValueError) as exc:
        print(f"carico repack: {one_line(str(exc))}", file=sys.stderr)
        return 2
    plan = solve(snapshot, options)
    if args.output == "json":
        json.dump(to_dict(plan), sys.stdout, indent=2)
        print()
    else:
        render_table(plan, sys.stdout)
    return 1 if plan.status in {"ERROR", "INFEASIBLE"} else 0
