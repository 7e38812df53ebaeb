"""Named scenarios: the CARICO dissertation's evaluation (chapter 5) as simulator inputs.

Cluster [D §5.1]: 19 worker nodes of 4 cores and 8 GB. Jobs are Kubernetes Jobs with
``completions = parallelism = pods`` ([D §4.2.1] varies "completion and parallelism count"
together), all submitted at once.

* ``cpu-jobs`` [D §5.3, Tables 5.2-5.3]: a ``bpi(2000)`` Job of 100, 250, 500, 750 and 1000 pods;
  the default scheduler at 100m, 200m, 500m and 1000m CPU requests.
* ``ml-jobs`` [D §5.4, Tables 5.4-5.5]: a small ML Job of 100 and 200 pods; default at 200m CPU and
  750Mi memory.
* ``mixed`` [D §5.5, Tables 5.6-5.7]: a bpi Job and an ML Job together: 500+20, 250+50, 100+100;
  default at bpi 100m and ML 200m/750Mi.
* ``heterogeneous``: four kinds of pod submitted together — single-thread CPU (bpi), multi-thread
  CPU (ML), memory-heavy and mostly idle — each mis-sized in its own way (``params.MEM_HEAVY``,
  ``params.MOSTLY_IDLE``), so that no single fixed request is right for all of them; default
  at each workload's own requests. Not from the dissertation: it is the case per-class costs
  exist for.
* ``isolation`` [D §5.6, Table 5.8]: a resident server on the first node answers probes while a
  1000-pod bpi Job runs; default at 100m. The probes start ``warmup`` seconds before the Job, which
  gives the baseline distribution.

Neighbours: ``engine.py`` runs a case; ``params.py`` defines the workloads.
"""

from __future__ import annotations

from dataclasses import dataclass

from carico_app.simulate.params import BPI_2000, MEM_HEAVY, MI, ML_SMALL, MOSTLY_IDLE, Workload


@dataclass(frozen=True)
class JobSpec:
    name: str
    workload: Workload
    pods: int
    parallelism: int | None = None  # None: = pods

    @property
    def effective_parallelism(self) -> int:
        return self.pods if self.parallelism is None else self.parallelism


@dataclass(frozen=True)
class Case:
    label: str
    jobs: tuple[JobSpec, ...]
    resident: Workload | None = None  # a long-running server probed for latency
    warmup: float = 0.0  # seconds the resident runs alone before the jobs are submitted


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    cases: tuple[Case, ...]
    schedulers: tuple[str, ...]
    nodes: int = 19

    def case(self, label: str) -> Case:
        for c in self.cases:
            if c.label == label:
                return c
        known = ", ".join(c.label for c in self.cases)
        raise ValueError(f"scenario {self.name} has no case {label!r}; cases: {known}")


# The resident server of the isolation probe: mostly idle (answers requests), 100m requested.
SERVER = Workload(
    name="server",
    cpu_work=float("inf"),
    threads=0.05,
    memory=50 * MI,
    request_cpu_m=100,
    request_mem=64 * MI,
)
# Baseline response latency of that server [D Table 5.8, baseline row: median 3.04 ms, min 0.99].
SERVER_LATENCY_MEDIAN_MS = 3.04
SERVER_LATENCY_SIGMA = 0.25  # log-normal spread; gives p99/median ~1.8 like the baseline row


def _bpi(n: int) -> JobSpec:
    return JobSpec("bpi", BPI_2000, n)


def _ml(n: int) -> JobSpec:
    return JobSpec("ml", ML_SMALL, n)


def _mixed_kinds(bpi: int, ml: int, mem: int, idle: int) -> Case:
    jobs = (_bpi(bpi), _ml(ml), JobSpec("mem", MEM_HEAVY, mem), JobSpec("idle", MOSTLY_IDLE, idle))
    return Case(f"{bpi}+{ml}+{mem}+{idle}", jobs)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "cpu-jobs",
            "bpi(2000) Jobs of 100-1000 pods (dissertation Tables 5.2, 5.3)",
            tuple(Case(f"{n} pods", (_bpi(n),)) for n in (100, 250, 500, 750, 1000)),
            ("default:100m", "default:200m", "default:500m", "default:1000m", "carico"),
        ),
        Scenario(
            "ml-jobs",
            "small ML Jobs of 100 and 200 pods (dissertation Tables 5.4, 5.5)",
            tuple(Case(f"{n} pods", (_ml(n),)) for n in (100, 200)),
            ("default:200m/750Mi", "carico"),
        ),
        Scenario(
            "mixed",
            "a bpi(2000) Job and an ML Job together (dissertation Tables 5.6, 5.7)",
            tuple(
                Case(f"{a}+{b}", (_bpi(a), _ml(b))) for a, b in ((500, 20), (250, 50), (100, 100))
            ),
            ("default", "carico"),
        ),
        Scenario(
            "heterogeneous",
            "bpi, ML, memory-heavy and mostly idle pods together (not in the dissertation)",
            (_mixed_kinds(400, 20, 60, 200), _mixed_kinds(200, 40, 80, 100)),
            ("default", "carico"),
        ),
        Scenario(
            "isolation",
            "latency of a resident server while a 1000-pod bpi Job runs (dissertation Table 5.8)",
            (Case("1000 pods", (_bpi(1000),), resident=SERVER, warmup=20.0),),
            ("default:100m", "carico"),
        ),
    )
}


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
