"""Running cases end to end: determinism, measurements, table/JSON/PNG outputs, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from carico_app.simulate import cli, scenarios
from carico_app.simulate.engine import distribution, run_case
from carico_app.simulate.params import BPI_2000, ML_SMALL, ModelParams
from carico_app.simulate.report import header, table, to_json, write_plots
from carico_app.simulate.scenarios import Case, JobSpec, Scenario
from carico_app.simulate.schedulers import parse_spec

SMALL = Scenario(
    "small",
    "test scenario",
    (
        Case("20 pods", (JobSpec("bpi", BPI_2000, 20),)),
        Case("mixed", (JobSpec("bpi", BPI_2000, 10), JobSpec("ml", ML_SMALL, 2))),
    ),
    ("default:500m",),
    nodes=2,
)


def test_distribution_keys_and_values() -> None:
    d = distribution(np.arange(1, 101, dtype=float))
    assert list(d) == ["mean", "std", "min", "p25", "p50", "p75", "p95", "p99", "max"]
    assert (d["mean"], d["min"], d["max"]) == (50.5, 1.0, 100.0)
    assert d["p50"] == pytest.approx(50.5)
    assert math.isnan(distribution(np.array([]))["mean"])


def test_same_seed_same_run_other_seed_other_run() -> None:
    spec, params = parse_spec("default:500m"), ModelParams()
    a = run_case(SMALL, SMALL.cases[0], spec, params, seed=5)
    b = run_case(SMALL, SMALL.cases[0], spec, params, seed=5)
    c = run_case(SMALL, SMALL.cases[0], spec, params, seed=6)
    assert a.finished and a.jobs[0].pods == 20
    assert a.job_completion_s == b.job_completion_s
    assert a.jobs[0].pod_completion == b.jobs[0].pod_completion
    assert a.running_per_node == b.running_per_node
    assert a.jobs[0].pod_completion != c.jobs[0].pod_completion


def test_measurements_are_consistent() -> None:
    r = run_case(SMALL, SMALL.cases[1], parse_spec("default"), ModelParams(), seed=1)
    assert r.finished and [j.name for j in r.jobs] == ["bpi", "ml"]
    assert r.job_completion_s == max(j.completion_s for j in r.jobs)
    for j in r.jobs:
        d = j.pod_completion
        assert d["min"] <= d["p25"] <= d["p50"] <= d["p75"] <= d["p95"] <= d["p99"] <= d["max"]
        # A pod cannot complete faster than its CPU work on all its threads after 1 s start-up.
        work = BPI_2000 if j.name == "bpi" else ML_SMALL
        assert d["min"] >= 1.0 + work.cpu_work / min(work.threads, 4)
        assert d["max"] <= j.completion_s
    assert len(r.timeline_t) == len(r.running_per_node) == len(r.cpu_util) == len(r.mem_util)
    assert max(max(x) for x in r.running_per_node) > 0
    assert all(0.0 <= u <= 1.0 for u in r.cpu_util + r.mem_util)


def test_table_json_and_plots(tmp_path: Path) -> None:
    params = ModelParams()
    r = run_case(SMALL, SMALL.cases[0], parse_spec("default:500m"), params, seed=1)
    text = table([r])
    assert "default:500m" in text and "20 pods" in text and "p99" in text
    assert "seed=3" in header(3, params) and "contention_overhead=0.14" in header(3, params)
    doc = json.loads(json.dumps(to_json([r], 1, params)))
    assert set(doc) == {"seed", "params", "runs"}
    run0 = doc["runs"][0]
    assert {"scenario", "case", "scheduler", "job_completion_s", "jobs", "timeline"} <= set(run0)
    assert set(run0["jobs"][0]["pod_completion_s"]) == {
        "mean", "std", "min", "p25", "p50", "p75", "p95", "p99", "max"
    }  # fmt: skip
    assert set(run0["timeline"]) == {"t", "running_per_node", "cpu_util", "mem_util"}
    paths = write_plots([r], tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["small_20-pods_running.png", "small_20-pods_util.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def parse(argv: list[str]):  # type: ignore[no-untyped-def]
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_json_and_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = parse(["--scenario", "cpu-jobs", "--cases", "100", "--schedulers", "default:500m",
                  "--json", "--seed", "9", "--out", str(tmp_path)])  # fmt: skip
    assert cli.run(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seed"] == 9 and doc["runs"][0]["case"] == "100 pods"
    assert (tmp_path / "cpu-jobs_100-pods_running.png").exists()

    assert cli.run(parse(["--scenario", "nope"])) == 2
    assert "unknown scenario" in capsys.readouterr().err
    assert cli.run(parse(["--cases", "123"])) == 2
    assert cli.run(parse(["--set", "bogus=1"])) == 2
    assert "unknown model parameter" in capsys.readouterr().err
    assert cli.run(parse(["--set", "startup_min=9"])) == 2  # above startup_max
    assert cli.run(parse(["--list"])) == 0
    assert "isolation" in capsys.readouterr().out


def test_cli_table_prints_seed_and_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["--scenario", "cpu-jobs", "--cases", "100", "--schedulers", "default:1000m",
                  "--set", "node.cores=8"])  # fmt: skip
    assert cli.run(args) == 0
    out = capsys.readouterr().out
    assert "seed=1" in out and "node.cores=8" in out and "default:1000m" in out


def test_every_named_scenario_is_well_formed() -> None:
    assert set(scenarios.SCENARIOS) == {
        "cpu-jobs",
        "ml-jobs",
        "mixed",
        "heterogeneous",
        "isolation",
    }
    for s in scenarios.SCENARIOS.values():
        assert s.nodes == 19 and s.cases and s.schedulers
        for spec in s.schedulers:
            parse_spec(spec)
    assert [c.label for c in scenarios.get("mixed").cases] == ["500+20", "250+50", "100+100"]


def test_isolation_reports_baseline_and_loaded_latency() -> None:
    iso = Scenario(
        "iso",
        "small isolation",
        (Case("60 pods", (JobSpec("bpi", BPI_2000, 60),), resident=scenarios.SERVER, warmup=5.0),),
        ("default:100m",),
        nodes=2,
    )
    r = run_case(iso, iso.cases[0], parse_spec("default:100m"), ModelParams(), seed=1)
    base, loaded = r.latency_ms["baseline"], r.latency_ms["during_job"]
    assert base["p50"] == pytest.approx(scenarios.SERVER_LATENCY_MEDIAN_MS, rel=0.25)
    assert loaded["p50"] > 2 * base["p50"]  # 30 CPU-bound pods per 4-core node slow it down
