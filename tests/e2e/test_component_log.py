"""A restarted control-plane component reports only its own output when it fails."""

from __future__ import annotations

from pathlib import Path

from e2e_controlplane import Component


def test_log_tail_shows_only_the_latest_start(tmp_path: Path) -> None:
    component = Component("probe", ["sh", "-c", "echo first run; exit 1"], tmp_path)
    component.start()
    assert component.proc is not None
    component.proc.wait(10)
    component.argv = ["sh", "-c", "echo second run"]
    component.start()
    component.proc.wait(10)
    component.stop()
    # Both runs are kept in the file; the tail is the second run's alone.
    assert (tmp_path / "probe.log").read_text() == "first run\nsecond run\n"
    assert component.log_tail() == "second run"
