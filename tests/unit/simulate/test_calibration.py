"""Calibration: the ``default`` rows reproduce the CARICO dissertation's measurements.

Reference values are the dissertation's (chapter 5), means of its repeated runs:
* Table 5.2, job completion (s) of a bpi(2000) Job, default scheduler:
  500 pods: 100m 56, 500m 57.7, 1000m 96; 1000 pods: 100m 112, 500m 104, 1000m 175.
* Table 5.3, pod completion mean (s), 1000-pod bpi Job (the run of its Figure 5.1):
  100m 47.43, 500m 9.55.
* Table 5.4, job completion (s) of the small ML Job at 200m / 750Mi: 100 pods 144.3, 200 pods 362.
Bands: +-25 % (Tables 5.2, 5.3) and +-30 % (Table 5.4). The model's fitted parameters and how
they were chosen are in docs/simulator.md; this test guards that a change to the model does not
silently lose the calibration. One seed: over seeds 1-5 the model's values for these cells vary
by at most 11 % (500 pods at 1000m; most by under 3 %), which the distances to the band edges in
docs/simulator.md cover.
"""

from __future__ import annotations

import pytest

from carico_app.simulate import scenarios
from carico_app.simulate.engine import CaseResult, run_case
from carico_app.simulate.params import ModelParams
from carico_app.simulate.schedulers import parse_spec

TABLE_5_2 = {  # (pods, request) -> job completion s
    (500, "100m"): 56.0,
    (500, "500m"): 57.7,
    (500, "1000m"): 96.0,
    (1000, "100m"): 112.0,
    (1000, "500m"): 104.0,
    (1000, "1000m"): 175.0,
}
TABLE_5_3 = {"100m": 47.43, "500m": 9.55}  # 1000 pods, pod completion mean s
TABLE_5_4 = {100: 144.3, 200: 362.0}  # ML job completion s at 200m/750Mi

_cache: dict[tuple[str, str, str], CaseResult] = {}


def _run(scenario: str, case: str, scheduler: str) -> CaseResult:
    key = (scenario, case, scheduler)
    if key not in _cache:
        s = scenarios.get(scenario)
        _cache[key] = run_case(s, s.case(case), parse_spec(scheduler), ModelParams(), seed=1)
    return _cache[key]


@pytest.mark.slow
@pytest.mark.parametrize(("pods", "cpu"), sorted(TABLE_5_2))
def test_job_completion_matches_table_5_2(pods: int, cpu: str) -> None:
    r = _run("cpu-jobs", f"{pods} pods", f"default:{cpu}")
    assert r.finished
    assert r.job_completion_s == pytest.approx(TABLE_5_2[(pods, cpu)], rel=0.25)


@pytest.mark.slow
@pytest.mark.parametrize("cpu", sorted(TABLE_5_3))
def test_pod_completion_mean_matches_table_5_3(cpu: str) -> None:
    r = _run("cpu-jobs", "1000 pods", f"default:{cpu}")
    assert r.jobs[0].pod_completion["mean"] == pytest.approx(TABLE_5_3[cpu], rel=0.25)


@pytest.mark.slow
@pytest.mark.parametrize("pods", sorted(TABLE_5_4))
def test_ml_job_completion_matches_table_5_4(pods: int) -> None:
    r = _run("ml-jobs", f"{pods} pods", "default:200m/750Mi")
    assert r.finished
    assert r.job_completion_s == pytest.approx(TABLE_5_4[pods], rel=0.30)
