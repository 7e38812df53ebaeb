"""Simulator speed: the 1000-pod cpu-jobs case under every scheduler of the scenario.

Baselines, measured in the same run over the same number of 100 ms steps: an empty step loop
(the loop and a call per step), and a "numpy floor" (one per-node sum over 1000 pods and one
fair share per step, the least a vectorised step can do). The figures are simulated seconds per
wall second for all three, and the simulator's cost per step as a multiple of each baseline's.
For ``carico`` a third baseline: 19 bare agent pipelines (``agent.pipeline.AgentPipeline``) fed a
constant sample for the same number of steps — the part of its cost that is Carico's own logic.
The scenario must also finish in under 2 minutes of wall time (a requirement, checked, printed).

Usage: python tests/bench/bench_simulator.py [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from carico_app.simulate import scenarios
from carico_app.simulate.engine import run_case
from carico_app.simulate.params import ModelParams
from carico_app.simulate.schedulers import parse_spec

LIMIT_S = 120.0


def _noop(step: int) -> int:
    return step


def empty_loop(steps: int) -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(steps):
        acc += _noop(i)
    return time.perf_counter() - t0


def numpy_floor(steps: int, pods: int = 1000, nodes: int = 19) -> float:
    """The least a vectorised step can do: one per-node sum over all pods and one share."""
    rng = np.random.default_rng(0)
    node = rng.integers(0, nodes, pods)
    threads = np.ones(pods)
    t0 = time.perf_counter()
    for _ in range(steps):
        demand = np.bincount(node, weights=threads, minlength=nodes)
        np.minimum(1.0, 4.0 / np.maximum(demand, 1e-9))
    return time.perf_counter() - t0


def pipeline_floor(steps: int, nodes: int = 19) -> float:
    """19 agent pipelines at 10 Hz on a constant sample: the carico scheduler's own floor."""
    from agent.pipeline import AgentPipeline
    from agent.telemetry import DEFAULT_FEATURES, Sample

    pipes = [AgentPipeline(DEFAULT_FEATURES) for _ in range(nodes)]
    sample = Sample(np.array([0.3, 0.2]), psi_available=True, pods=3)
    t0 = time.perf_counter()
    for i in range(steps):
        now = i * 0.1
        for p in pipes:
            p.step(now, sample, 3)
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    params = ModelParams()
    scenario = scenarios.get("cpu-jobs")
    case = scenario.case("1000 pods")
    best_wall, sim_s, steps = float("inf"), 0.0, 0
    rows = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        rows = []
        sim_s = 0.0
        for name in scenario.schedulers:
            r = run_case(scenario, case, parse_spec(name), params, seed=1)
            rows.append((name, r.sim_seconds, r.wall_seconds, r.job_completion_s))
            sim_s += r.sim_seconds
        best_wall = min(best_wall, time.perf_counter() - t0)
    steps = round(sim_s / params.dt)
    base_wall = min(empty_loop(steps) for _ in range(3))
    floor_wall = min(numpy_floor(steps) for _ in range(3))
    print(f"cpu-jobs, 1000 pods, {len(rows)} schedulers, {steps} steps of {params.dt} s")
    print(f"{'scheduler':<16} {'simulated s':>11} {'wall s':>8} {'sim s / wall s':>15}")
    for name, s, w, _ in rows:
        print(f"{name:<16} {s:>11.1f} {w:>8.2f} {s / w:>15.0f}")
    print(f"{'all':<16} {sim_s:>11.1f} {best_wall:>8.2f} {sim_s / best_wall:>15.0f}")
    print(f"{'empty loop':<16} {sim_s:>11.1f} {base_wall:>8.4f} {sim_s / base_wall:>15.0f}")
    print(f"{'numpy floor':<16} {sim_s:>11.1f} {floor_wall:>8.4f} {sim_s / floor_wall:>15.0f}")
    print(f"ratio: a simulator step costs {best_wall / base_wall:.0f}x an empty loop step")
    print(f"ratio: a simulator step costs {best_wall / floor_wall:.1f}x the numpy floor step")
    for name, s, w, _ in rows:
        if name == "carico":
            pipe_wall = pipeline_floor(round(s / params.dt))
            print(
                f"ratio: carico's run costs {w / pipe_wall:.2f}x its 19 bare agent pipelines"
                f" ({pipe_wall:.2f} s for {round(s / params.dt)} steps)"
            )
    ok = best_wall < LIMIT_S
    print(
        f"requirement: under {LIMIT_S:.0f} s wall -> {best_wall:.1f} s, {'ok' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
