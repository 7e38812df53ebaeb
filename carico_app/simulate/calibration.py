"""The dissertation's measured default-scheduler results, and the model's values beside them.

Reference values: the CARICO dissertation, chapter 5 (means of its repeated runs). Cells marked
with a band are the calibration targets (``carico simulate --calibrate`` checks them, and
tests/unit/simulate/test_calibration.py asserts them); the others are shown for comparison only.

Neighbours: ``engine.py`` runs the cases, ``cli.py`` prints ``comparison_table``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from carico_app.simulate import scenarios
from carico_app.simulate.engine import CaseResult, run_case
from carico_app.simulate.params import ModelParams
from carico_app.simulate.schedulers import parse_spec


@dataclass(frozen=True)
class Cell:
    source: str  # table and row of the dissertation
    scenario: str
    case: str
    scheduler: str
    metric: str  # "job" (all jobs done), "pod_mean:<job>", "job:<job>"
    reference: float  # seconds
    band: float | None  # relative tolerance when this cell is a calibration target


def _cpu(pods: int, cpu: str, ref: float, band: float | None) -> Cell:
    return Cell("Table 5.2", "cpu-jobs", f"{pods} pods", f"default:{cpu}", "job", ref, band)


_T52 = {
    "100m": (15.7, 31.7, 56.0, 84.7, 112.0),
    "200m": (15.7, 30.7, 55.0, 79.0, 103.0),
    "500m": (15.7, 32.0, 57.7, 81.0, 104.0),
    "1000m": (21.0, 54.7, 96.0, 133.0, 175.0),
}

CELLS: tuple[Cell, ...] = (
    *(
        _cpu(n, cpu, ref, 0.25 if n in (500, 1000) and cpu != "200m" else None)
        for cpu, refs in _T52.items()
        for n, ref in zip((100, 250, 500, 750, 1000), refs, strict=True)
    ),
    Cell("Table 5.3", "cpu-jobs", "1000 pods", "default:100m", "pod_mean:bpi", 47.43, 0.25),
    Cell("Table 5.3", "cpu-jobs", "1000 pods", "default:500m", "pod_mean:bpi", 9.55, 0.25),
    Cell("Table 5.4", "ml-jobs", "100 pods", "default:200m/750Mi", "job", 144.3, 0.30),
    Cell("Table 5.4", "ml-jobs", "200 pods", "default:200m/750Mi", "job", 362.0, 0.30),
    Cell("Table 5.5", "ml-jobs", "100 pods", "default:200m/750Mi", "pod_mean:ml", 127.38, None),
    Cell("Table 5.5", "ml-jobs", "200 pods", "default:200m/750Mi", "pod_mean:ml", 225.19, None),
    Cell("Table 5.6", "mixed", "500+20", "default", "job", 105.7, None),
    Cell("Table 5.6", "mixed", "250+50", "default", "job", 118.0, None),
    Cell("Table 5.6", "mixed", "100+100", "default", "job", 149.0, None),
    Cell("Table 5.7", "mixed", "500+20", "default", "pod_mean:bpi", 28.78, None),
    Cell("Table 5.7", "mixed", "500+20", "default", "pod_mean:ml", 65.25, None),
)


def value(result: CaseResult, metric: str) -> float:
    if metric == "job":
        return result.job_completion_s
    kind, _, job = metric.partition(":")
    for j in result.jobs:
        if j.name == job:
            return j.completion_s if kind == "job" else j.pod_completion["mean"]
    raise ValueError(f"no job {job!r} in {result.case}")


def evaluate(
    params: ModelParams,
    seed: int,
    cells: Sequence[Cell] = CELLS,
    progress: Callable[[str], None] | None = None,
) -> list[tuple[Cell, float]]:
    """Run each needed case once and pair every cell with the simulated value."""
    runs: dict[tuple[str, str, str], CaseResult] = {}
    out = []
    for cell in cells:
        key = (cell.scenario, cell.case, cell.scheduler)
        if key not in runs:
            if progress is not None:
                progress(f"running {cell.scenario} {cell.case} {cell.scheduler}")
            s = scenarios.get(cell.scenario)
            runs[key] = run_case(s, s.case(cell.case), parse_spec(cell.scheduler), params, seed)
        out.append((cell, value(runs[key], cell.metric)))
    return out


def comparison_table(rows: Sequence[tuple[Cell, float]]) -> tuple[str, bool]:
    """The side-by-side table and whether every calibration target is inside its band."""
    head = (
        f"{'source':<10} {'scenario':<9} {'case':<10} {'scheduler':<19} {'metric':<12} "
        f"{'dissertation':>12} {'simulated':>10} {'diff':>7}  band"
    )
    lines = [head, "-" * len(head)]
    ok = True
    for cell, sim in rows:
        diff = (sim - cell.reference) / cell.reference
        if cell.band is None:
            verdict = "(reference only)"
        else:
            inside = abs(diff) <= cell.band
            ok = ok and inside
            verdict = f"+-{cell.band:.0%} {'ok' if inside else 'OUT'}"
        lines.append(
            f"{cell.source:<10} {cell.scenario:<9} {cell.case:<10} {cell.scheduler:<19} "
            f"{cell.metric:<12} {cell.reference:>12.1f} {sim:>10.1f} {diff:>+7.0%}  {verdict}"
        )
    return "\n".join(lines), ok
