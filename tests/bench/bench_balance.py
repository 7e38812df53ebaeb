"""Balancing engine benchmark: ``carico_app.balance_bench`` with its default grid.

Baselines: greedy passes written in the benchmark (the fragmentation article's swap loop,
a descheduler-style HighNodeUtilization pass, a simple defragmenting greedy), run in the same
process on the same instances with the same bounds. Extra arguments go to the benchmark
(``--full`` for five seeds of every size with long solves on all of them).
"""

from __future__ import annotations

import sys

from carico_app.balance_bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
