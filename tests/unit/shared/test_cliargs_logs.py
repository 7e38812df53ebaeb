"""Flags with environment equivalents, and JSON log lines."""

import argparse
import datetime
import json
import logging

import numpy as np
import pytest

from carico.cliargs import add_env_argument, add_env_flag, env_name
from carico.logs import JsonFormatter


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_env_argument(parser, "--proc-root", default="/proc", help="procfs root")
    add_env_argument(parser, "--rate", default=10.0, type=float, help="rate")
    add_env_argument(parser, "--mode", default="a", choices=["a", "b"], help="mode")
    add_env_flag(parser, "--no-kube", help="no kube")
    return parser


def test_env_name_maps_flags() -> None:
    assert env_name("--proc-root") == "CARICO_PROC_ROOT"


def test_environment_sets_defaults_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARICO_RATE", "2.5")
    monkeypatch.setenv("CARICO_NO_KUBE", "true")
    args = _parser().parse_args([])
    assert args.rate == 2.5 and args.no_kube is True and args.proc_root == "/proc"
    assert _parser().parse_args(["--rate", "7"]).rate == 7.0


@pytest.mark.parametrize(
    ("name", "value"), [("CARICO_RATE", "fast"), ("CARICO_MODE", "c"), ("CARICO_NO_KUBE", "maybe")]
)
def test_bad_environment_values_fail_with_the_flag_name(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=name):
        _parser()


def test_json_log_lines_carry_extra_fields() -> None:
    record = logging.makeLogRecord(
        {"name": "carico.x", "levelname": "INFO", "msg": "hello %s", "args": ("n1",), "node": "n1"}
    )
    entry = json.loads(JsonFormatter().format(record))
    assert entry["msg"] == "hello n1" and entry["node"] == "n1" and entry["level"] == "info"


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def test_json_log_fields_of_any_type_stay_one_valid_json_line() -> None:
    fields = {
        "room": np.float64(2.5),
        "pods": np.int64(3),
        "ratio": float("nan"),
        "when": datetime.date(2026, 1, 2),
        "nodes": ("a", "b"),
    }
    record = logging.makeLogRecord({"name": "carico.x", "levelname": "INFO", "msg": "m", **fields})
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line, parse_constant=_not_json)
    assert entry["room"] == 2.5 and entry["pods"] == 3  # numpy numbers stay numbers
    assert entry["ratio"] is None
    assert entry["when"] == "2026-01-02" and entry["nodes"] == ["a", "b"]


def test_a_switch_named_no_something_turns_on() -> None:
    args = _parser().parse_args(["--no-kube"])
    assert args.no_kube is True
    assert _parser().parse_args([]).no_kube is False
