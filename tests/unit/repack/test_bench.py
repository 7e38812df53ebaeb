"""``carico repack-bench`` on a one-cell grid: classification, report and best-known cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from carico_app.cli import main
from carico_app.repack_bench import Run, classify, reaches
from repack.problem.generator import Cell, generate, instances
from repack.problem.plan import empty_plan


def test_generator_is_deterministic_and_keeps_only_pending_instances() -> None:
    cell = Cell(4, 4, 100, 2)
    assert generate(cell, 3) == generate(cell, 3)
    found = instances(cell, 2)
    assert len(found) == 2
    for _, snap in found:
        assert any(p.pending for p in snap.pods)
        # identical nodes sized so that the largest pod fits
        caps = {tuple(sorted(n.allocatable.items())) for n in snap.nodes}
        assert len(caps) == 1
        cpu = snap.nodes[0].allocatable["cpu"]
        assert max(p.requests["cpu"] for p in snap.pods) <= cpu


def test_classification() -> None:
    snap = generate(Cell(4, 4, 100, 1), 0)
    assert classify(empty_plan(snap, "NO_IMPROVEMENT", True, 0.1, "classes")) == "Default-Optimal"
    assert classify(empty_plan(snap, "NO_IMPROVEMENT", False, 0.1, "classes")) == "Failure"
    assert classify(empty_plan(snap, "ERROR", False, 0.1, "classes")) == "Failure"


def test_bench_runs_a_small_grid_and_caches_best_known(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "best.json"
    args = [
        "repack-bench",
        "--nodes",
        "4",
        "--pods-per-node",
        "4",
        "--usage",
        "100",
        "--tiers",
        "1",
        "--instances",
        "1",
        "--limits",
        "2",
        "--cache",
        str(cache),
        "--workers",
        "2",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "cell n4-ppn4-u100-k1" in out
    assert "time ratio classes/per-pod" in out
    stored = json.loads(cache.read_text())
    assert list(stored) == ["n4-ppn4-u100-k1/seed0"]
    # this small instance is proven by the runs themselves, so the cache holds a proven optimum
    assert stored["n4-ppn4-u100-k1/seed0"]["proven"] is True


def test_reaches_counts_whole_outcomes_and_placed_counts_apart() -> None:
    best: dict[tuple[str, int], tuple[int, ...]] = {
        ("c", 0): (10, -3, 20, -5),
        ("c", 1): (10, -3, 20, -5),
        ("c", 2): (10, -3, 20, -5),
    }

    def run(seed: int, vector: tuple[int, ...]) -> Run:
        return Run("c", seed, "classes", 1.0, "Better", vector, (8, 0, 18, 0), 1.0, False, 1.0)

    runs = [
        run(0, (10, -3, 20, -5)),  # the best-known outcome
        run(1, (10, -4, 20, -7)),  # as many pods placed at both tiers, more moves
        run(2, (10, -3, 19, -5)),  # one pod fewer at the lower tier
    ]
    assert reaches(runs, best) == (1, 2)
