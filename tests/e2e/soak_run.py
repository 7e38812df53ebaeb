"""``make soak``: the chaos soak (soak_bed.py) on a control plane of its own, for as long as
asked (``SOAK_ARGS="--minutes 30 --seed 7"``).

Prints the fault schedule first (replay a run with its ``--seed``), each fault as it happens,
then the report; writes the report as JSON (``--report``). Exits 1 when an invariant was broken.
Needs the control-plane binaries of ``make e2e-bin``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from e2e_controlplane import ControlPlane, ControlPlaneError, locate_binaries
from soak_bed import SoakBed, SoakOptions, format_report
from soak_schedule import FAULT_KINDS

NODE_GRACE_S = 20.0  # as the e2e tier's control plane (conftest.py)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="workload duration")
    p.add_argument("--seed", type=int, default=None, help="fault schedule seed (default: random)")
    p.add_argument("--nodes", type=int, default=3, help="simulated nodes in the pool")
    p.add_argument("--mean-gap", type=float, default=20.0, help="mean seconds between faults")
    p.add_argument(
        "--kinds", default=",".join(FAULT_KINDS), help="comma-separated fault kinds to draw"
    )
    p.add_argument("--report", type=Path, default=None, help="write the report (JSON) here")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    options = SoakOptions(
        minutes=args.minutes,
        seed=seed,
        nodes=args.nodes,
        mean_gap_s=args.mean_gap,
        kinds=tuple(k for k in args.kinds.split(",") if k),
    )
    try:
        bin_dir = locate_binaries()
    except ControlPlaneError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="carico-soak-"))
    print(f"soak: seed {seed}, {args.minutes:g} min, work directory {workdir}", flush=True)
    cp = ControlPlane(workdir / "controlplane", bin_dir, node_monitor_grace_s=NODE_GRACE_S)
    cp.start()
    api = cp.api_client()
    bed = SoakBed(cp, api, workdir / "soak", options, say=lambda s: print(s, flush=True))
    try:
        bed.setup()
        report = bed.run()
    finally:
        bed.teardown()
        api.close()
        cp.stop()
    print(format_report(report), flush=True)
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2) + "\n")
        print(f"soak: report written to {args.report}")
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report["violation_count"] else 0


if __name__ == "__main__":
    sys.exit(main())
