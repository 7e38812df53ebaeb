"""What the fleet's per-class medians cost the aggregator's recompute, against the same store
without classes.

A store of N nodes (default 5,000) recomputes every 50 ms (the default --recompute-interval) with
N/20 new models in between (every node once a second, as in the load benchmark), each node's
model carrying K learned classes (of 4K Deployments, at least 64) with new footprints in every
model, as learning agents send them. Printed per K: the median, mean and largest recompute
(``ModelStore.compute``, the per-class summary included at most once a second, as the aggregator
runs it) and the mean as a ratio to the store without classes measured in the same run; then the
summary alone, as the aggregator computes it (``aggregator.classes``) and as the core's
``fleet_summary`` over every (sender, class) pair computes the same, and the mean recompute were
the summary rebuilt at every recompute. Pure CPU in this process: no gRPC, no I/O.

    python tests/bench/bench_aggregator_classes.py [--nodes 5000] [--classes 0,4,16,64]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aggregator.classes import ClassVotes
from aggregator.store import ModelStore
from aggregator.validate import MAX_FLEET_CLASSES, NodeEntry, class_footprint
from carico.footprint import fleet_summary

FEATURES = ("cpu", "memory")
INTERVAL = 0.05  # seconds of store time between recomputes


def _entry(rng: random.Random, node: int, sequence: int, names: list[str]) -> NodeEntry:
    angle = rng.uniform(0, 2 * np.pi)
    c, s = float(np.cos(angle)), float(np.sin(angle))
    classes = tuple(
        class_footprint(name, rng.uniform(0.05, 4.0), rng.uniform(5e7, 8e9), 10, 0.5, 5e8)
        for name in names
    )
    return NodeEntry(
        f"node-{node:05d}", sequence, sequence, sequence, 1, 2, 2, (c, -s, s, c), (0.8, 0.2),
        (0.1,), classes,
    )  # fmt: skip


def _run(
    nodes: int, k: int, recomputes: int, class_interval: float
) -> tuple[list[float], ModelStore]:
    rng = random.Random(k)
    pool = [f"team-{i % 13}/Deployment/service-{i:04d}" for i in range(max(64, 4 * k))]
    mine = [rng.sample(pool, k) for _ in range(nodes)]
    store = ModelStore(1e9, class_interval=class_interval)
    sequence = [1] * nodes
    for i in range(nodes):
        store.offer(_entry(rng, i, 1, mine[i]), FEATURES)
    now = 0.0
    store.compute(now)
    times = []
    for _ in range(recomputes):
        for i in rng.sample(range(nodes), nodes // 20):
            sequence[i] += 1
            store.offer(_entry(rng, i, sequence[i], mine[i]), FEATURES)
        now += INTERVAL
        began = time.perf_counter()
        store.compute(now)
        times.append(time.perf_counter() - began)
    return times, store


def _best(f: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        f()
        times.append(time.perf_counter() - began)
    return min(times)


def _core(entries: list[NodeEntry]) -> object:
    return fleet_summary((c for e in entries for c in e.classes), MAX_FLEET_CLASSES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--classes", default="0,4,16,64", help="learned classes per model")
    parser.add_argument("--recomputes", type=int, default=200, help="measured recomputes per K")
    args = parser.parse_args()
    print(
        f"ModelStore.compute at {args.nodes} nodes, {args.nodes // 20} new models per recompute, "
        f"{args.recomputes} recomputes every {INTERVAL:g} s of store time; ms"
    )
    header = (
        f"{'classes':>7} {'median':>7} {'mean':>7} {'max':>7} {'median/base':>11} {'mean/base':>9} "
        f"{'summary':>8} {'core':>8} {'every-time mean':>15}"
    )
    print(header)
    print("-" * len(header))
    # The baseline: the same store, models without classes.
    base_times, _ = _run(args.nodes, 0, args.recomputes, 1.0)
    base_median, base_mean = statistics.median(base_times), statistics.fmean(base_times)
    for k in (int(x) for x in args.classes.split(",")):
        times, store = _run(args.nodes, k, args.recomputes, 1.0) if k else (base_times, None)
        summary = core = every = float("nan")
        if store is not None:
            entries = store.entries()
            votes = ClassVotes()  # the aggregator's own summary, over the same senders
            for e in entries:
                votes.update(e.node, e.classes)
            nodes = [e.node for e in entries]
            summary = _best(partial(votes.summary, nodes, MAX_FLEET_CLASSES))
            core = _best(partial(_core, entries), 3)
            every = statistics.fmean(_run(args.nodes, k, args.recomputes // 4, 0.0)[0])
        median, mean = statistics.median(times), statistics.fmean(times)
        print(
            f"{k:>7} {1e3 * median:>7.2f} {1e3 * mean:>7.2f} {1e3 * max(times):>7.2f} "
            f"{median / base_median:>11.2f} {mean / base_mean:>9.2f} {1e3 * summary:>8.2f} "
            f"{1e3 * core:>8.2f} {1e3 * every:>15.2f}"
        )
    print(
        "summary: the per-class summary alone (aggregator.classes); core: fleet_summary over "
        "every (sender, class) pair, the same result; every-time mean: the mean recompute if the "
        "summary were rebuilt at every recompute (the aggregator does at most once a second)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
