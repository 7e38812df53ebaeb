"""The ``carico`` entry point dispatches to components and says clearly what is not built."""

import subprocess
import sys

from carico import cli


def test_help_lists_every_component() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "carico.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in cli.COMMANDS:
        assert name in out


def test_unbuilt_component_exits_2_with_a_message(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(cli.COMMANDS, "nothing", ("carico.does_not_exist", "placeholder"))
    assert cli.main(["nothing"]) == 2
    assert "not available yet" in capsys.readouterr().err
