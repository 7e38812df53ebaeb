"""``carico repack-bench``: the repacker against the per-pod baseline on generated instances.

Instances come from ``generator`` (the Priority Matters paper's method). Each is solved by both
formulations at every time limit and classified as the paper did: Better&Optimal, Better (not
proven), Default-Optimal (proven that nothing better exists) or Failure (no improvement found
and none proven impossible). Every instance also gets a best-known outcome: a proven optimum from
any run, otherwise the best of all runs and one long solve; it is cached in a JSON file keyed by
instance (``--cache``) so later runs reuse it. The report prints, per grid cell and time limit,
the classes and how often the best-known outcome was reached, median and p95 solve times, and the
per-instance solve-time ratio classes/per-pod (the per-pod formulation, measured in the same run,
is the baseline); under the 1 s target, how many runs reach the best-known placed counts alone
(so that a miss by disruption is told apart from a miss by placed pods).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from repack.problem.generator import Cell, instances
from repack.problem.plan import Plan
from repack.problem.snapshot import Snapshot


def _solve(snap: Snapshot, limit: float, workers: int, formulation: str = "classes") -> Plan:
    # Imported at the first solve, not at the top: ``carico repack-bench --help`` must not load
    # OR-Tools, numba and the solver's compiled loops (seconds).
    from repack.driver.solver import SolveOptions, solve

    return solve(snap, SolveOptions(time_limit=limit, formulation=formulation, workers=workers))


CLASSES = ("Better&Optimal", "Better", "Default-Optimal", "Failure")
SHORT = {"Better&Optimal": "B&O", "Better": "B", "Default-Optimal": "DO", "Failure": "F"}
# The default run: two instances from each of these cells (nodes, pods/node, usage %, tiers), so
# every node count meets every pods-per-node, usage and tier setting at least once somewhere.
DEFAULT_CELLS = [
    Cell(n, ppn, u, k)
    for n in (4, 8, 16, 32)
    for ppn, u, k in ((4, 100, 1), (8, 95, 2), (4, 105, 4))
]
FULL_GRID = dict(nodes=(4, 8, 16, 32), ppn=(4, 8), usage=(90, 95, 100, 105), tiers=(1, 2, 4))
DEFAULT_CACHE = Path(".cache") / "repack-bench" / "best_known.json"


def classify(plan: Plan) -> str:
    if plan.status == "OPTIMAL":
        return "Better&Optimal"
    if plan.status == "FEASIBLE":
        return "Better"
    if plan.status == "NO_IMPROVEMENT" and plan.optimal:
        return "Default-Optimal"
    return "Failure"


@dataclass
class Run:
    cell: str
    seed: int
    formulation: str
    limit: float
    category: str
    vector: tuple[int, ...]
    before: tuple[int, ...]
    seconds: float
    proven: bool
    cpu: float  # process CPU seconds (all CP-SAT threads): cpu/seconds shows the contention


def _runs(
    snap: Snapshot,
    cell: Cell,
    seed: int,
    limits: Sequence[float],
    forms: Sequence[str],
    workers: int,
) -> list[Run]:
    out = []
    for limit, form in product(limits, forms):
        cpu = time.process_time()
        plan = _solve(snap, limit, workers, form)
        cpu = time.process_time() - cpu
        out.append(
            Run(
                cell.name,
                seed,
                form,
                limit,
                classify(plan),
                plan.after.vector,
                plan.before.vector,
                plan.solve_seconds,
                plan.optimal and plan.status != "ERROR",
                cpu,
            )
        )
    return out


def best_known(
    snap: Snapshot,
    key: str,
    runs: Sequence[Run],
    cache: dict[str, dict[str, object]],
    long_limit: float,
    workers: int,
) -> tuple[tuple[int, ...], bool, list[str]]:
    """(vector, proven, warnings) for an instance; computes and caches a long solve if needed."""
    warnings = []
    proven = {r.vector for r in runs if r.proven}
    if len(proven) > 1:
        warnings.append(f"{key}: runs proved different optima {sorted(proven)}")
    entry = cache.get(key)
    if entry is None and not proven:
        plan = _solve(snap, long_limit, workers)
        entry = {"vector": list(plan.after.vector), "proven": plan.optimal, "limit": long_limit}
        cache[key] = entry
    candidates = [r.vector for r in runs]
    is_proven = bool(proven)
    if entry is not None:
        cached = tuple(int(v) for v in entry["vector"])  # type: ignore[attr-defined]
        candidates.append(cached)
        if entry.get("proven"):
            if proven and cached not in proven:
                warnings.append(f"{key}: cached optimum {cached} differs from {sorted(proven)}")
            is_proven = True
    best = max(candidates)
    optima = set(proven)
    if entry is not None and entry.get("proven"):
        optima.add(tuple(int(v) for v in entry["vector"]))  # type: ignore[attr-defined]
    if optima and best > max(optima):
        warnings.append(f"{key}: a run {best} beat the proven optimum {max(optima)}")
    if entry is None or tuple(entry["vector"]) < best:  # type: ignore[arg-type]
        cache[key] = {"vector": list(best), "proven": is_proven, "limit": long_limit}
    return best, is_proven, warnings


def reaches(runs: Sequence[Run], best: dict[tuple[str, int], tuple[int, ...]]) -> tuple[int, int]:
    """How many runs reach their instance's best-known outcome, and how many reach its placed
    counts (the vector's placed-pod entries, one per tier) whatever their disruption."""
    whole = sum(r.vector == best[r.cell, r.seed] for r in runs)
    placed = sum(r.vector[0::2] == best[r.cell, r.seed][0::2] for r in runs)
    return whole, placed


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "   n/a"


def _p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def _summary(
    title: str,
    runs: Sequence[Run],
    best: dict[tuple[str, int], tuple[int, ...]],
    out: Iterable[str],
) -> list[str]:
    lines = list(out)
    lines.append(title)
    lines.append(
        f"  {'limit':>5} {'formulation':<9} {'n':>3} "
        + " ".join(f"{SHORT[c]:>4}" for c in CLASSES)
        + "  improved/improvable  reached-best  median-s   p95-s  cpu/wall"
    )
    for limit in sorted({r.limit for r in runs}):
        for form in ("classes", "per-pod"):
            sel = [r for r in runs if r.limit == limit and r.formulation == form]
            if not sel:
                continue
            counts = {c: sum(r.category == c for r in sel) for c in CLASSES}
            improvable = [r for r in sel if best[r.cell, r.seed] > r.before]
            improved = sum(r.vector > r.before for r in improvable)
            reached = sum(r.vector == best[r.cell, r.seed] for r in sel)
            secs = [r.seconds for r in sel]
            lines.append(
                f"  {limit:>5g} {form:<9} {len(sel):>3} "
                + " ".join(f"{counts[c]:>4}" for c in CLASSES)
                + f"  {improved:>3}/{len(improvable):<3} {_pct(improved, len(improvable))}"
                f"  {reached:>3} {_pct(reached, len(sel))}"
                f"  {statistics.median(secs):8.3f} {_p95(secs):7.3f}"
                f"  {sum(r.cpu for r in sel) / max(1e-9, sum(secs)):8.2f}"
            )
        ratios = []
        for r in runs:
            if r.limit == limit and r.formulation == "classes":
                twin = [
                    q
                    for q in runs
                    if q.limit == limit
                    and q.formulation == "per-pod"
                    and (q.cell, q.seed) == (r.cell, r.seed)
                ]
                if twin:
                    ratios.append(r.seconds / max(twin[0].seconds, 1e-6))
        if ratios:
            lines.append(
                f"  {limit:>5g} time ratio classes/per-pod per instance: median "
                f"{statistics.median(ratios):.3f}, p95 {_p95(ratios):.3f}"
            )
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--full", action="store_true", help="the paper's whole grid")
    parser.add_argument("--nodes", type=int, nargs="+", help="grid: node counts")
    parser.add_argument("--pods-per-node", type=int, nargs="+", help="grid: pods per node")
    parser.add_argument("--usage", type=int, nargs="+", help="grid: target usage in percent")
    parser.add_argument("--tiers", type=int, nargs="+", help="grid: priority tiers K")
    parser.add_argument("--instances", type=int, default=2, help="instances per grid cell")
    parser.add_argument("--limits", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument(
        "--formulations", nargs="+", default=["classes", "per-pod"], choices=("classes", "per-pod")
    )
    parser.add_argument(
        "--best-known-limit", type=float, default=60.0, help="seconds of the cached long solve"
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="best-known cache file")
    parser.add_argument("--workers", type=int, default=0, help="CP-SAT workers (0 = all cores)")


def _cells(args: argparse.Namespace) -> list[Cell]:
    grid_flags = (args.nodes, args.pods_per_node, args.usage, args.tiers)
    if not args.full and not any(grid_flags):
        return DEFAULT_CELLS
    grid = {
        "nodes": args.nodes or FULL_GRID["nodes"],
        "ppn": args.pods_per_node or FULL_GRID["ppn"],
        "usage": args.usage or FULL_GRID["usage"],
        "tiers": args.tiers or FULL_GRID["tiers"],
    }
    return [Cell(*combo) for combo in product(*grid.values())]


def run(args: argparse.Namespace) -> int:
    cells = _cells(args)
    cache: dict[str, dict[str, object]] = {}
    if args.cache.exists():
        cache = json.loads(args.cache.read_text())
    print(
        f"repack-bench: {len(cells)} cell(s) x {args.instances} instance(s), limits "
        f"{args.limits} s, formulations {args.formulations}, {os.cpu_count()} cores visible "
        f"(shared machine: CP-SAT gets what others leave), best-known cache {args.cache}, "
        f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}",
        flush=True,
    )
    started = time.monotonic()
    runs: list[Run] = []
    best: dict[tuple[str, int], tuple[int, ...]] = {}
    proven_best: dict[tuple[str, int], bool] = {}
    warnings: list[str] = []
    for cell in cells:
        for seed, snap in instances(cell, args.instances):
            got = _runs(snap, cell, seed, args.limits, args.formulations, args.workers)
            key = f"{cell.name}/seed{seed}"
            vec, proven, warn = best_known(
                snap, key, got, cache, args.best_known_limit, args.workers
            )
            best[cell.name, seed] = vec
            proven_best[cell.name, seed] = proven
            warnings += warn
            runs += got
            args.cache.parent.mkdir(parents=True, exist_ok=True)
            args.cache.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
            line = "  ".join(
                f"{r.formulation}@{r.limit:g}s {SHORT[r.category]} {r.seconds:.2f}s"
                f" ({r.cpu:.2f} cpu)" + ("" if r.vector == vec else " (below best)")
                for r in got
            )
            print(
                f"{key}: before {list(got[0].before)} best-known {list(vec)}"
                f"{' (proven)' if proven else ''} | {line}",
                flush=True,
            )
    lines: list[str] = []
    for cell in cells:
        sel = [r for r in runs if r.cell == cell.name]
        if sel:
            lines = _summary(f"cell {cell.name}", sel, best, lines)
    for n in sorted({c.nodes for c in cells}):
        sel = [r for r in runs if r.cell.startswith(f"n{n}-")]
        lines = _summary(f"all cells with {n} nodes", sel, best, lines)
    lines = _summary("all instances", runs, best, lines)
    print("\n".join(lines))
    n_inst = len(best)
    print(
        f"best-known outcomes proven optimal: {sum(proven_best.values())}/{n_inst}; "
        f"wall time {time.monotonic() - started:.0f} s; load average now "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}"
    )
    for w in warnings:
        print(f"WARNING {w}")
    small = [
        r
        for r in runs
        if r.formulation == "classes" and r.cell.split("-")[0] in {"n4", "n8", "n16", "n32"}
    ]
    at1 = [r for r in small if r.limit == 1.0]
    at10 = [r for r in small if r.limit == 10.0]
    if at1:
        improvable = [r for r in at1 if best[r.cell, r.seed] > r.before]
        improved = sum(r.vector > r.before for r in improvable)
        reached, placed = reaches(at1, best)
        print(
            f"target classes@1s (4-32 nodes): improves where improvable {improved}/"
            f"{len(improvable)} (target all); reaches best-known {_pct(reached, len(at1)).strip()}"
            " (target >= 90%)"
        )
        print(
            f"  (placed pods alone: {_pct(placed, len(at1)).strip()} place as many pods at every "
            "tier as the best-known outcome; those of them that miss it move more pods)"
        )
    if at10:
        n_proven = sum(r.category in ("Better&Optimal", "Default-Optimal") for r in at10)
        print(
            f"target classes@10s (4-32 nodes): proves its outcome "
            f"{_pct(n_proven, len(at10)).strip()}"
            " (target >= 80%)"
        )
    return 1 if warnings else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="carico repack-bench", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
