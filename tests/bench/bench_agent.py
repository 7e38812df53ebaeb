"""Overhead of the node agent: ``carico agent --standalone`` on this machine's real /proc.

Runs the agent for ``--seconds`` (default 60) next to a baseline process started at the same time:
a Python interpreter that imports the agent's modules (numpy, psutil, the model core, the pipeline)
and then sleeps, so that both pay the same start-up and the difference is the cost of sampling at
10 Hz. CPU time and peak RSS come from the kernel's rusage of each child (``os.wait4``): exact, no
sampling. Figures: CPU time as a percentage of one core over the wall time, peak RSS, each next to
the baseline and as a ratio, and against the targets (≤ 1 % of one core, ≤ 80 MB RSS). The whole
run includes the start-up (imports: a fixed cost that a long-running agent pays once); the steady
state is also shown, measured from the children's CPU counters between 10 s after the start and
2 s before the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
TARGET_CPU_PCT = 1.0
TARGET_RSS_MB = 80.0

BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
BASELINE = (
    "import time, numpy, psutil, carico.model, agent.pipeline, agent.proc_source, agent.service;"
    "time.sleep({seconds})"
)


def measure(proc: subprocess.Popen[bytes], started: float) -> tuple[float, float, float]:
    """Wait for ``proc``; return (cpu seconds, peak RSS in MB, wall seconds)."""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, wall


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def kubepods_tree(root: Path, pods: int) -> None:
    """A cgroup v2 kubepods tree (cgroupfs driver) of ``pods`` burstable pods with their files."""
    for i in range(pods):
        pod = root / "kubepods" / "burstable" / f"pod{i:08x}-5b6d-4c7e-8f9a-0b1c2d3e4f5a"
        pod.mkdir(parents=True)
        (pod / "cpu.stat").write_text(f"usage_usec {i * 1000}\nuser_usec 0\nsystem_usec 0\n")
        (pod / "memory.current").write_text(f"{(i + 1) * 2**20}\n")
        # about the size of a real memory.stat (some 40 lines)
        lines = [f"key_{j} {j}" for j in range(38)] + ["inactive_file 4096", "active_file 0"]
        (pod / "memory.stat").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pods", type=int, default=30, help="pods in the cgroup tree")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_agent_") as tmp:
        return run(args, Path(tmp))


def run(args: argparse.Namespace, tmp: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARICO_NODE_NAME": "bench"}
    out_path = tmp / "reports.jsonl"
    pods_out_path = tmp / "reports_pods.jsonl"
    kubepods_tree(tmp / "cgroup", args.pods)
    argv = [sys.executable, "-m", "carico_app.cli", "agent", "--standalone"]
    argv += ["--duration", str(args.seconds)]
    # The plain agent looks for no cgroup tree at all (an empty directory: no kubepods).
    (tmp / "empty").mkdir()
    with open(out_path, "wb") as out, open(pods_out_path, "wb") as pods_out:
        started = time.monotonic()
        agent = subprocess.Popen([*argv, "--cgroup-root", str(tmp / "empty")], stdout=out, env=env)
        with_pods = subprocess.Popen(
            [*argv, "--cgroup-root", str(tmp / "cgroup")], stdout=pods_out, env=env
        )
        # The agent limits BLAS to one thread before numpy loads (agent/cli.py); the baseline
        # does the same, so that both still pay the same start-up.
        baseline_env = {**env, **{n: "1" for n in BLAS_THREAD_VARS if n not in env}}
        baseline = subprocess.Popen(
            [sys.executable, "-c", BASELINE.format(seconds=args.seconds)], env=baseline_env
        )
        procs = (("agent", agent), ("baseline", baseline), ("pods", with_pods))
        window = (10.0, args.seconds - 2.0)
        steady: dict[str, tuple[float, float]] = {}
        if window[1] > window[0] + 5:
            time.sleep(max(0.0, started + window[0] - time.monotonic()))
            t0 = time.monotonic()
            c0 = {n: cpu_seconds(p.pid) for n, p in procs}
            time.sleep(max(0.0, started + window[1] - time.monotonic()))
            t1 = time.monotonic()
            for n, p in procs:
                steady[n] = (cpu_seconds(p.pid) - c0[n], t1 - t0)
        a_cpu, a_rss, a_wall = measure(agent, started)
        b_cpu, b_rss, b_wall = measure(baseline, started)
        p_cpu, p_rss, p_wall = measure(with_pods, started)
    reports = [json.loads(line) for line in out_path.read_text().splitlines()]
    pod_reports = [json.loads(line) for line in pods_out_path.read_text().splitlines()]
    codes = (agent.returncode, baseline.returncode, with_pods.returncode)
    if any(codes) or not reports or not pod_reports:
        print(f"failed: agent, baseline, agent with pods rc={codes}")
        return 1
    a_pct, b_pct = 100 * a_cpu / a_wall, 100 * b_cpu / b_wall
    print(
        f"agent --standalone for {args.seconds:.0f} s on the real /proc: {len(reports)} reports, "
        f"psi_available={reports[-1]['psi_available']}, samples_missing="
        f"{reports[-1]['samples_missing']}"
    )
    print(f"{'figure':<34}{'agent':>12}{'baseline':>12}{'ratio':>10}{'target':>10}")
    print(
        f"{'CPU, % of one core':<34}{a_pct:>12.3f}{b_pct:>12.3f}{a_pct / b_pct:>10.2f}"
        f"{'<= 1.0':>10}"
    )
    print(f"{'CPU seconds':<34}{a_cpu:>12.3f}{b_cpu:>12.3f}{a_cpu / b_cpu:>10.2f}{'':>10}")
    print(
        f"{'CPU above baseline, % of one core':<34}{a_pct - b_pct:>12.3f}{'':>12}{'':>10}{'':>10}"
    )
    if steady:
        sa = 100 * steady["agent"][0] / steady["agent"][1]
        sb = 100 * steady["baseline"][0] / steady["baseline"][1]
        # An idle sleeper's steady CPU rounds to 0: then the ratio is undefined, not infinite.
        ratio = f"{sa / sb:>10.1f}" if sb > 0.001 else f"{'n/a':>10}"
        label = f"CPU steady {steady['agent'][1]:.0f} s, % core"
        print(f"{label:<34}{sa:>12.3f}{sb:>12.3f}{ratio}{'<= 1.0':>10}")
    print(f"{'peak RSS, MB':<34}{a_rss:>12.1f}{b_rss:>12.1f}{a_rss / b_rss:>10.2f}{'<= 80':>10}")
    rss_ok = a_rss <= TARGET_RSS_MB
    verdict = "met" if a_pct <= TARGET_CPU_PCT and rss_ok else "NOT met"
    print(
        f"targets (<= {TARGET_CPU_PCT} % CPU, <= {TARGET_RSS_MB:.0f} MB) over the whole run, "
        f"start-up included: {verdict}"
    )
    if steady:
        verdict = "met" if sa <= TARGET_CPU_PCT and rss_ok else "NOT met"
        print(f"targets in the steady state: {verdict}")
    p_pct = 100 * p_cpu / p_wall
    print(
        f"agent reading {args.pods} pods' cgroups every 0.5 s (per_class in its reports: "
        f"{'per_class' in pod_reports[-1]}), against the agent above:"
    )
    print(f"{'figure':<34}{'with pods':>12}{'agent':>12}{'ratio':>10}")
    print(f"{'CPU, % of one core':<34}{p_pct:>12.3f}{a_pct:>12.3f}{p_pct / a_pct:>10.2f}")
    if steady:
        s_pods = 100 * steady["pods"][0] / steady["pods"][1]
        s_agent = 100 * steady["agent"][0] / steady["agent"][1]
        ratio = f"{s_pods / s_agent:>10.2f}" if s_agent > 0.001 else f"{'n/a':>10}"
        print(f"{'CPU steady, % core':<34}{s_pods:>12.3f}{s_agent:>12.3f}{ratio}")
    print(f"{'peak RSS, MB':<34}{p_rss:>12.1f}{a_rss:>12.1f}{p_rss / a_rss:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
