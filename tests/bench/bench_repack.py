"""Repacker benchmark: ``carico repack-bench`` with its default representative subset.

Baseline: the per-pod formulation (the Priority Matters paper's model), run in the same process on
the same instances with the same limits. Best-known outcomes are cached in
``tests/bench/data/repack_best_known.json`` (committed, so a run only pays for long solves of
instances it has not seen). Extra arguments go to ``carico repack-bench`` (e.g. ``--full``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from carico_app.repack_bench import main

CACHE = Path(__file__).resolve().parent / "data" / "repack_best_known.json"

if __name__ == "__main__":
    sys.exit(main(["--cache", str(CACHE), *sys.argv[1:]]))
