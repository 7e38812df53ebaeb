"""Fuzzing ``carico repack --from-file`` with mutated ``kubectl get -o json`` Lists.

The input is the fragmentation example of the repacker's tests (nodes, running and pending pods)
with a PodDisruptionBudget added, mutated structurally (wrong types, missing and extra fields,
huge numbers, deep nesting, duplicate keys) and byte by byte (truncated, not UTF-8, special
numbers), and given to the real command in this process. Properties: it returns 0, 1 or 2 and
never raises; a 2 (unreadable input) says why in one ``carico repack:`` line on stderr.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from repack_builders import fragmentation_list

from carico_app.cli import main

from .conftest import budget, tried
from .mutations import mutated_json

PDB = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {"selector": {"matchLabels": {"app": "web"}}},
    "status": {"disruptionsAllowed": 1},
}


def _dump() -> dict[str, Any]:
    doc = fragmentation_list()
    doc["items"].append(PDB)
    return doc


# Small mutations of the whole dump reach every parser; a few items alone keep documents small.
documents = st.one_of(
    st.just(_dump()),
    st.sampled_from(_dump()["items"]).map(lambda item: {**_dump(), "items": [item]}),
)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-repack-") as tmp:
        yield Path(tmp)


@pytest.mark.fuzz("carico repack --from-file")
def test_repack_from_file_answers_every_mutated_dump(workdir: Path) -> None:
    path = workdir / "cluster.json"

    @budget(60)
    @given(mutated_json(documents, 0))
    def one(content: bytes) -> None:
        tried("carico repack --from-file")
        path.write_bytes(content)
        out, err = io.StringIO(), io.StringIO()
        # one worker and a short budget: the solve is not what is fuzzed, the reading is
        argv = ["repack", "--from-file", str(path), "--time-limit", "0.5", "--workers", "1"]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([*argv, "--output", "json"])
        assert rc in (0, 1, 2), (rc, err.getvalue()[-500:])
        if rc == 2:
            lines = err.getvalue().splitlines()
            assert len(lines) == 1 and lines[0].startswith("carico repack: "), lines[:5]

    one()
