"""``carico repack`` takes exactly one source, and the extender's repack flags are validated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from carico_app.cli import main


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": []}))
    return path


def test_from_file_and_kubeconfig_are_exclusive(
    dump: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["repack", "--from-file", str(dump), "--kubeconfig", str(dump)])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["repack"])
    assert exit_info.value.code == 2
    assert "one of the arguments --from-file --kubeconfig is required" in capsys.readouterr().err


def test_context_needs_a_kubeconfig(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["repack", "--from-file", str(dump), "--context", "prod"]) == 2
    assert "--context needs --kubeconfig" in capsys.readouterr().err


def test_an_unreadable_kubeconfig_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["repack", "--kubeconfig", str(tmp_path / "missing")]) == 2
    assert "carico repack: cannot load" in capsys.readouterr().err


def test_bad_repack_flags_name_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["extender", "--no-kube", "--repack-debounce=-1"])
    assert exit_info.value.code == 2 and "--repack-debounce" in capsys.readouterr().err
    monkeypatch.setenv("CARICO_REPACK_TIME_LIMIT", "0")
    with pytest.raises(SystemExit) as exit_info:
        main(["extender", "--no-kube"])
    assert "CARICO_REPACK_TIME_LIMIT" in str(exit_info.value.code)


def test_help_documents_the_repack_flags_with_their_environment_variables(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["extender", "--help"])
    out = capsys.readouterr().out
    flags = ("--repack-mode", "--repack-debounce", "--repack-cooldown", "--repack-time-limit")
    for flag in (*flags, "--repack-workers"):
        assert flag in out, flag
        assert "CARICO_" + flag.lstrip("-").replace("-", "_").upper() in out
