"""``carico repack --from-file`` on a small kubectl-style dump: table and JSON outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repack_builders import fragmentation_list, kube_list, node_obj, pod_obj

from carico_app.cli import main
from repack.problem.plan import STEP_NAMES


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(fragmentation_list()))
    return path


def test_json_output_has_the_documented_fields(
    dump: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        [
            "repack",
            "--from-file",
            str(dump),
            "--time-limit",
            "3",
            "--output",
            "json",
            "--workers",
            "2",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "OPTIMAL" and out["optimal"] is True
    assert isinstance(out["solve_seconds"], float)
    assert out["before"]["placed_by_priority"] == {"0": 9}
    assert out["after"]["placed_by_priority"] == {"0": 10}
    assert out["placements"] == [{"pod": "default/pending", "to": "node-a"}]
    assert len(out["moves"]) == 1 and set(out["moves"][0]) >= {"pod", "from", "to"}
    assert out["evictions"] == []
    assert [s["action"] for s in out["steps"]] == ["move", "place"]
    assert [(p["tier"], p["phase"], p["status"]) for p in out["phases"]] == [
        (0, "place", "OPTIMAL"),
        (0, "disrupt", "OPTIMAL"),
    ]
    assert all(isinstance(p["seconds"], float) for p in out["phases"])
    # each phase lists the steps it took: none where its start was already optimal
    for phase in out["phases"]:
        assert bool(phase["steps"]) != phase["skipped"], phase
        for step in phase["steps"]:
            assert set(step) == {"name", "value", "bound", "cores"}
            assert step["name"] in STEP_NAMES


def test_table_output(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["repack", "--from-file", str(dump), "--time-limit", "3", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "status: OPTIMAL" in out
    assert "default/pending" in out and "(pending) -> node-a" in out
    assert "1 move(s), 1 placement(s), 0 eviction(s)" in out
    # the phases with the steps each took
    phases = out[out.index("tier  phase    status      value  bound  seconds  steps") :]
    assert any(name in phases for name in STEP_NAMES)


def test_stdin_and_per_pod(
    dump: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(dump.read_text()))
    rc = main(
        [
            "repack",
            "--from-file",
            "-",
            "--formulation",
            "per-pod",
            "--output",
            "json",
            "--time-limit",
            "3",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["formulation"] == "per-pod" and out["status"] == "OPTIMAL"


@pytest.mark.parametrize(
    "content", ["not json", '{"kind": "Pod"}', '{"items": [{"kind": "Node"}]}']
)
def test_bad_input_exits_2_with_a_message(
    tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["repack", "--from-file", str(path)]) == 2
    assert "carico repack:" in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["repack", "--from-file", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in capsys.readouterr().err


def test_consolidate_mode_reports_the_nodes_that_could_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--mode consolidate``: the balancing engine, not the pending pod's repack; three
    1000m / 2G nodes hold 0.8 cores of pods, a plan frees nodes and says which; ``--usage`` is
    read and reported as the basis of the balance goal."""
    sizes = {"node-a": ("300m", "700M"), "node-b": ("200m", "600M"), "node-c": ("300m", "500M")}
    doc = kube_list(
        *(node_obj(n) for n in sizes),
        *(
            pod_obj(f"{n}-p", cpu, mem, node=n, owner=("ReplicaSet", f"rs-{n}"))
            for n, (cpu, mem) in sizes.items()
        ),
        pod_obj("pending", "300m", "600M", owner=("ReplicaSet", "rs-new")),
    )
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    args = ["repack", "--from-file", str(path), "--time-limit", "3", "--workers", "2"]
    assert main([*args, "--mode", "consolidate", "--max-share", "1", "--output", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["placements"] == [] and out["evictions"] == []
    goal = out["goal"]
    assert goal["goal"] == "consolidate" and goal["basis"] == "requests"
    assert goal["gain"] >= 1 and len(goal["freed"]) == goal["after"]
    moved_from = {m["from"] for m in out["moves"]}
    assert set(goal["freed"]) <= moved_from  # a node freed is one its pods left
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"default/node-a-p": {"cpu": 50, "memory": 1e8}}))
    assert main([*args, "--mode", "balance", "--usage", str(usage)]) == 0
    assert "measured on telemetry for 1 of 3 pods" in capsys.readouterr().out
    usage.write_text(json.dumps({"default/node-a-p": {"cpu": "lots"}}))
    assert main([*args, "--mode", "balance", "--usage", str(usage)]) == 2


# Found by the fuzz tier: each of these ended in a traceback (IndexError, AttributeError,
# OverflowError, RecursionError), or an error of two lines, instead of a one-line error or a plan.
FUZZ_FOUND = {
    "pods without nodes": None,  # filled below: a valid pending pod and no Node object
    "containers not a list": '{"items": [{"kind": "Pod", "metadata": {"name": "p"},'
    ' "spec": {"containers": 7}}]}',
    "owner references not objects": '{"items": [{"kind": "Pod", "metadata": {"name": "p",'
    ' "ownerReferences": [3]}}]}',
    "disruptionsAllowed an object": '{"items": [{"kind": "PodDisruptionBudget", "metadata":'
    ' {"name": "b"}, "status": {"disruptionsAllowed": {"a": 1}}}]}',
    "infinite priority": '{"items": [{"kind": "Pod", "metadata": {"name": "p"},'
    ' "spec": {"priority": 1e400}}]}',
    "memory of 10^30 bytes": '{"items": [{"kind": "Node", "metadata": {"name": "n"},'
    ' "status": {"allocatable": {"cpu": "1", "memory": "1000000000000000000000000000000"}}}]}',
    "nesting deeper than the recursion limit": "[" * 100_000 + "]" * 100_000,
    # the message quoted the resource's name, a carriage return, and became two lines
    "a resource named by a control character": '{"items": [{"kind": "Node", "metadata":'
    ' {"name": "n"}, "status": {"allocatable": {"cpu": "1", "\\r": null}}}]}',
}


@pytest.mark.parametrize("case", sorted(FUZZ_FOUND))
def test_malformed_dumps_found_by_fuzzing_get_a_clear_answer(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    content = FUZZ_FOUND[case]
    if content is None:
        doc = fragmentation_list()
        doc["items"] = [i for i in doc["items"] if i["metadata"]["name"] == "pending"]
        content = json.dumps(doc)
    path = tmp_path / "bad.json"
    path.write_text(content)
    rc = main(["repack", "--from-file", str(path), "--time-limit", "1", "--workers", "1"])
    err = capsys.readouterr().err
    if case == "pods without nodes":  # a valid dump: nothing can be placed, and it says so
        assert rc == 0 and err == ""
    else:
        assert rc == 2 and err.startswith("carico repack: ") and err.count("\n") == 1, err
