"""Formats simulation results: a table for people, JSON for programs, PNG plots (matplotlib, Agg).

Neighbours: ``engine.py`` produces ``CaseResult``; ``cli.py`` chooses the outputs. The table and
JSON are pure; ``write_plots`` is the only function here that touches the filesystem.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from carico_app.simulate.engine import CaseResult
from carico_app.simulate.params import ModelParams

STAT_KEYS = ("mean", "std", "min", "p25", "p50", "p75", "p95", "p99", "max")
LATENCY_KEYS = ("min", "p50", "p90", "p95", "p99", "max")


def header(seed: int, params: ModelParams) -> str:
    """The seed and every model parameter, so the run can be repeated exactly."""
    items = [
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.describe().items()
    ]
    lines = [f"seed={seed}", "model parameters:"]
    line = " "
    for item in items:
        if len(line) + len(item) + 1 > 100:
            lines.append(line)
            line = " "
        line += " " + item
    lines.append(line)
    return "\n".join(lines)


def _fmt(x: float, width: int = 7, digits: int = 1) -> str:
    return f"{'-':>{width}}" if x is None or not math.isfinite(x) else f"{x:{width}.{digits}f}"


def table(results: Sequence[CaseResult]) -> str:
    """One row per job of each (case, scheduler): job completion and the pod distribution."""
    cols = "".join(f"{k:>7}" for k in STAT_KEYS)
    head = f"{'scenario':<10} {'case':<10} {'scheduler':<19} {'all jobs s':>10} {'job':<5}"
    head += f" {'pods':>5} {'job s':>7} |{cols} {'OOM':>4}"
    out = [head, "-" * len(head)]
    for r in results:
        for i, j in enumerate(r.jobs):
            first = i == 0
            row = f"{r.scenario if first else '':<10} {r.case if first else '':<10} "
            row += f"{r.scheduler if first else '':<19} "
            row += f"{_fmt(r.job_completion_s, 10) if first else '':>10} {j.name:<5} {j.pods:>5} "
            row += f"{_fmt(j.completion_s)} |"
            row += "".join(_fmt(j.pod_completion[k]) for k in STAT_KEYS)
            row += f" {r.oom_kills if first else '':>4}"
            out.append(row)
        if not r.finished:
            out.append(f"  ! not finished within the simulated time limit ({r.sim_seconds:.0f} s)")
    lat = [r for r in results if r.latency_ms]
    if lat:
        out.append("")
        out.append("resident server response latency (ms)")
        lh = f"{'case':<10} {'scheduler':<19} {'phase':<11}" + "".join(
            f"{k:>8}" for k in LATENCY_KEYS
        )
        out += [lh, "-" * len(lh)]
        for r in lat:
            for phase, d in r.latency_ms.items():
                out.append(
                    f"{r.case:<10} {r.scheduler:<19} {phase:<11}"
                    + "".join(_fmt(d.get(k, math.nan), 8, 2) for k in LATENCY_KEYS)
                )
    out.append("")
    out.append(
        "node use from submission to the last job's end: nodes never used (no pod ran there), "
        "idle nodes (mean per second of nodes running no pod), busy nodes (mean of the others)"
    )
    for r in results:
        use = node_use(r)
        out.append(
            f"{r.case:<10} {r.scheduler:<19} never used {use['never_used']:>3} of"
            f" {use['nodes']:<3} idle {use['idle_mean']:5.1f}  busy {use['busy_mean']:5.1f}"
        )
    sim = sum(r.sim_seconds for r in results)
    wall = sum(r.wall_seconds for r in results)
    out.append("")
    out.append(
        f"simulated {sim:.0f} s in {wall:.1f} s wall ({sim / max(wall, 1e-9):.0f} simulated s "
        "per wall s); job and pod times in seconds; pod time = bind to container exit"
    )
    return "\n".join(out)


def node_use(r: CaseResult) -> dict[str, float]:
    """How many nodes the run left empty, counted on the per-second samples from the jobs'
    submission on: ``never_used`` nodes ran no pod in any of them; ``idle_mean`` is the mean
    number of nodes running no pod per second, ``busy_mean`` the mean of the others (what a
    cluster autoscaler could have given back, or had to keep)."""
    rows = [n for t, n in zip(r.timeline_t, r.running_per_node, strict=True) if t > r.submitted_at]
    nodes = len(r.running_per_node[0]) if r.running_per_node else 0
    if not rows:
        return {"nodes": nodes, "never_used": nodes, "idle_mean": nodes, "busy_mean": 0.0}
    counts = [list(col) for col in zip(*rows, strict=True)]
    never = sum(1 for col in counts if not any(col))
    idle = sum(sum(1 for x in row if x == 0) for row in rows) / len(rows)
    return {"nodes": nodes, "never_used": never, "idle_mean": idle, "busy_mean": nodes - idle}


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def to_json(results: Sequence[CaseResult], seed: int, params: ModelParams) -> dict[str, Any]:
    """Everything measured, JSON-ready (NaN becomes null)."""
    runs = []
    for r in results:
        runs.append(
            {
                "scenario": r.scenario,
                "case": r.case,
                "scheduler": r.scheduler,
                "seed": r.seed,
                "finished": r.finished,
                "job_completion_s": r.job_completion_s,
                "jobs": [
                    {
                        "name": j.name,
                        "pods": j.pods,
                        "completion_s": j.completion_s,
                        "pod_completion_s": j.pod_completion,
                    }
                    for j in r.jobs
                ],
                "timeline": {
                    "t": r.timeline_t,
                    "running_per_node": r.running_per_node,
                    "cpu_util": r.cpu_util,
                    "mem_util": r.mem_util,
                },
                "latency_ms": r.latency_ms,
                "node_use": node_use(r),
                "oom_kills": r.oom_kills,
                "scheduler_attempts": r.scheduler_attempts,
                "api_calls": r.api_calls,
                "sim_seconds": r.sim_seconds,
                "wall_seconds": r.wall_seconds,
            }
        )
    return _clean({"seed": seed, "params": params.describe(), "runs": runs})


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def write_plots(results: Sequence[CaseResult], out_dir: Path) -> list[Path]:
    """Per case: running pods per node and cluster utilisation over time, a panel per scheduler."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    by_case: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        by_case.setdefault((r.scenario, r.case), []).append(r)
    written = []
    for (scenario, case), runs in by_case.items():
        base = f"{_slug(scenario)}_{_slug(case)}"
        for kind in ("running", "util"):
            fig, axes = plt.subplots(
                len(runs), 1, figsize=(9, 2.6 * len(runs)), squeeze=False, sharex=True
            )
            for ax, r in zip(axes[:, 0], runs, strict=True):
                if kind == "running":
                    per_node = (
                        list(zip(*r.running_per_node, strict=True)) if r.running_per_node else []
                    )
                    for series in per_node:
                        ax.plot(r.timeline_t, series, linewidth=0.8)
                    ax.set_ylabel("running pods")
                else:
                    ax.plot(r.timeline_t, [100 * x for x in r.cpu_util], label="CPU")
                    ax.plot(r.timeline_t, [100 * x for x in r.mem_util], label="memory")
                    ax.set_ylim(0, 105)
                    ax.set_ylabel("utilisation %")
                    ax.legend(loc="upper right", fontsize="small")
                ax.set_title(f"{scenario} {case} - {r.scheduler}", fontsize="medium")
                ax.grid(alpha=0.3)
            axes[-1, 0].set_xlabel("simulated time (s)")
            fig.tight_layout()
            path = out_dir / f"{base}_{kind}.png"
            fig.savefig(path, dpi=90)
            plt.close(fig)
            written.append(path)
    return written
