"""The ``carico`` entry point dispatches to components and says clearly what is not built."""

import subprocess
import sys

from carico_app import cli


def test_help_lists_every_component() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "carico_app.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in cli.COMMANDS:
        assert name in out


def test_unbuilt_component_exits_2_with_a_message(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(cli.COMMANDS, "nothing", ("carico.does_not_exist", "placeholder"))
    assert cli.main(["nothing"]) == 2
    assert "not available yet" in capsys.readouterr().err


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    """`carico repack --from-file cluster.json | head`: the pipe closes while carico still
    writes (a stand-in for the repack command writes a long plan here); it ends
    with the SIGPIPE status and nothing on stderr."""
    script = (
        "import sys\n"
        "from carico_app import cli\n"
        "class Gone:\n"
        "    def add_arguments(self, parser): pass\n"
        "    def run(self, args):\n"
        "        for _ in range(100000):\n"
        "            print('line of a long plan')\n"
        "        return 0\n"
        "cli._load = lambda name: Gone()\n"
        "sys.exit(cli.main(['repack']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"line of a long plan\n"
    proc.stdout.close()  # the reader leaves
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == cli.BROKEN_PIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err
