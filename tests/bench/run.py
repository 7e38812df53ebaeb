"""Run Carico's benchmarks: every ``tests/bench/bench_*.py`` in its own process.

Each benchmark prints its figures as ratios against a baseline it measures in the same run, because
the machines it runs on are shared and noisy. ``run.py NAME ...`` runs only the named benchmarks
(``run.py pipeline`` runs ``bench_pipeline.py``); further arguments after ``--`` go to each one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    names, extra = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :])
        if "--" in argv
        else (
            argv,
            [],
        )
    )
    found = sorted(HERE.glob("bench_*.py"))
    if names:
        wanted = {f"bench_{n.removeprefix('bench_').removesuffix('.py')}.py" for n in names}
        unknown = wanted - {p.name for p in found}
        if unknown:
            print(f"unknown benchmark(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            print(f"available: {', '.join(p.stem.removeprefix('bench_') for p in found)}")
            return 2
        found = [p for p in found if p.name in wanted]
    if not found:
        print("no benchmarks exist yet", file=sys.stderr)
        return 2
    failed = []
    for path in found:
        print(f"=== {path.stem.removeprefix('bench_')} ===", flush=True)
        if subprocess.call([sys.executable, str(path), *extra]) != 0:
            failed.append(path.stem)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
