"""``carico agent --help`` documents every flag with its environment variable."""

from __future__ import annotations

import argparse
import os

import pytest

from agent import cli
from carico.cliargs import env_name


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="carico agent")
    cli.add_arguments(p)
    return p


def test_every_flag_is_documented_with_its_environment_variable() -> None:
    p = parser()
    text = p.format_help()
    flags = [
        s for a in p._actions for s in a.option_strings if s.startswith("--") and s != "--help"
    ]
    flags = [f for f in flags if not f.startswith("--no-") or f == "--no-kube"]
    assert "--no-no-kube" not in text
    assert len(flags) >= 20
    for flag in flags:
        assert flag in text
        assert env_name(flag) in text, flag


def test_environment_sets_defaults_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARICO_FEATURES", "cpu,memory,io_pressure")
    monkeypatch.setenv("CARICO_EXCHANGE_INTERVAL", "7")
    monkeypatch.setenv("CARICO_NO_KUBE", "true")
    args = parser().parse_args(["--exchange-interval", "3"])
    assert args.features == ("cpu", "memory", "io_pressure")
    assert args.exchange_interval == 3.0
    assert args.no_kube is True
    assert args.metrics_port is None  # resolved at start: 9464, or off in standalone mode


def test_switches_on_the_command_line() -> None:
    args = parser().parse_args(["--no-kube", "--standalone"])
    assert args.no_kube is True and args.standalone is True
    args = parser().parse_args([])
    assert args.no_kube is False and args.standalone is False


@pytest.mark.parametrize(
    "argv",
    [
        ["--sample-hz", "0"],
        ["--batch", "0"],
        ["--metrics-port", "70000"],
        ["--features", "x"],
        ["--max-pods", "0"],
    ],
)
def test_bad_values_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(argv)


def test_blas_is_single_threaded_unless_the_operator_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.cli import _single_threaded_blas

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    _single_threaded_blas()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "1"
    assert os.environ["OMP_NUM_THREADS"] == "4"  # an operator's setting stands
