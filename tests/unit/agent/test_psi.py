"""The pressure-file parser on real kernel output and on broken input."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.psi import PsiParseError, PsiTotals, parse_psi, pressure_fraction

FIXTURES = Path(__file__).parent / "fixtures"


def test_real_kernel_output_with_full_line() -> None:
    assert parse_psi((FIXTURES / "psi_cpu_5.13").read_text()) == PsiTotals(167372473, 0)
    assert parse_psi((FIXTURES / "psi_io").read_text()) == PsiTotals(11263346, 8656010)


def test_cpu_file_before_5_13_has_no_full_line() -> None:
    assert parse_psi((FIXTURES / "psi_cpu_pre5.13").read_text()) == PsiTotals(157622356, None)


@pytest.mark.parametrize("name", ["psi_truncated", "psi_garbage", "psi_empty"])
def test_broken_files_raise_parse_errors(name: str) -> None:
    text = (FIXTURES / name).read_bytes().decode("ascii")
    with pytest.raises(PsiParseError):
        parse_psi(text)


@pytest.mark.parametrize(
    "text",
    [
        "some avg10=0.00 avg60=0.00 avg300=0.00\n",  # total missing
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=-5\n",  # negative counter
        "some avg10=x avg60=0.00 avg300=0.00 total=5\n",  # bad average
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",  # no some line
        "some avg10=0 avg60=0 avg300=0 total=1\nsome avg10=0 avg60=0 avg300=0 total=2\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=5 extra\n",
    ],
)
def test_malformed_lines_raise(text: str) -> None:
    with pytest.raises(PsiParseError):
        parse_psi(text)


def test_pressure_fraction_uses_microseconds_and_clips() -> None:
    # 25 ms of stall in 100 ms of monotonic time: 25 %.
    assert pressure_fraction(1_000_000, 1_025_000, 50.0, 50.1) == pytest.approx(0.25)
    # Per-CPU accounting can exceed the wall interval by rounding; clip to 1.
    assert pressure_fraction(0, 150_000, 0.0, 0.1) == 1.0
    assert pressure_fraction(10, 5, 0.0, 0.1) is None  # counter went backwards
    assert pressure_fraction(0, 5, 1.0, 1.0) is None  # no time elapsed
