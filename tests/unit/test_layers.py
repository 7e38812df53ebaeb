"""The layer contracts of ``make lint`` fail on the violations they exist for.

``lint-imports`` runs on a copy of the packages with one deliberate bad import added: a service
importing another service, the core importing a service, the engine importing the extender, and
the core importing the solver library. Each must break its contract; the untouched copy must pass
(the same command ``make lint`` runs on the tree itself).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("carico", "carico_app", "agent", "aggregator", "scheduler_ext", "repack", "protos")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(
            REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first: the copy, not the installed tree, is what grimp must find.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tree_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "contract"),
    [
        ("aggregator/store.py", "import agent.pods", "aggregator is not allowed to import agent"),
        ("scheduler_ext/ledger.py", "import aggregator.store", "Layers"),
        ("carico/ema.py", "import scheduler_ext.pods", "Layers"),
        ("repack/problem/plan.py", "import scheduler_ext.slots", "Layers"),
        ("agent/pipeline.py", "import repack.problem.plan", "Only the extender"),
        ("carico/signal.py", "import ortools", "free of the solver"),
    ],
)
def test_a_deliberate_violation_breaks_its_contract(
    tmp_path: Path, module: str, bad_import: str, contract: str
) -> None:
    root = _copy(tmp_path)
    target = root / module
    # At the end of the module: a lazy import inside a function counts as much as a top one.
    target.write_text(target.read_text() + f"\n\ndef _violation() -> None:\n    {bad_import}\n")
    result = _lint(root)
    assert result.returncode != 0, result.stdout
    report = result.stdout.split("Broken contracts")[-1]
    # the report names the broken contract and the very import that breaks it
    assert contract in report, result.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {bad_import.split()[-1]}" in report, result.stdout
