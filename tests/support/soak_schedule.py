"""The chaos soak's fault schedule: which component to hurt, how and when, from a seed.

Pure: a seed, a duration and the node names give the same list of faults every time, so a run
that failed is replayed with ``--seed``. Faults run one at a time (the harness waits for the
component to recover before the next), so ``at`` is the earliest start, not a promise. Kinds are
drawn from shuffled rounds of every enabled kind, so even a short run meets each kind once before
any kind twice. No fault starts in the first ``warmup_s`` (the workload and the agents settle) nor
in the last ``quiet_s`` (the workload must be able to finish on a healthy system before the final
checks). Neighbours: tests/e2e/soak_bed.py (carries the faults out), soak_invariants.py.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

KILL_EXTENDER = "kill-extender"
KILL_AGGREGATOR = "kill-aggregator"
KILL_AGENT = "kill-agent"
PAUSE_AGENT = "pause-agent"  # SIGSTOP then SIGCONT: the agent's data goes stale
CUT_AGENT = "cut-agent"  # the agent's TCP connections to extender and aggregator cut
RESTART_SCHEDULER = "restart-scheduler"
RESTART_ETCD = "restart-etcd"
RESTART_APISERVER = "restart-apiserver"
REPACK = "repack"  # POST /repack to the extender in apply mode

FAULT_KINDS = (
    KILL_EXTENDER,
    KILL_AGGREGATOR,
    KILL_AGENT,
    PAUSE_AGENT,
    CUT_AGENT,
    RESTART_SCHEDULER,
    RESTART_ETCD,
    RESTART_APISERVER,
    REPACK,
)
PER_NODE = frozenset({KILL_AGENT, PAUSE_AGENT, CUT_AGENT})
HELD = frozenset({PAUSE_AGENT, CUT_AGENT})  # faults that last ``hold_s`` before being undone


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the soak's start, earliest
    kind: str
    target: str = ""  # the node, for the per-node kinds
    hold_s: float = 0.0  # how long a pause or a cut lasts

    def describe(self) -> str:
        target = f" {self.target}" if self.target else ""
        hold = f" for {self.hold_s:.0f}s" if self.hold_s else ""
        return f"t+{self.at:6.1f}s {self.kind}{target}{hold}"


def fault_schedule(
    seed: int,
    duration_s: float,
    nodes: Sequence[str],
    *,
    mean_gap_s: float = 20.0,
    warmup_s: float = 15.0,
    quiet_s: float = 15.0,
    hold_s: tuple[float, float] = (8.0, 15.0),
    kinds: Sequence[str] = FAULT_KINDS,
) -> list[Fault]:
    """Faults between ``warmup_s`` and ``duration_s - quiet_s``, exponential gaps of mean
    ``mean_gap_s`` (at least a fifth of it, so recoveries do not pile up)."""
    if not kinds:
        raise ValueError("no fault kinds to draw from")
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(unknown)}")
    if not nodes and PER_NODE.intersection(kinds):
        raise ValueError("per-node faults need node names")
    rng = random.Random(seed)
    end = duration_s - quiet_s
    faults: list[Fault] = []
    pool: list[str] = []
    t = warmup_s
    while True:
        t += max(rng.expovariate(1.0 / mean_gap_s), mean_gap_s / 5.0)
        if t > end:
            return faults
        if not pool:
            pool = list(kinds)
            rng.shuffle(pool)
        kind = pool.pop()
        target = rng.choice(list(nodes)) if kind in PER_NODE else ""
        hold = round(rng.uniform(*hold_s), 1) if kind in HELD else 0.0
        faults.append(Fault(round(t, 1), kind, target, hold))


def format_schedule(seed: int, faults: Sequence[Fault]) -> str:
    """The schedule as printed before the run: enough to replay it with ``--seed``."""
    lines = [f"fault schedule (seed {seed}, {len(faults)} faults; replay with --seed {seed}):"]
    lines += [f"  {f.describe()}" for f in faults]
    return "\n".join(lines)
