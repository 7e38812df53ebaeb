"""A pure parser for Linux pressure-stall files (``/proc/pressure/{cpu,memory,io}``).

Format (Documentation/accounting/psi.rst)::

    some avg10=0.00 avg60=0.00 avg300=0.00 total=0
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

``total`` is the cumulative stall time in microseconds; it is the only field the agent uses, because
the kernel recomputes the ``avgN`` percentages only every 2 s, far too slowly for 10 Hz sampling.
The cpu file had no ``full`` line before Linux 5.13. psutil does not read these files, hence this
small parser. No I/O: :mod:`agent.proc_source` reads the file and hands the text here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_AVG = r"\d+(?:\.\d+)?"
# A total is a 64-bit counter: at most 20 digits. More is no kernel's output, and a number of
# hundreds of digits would overflow the float of the pressure fraction.
_TOTAL = r"(\d{1,20})"
_LINE = re.compile(rf"(some|full) avg10={_AVG} avg60={_AVG} avg300={_AVG} total={_TOTAL}")
# The whole file as the kernel writes it, in one match: the common case costs one C call instead
# of a Python loop over the lines (at 10 Hz with cold caches, about half the parse). Anything else
# (blank lines, stray spaces, a bad line) goes through the line-by-line parser, which says what is
# wrong.
_FILE = re.compile(
    rf"some avg10={_AVG} avg60={_AVG} avg300={_AVG} total={_TOTAL}\n"
    rf"(?:full avg10={_AVG} avg60={_AVG} avg300={_AVG} total={_TOTAL}\n?)?"
)


class PsiParseError(ValueError):
    """The text is not a pressure file (garbage, empty or truncated)."""


@dataclass(frozen=True)
class PsiTotals:
    """Cumulative stall times in µs; ``full`` is None when the file has no ``full`` line."""

    some: int
    full: int | None


def parse_psi(text: str) -> PsiTotals:
    """Parse one pressure file.

    >>> parse_psi("some avg10=1.00 avg60=0.50 avg300=0.10 total=12345\\n")
    PsiTotals(some=12345, full=None)
    >>> parse_psi("some avg10=0 avg60=0 avg300=0 total=7\\nfull avg10=0 avg60=0 avg300=0 total=3")
    PsiTotals(some=7, full=3)
    """
    whole = _FILE.fullmatch(text)
    if whole is not None:
        full = whole.group(2)
        return PsiTotals(some=int(whole.group(1)), full=None if full is None else int(full))
    totals: dict[str, int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line or line.isspace():
            continue
        # One strict pattern per line: a truncated read can cut a line anywhere, and every field
        # must be present and well-formed (it is also the cheapest check at 10 Hz).
        match = _LINE.fullmatch(line.strip())
        if match is None:
            raise PsiParseError(f"line {line_no}: not a pressure line: {line[:40]!r}")
        kind = match.group(1)
        if kind in totals:
            raise PsiParseError(f"line {line_no}: duplicate {kind!r} line")
        totals[kind] = int(match.group(2))
    if "some" not in totals:
        raise PsiParseError("no 'some' line")
    return PsiTotals(some=totals["some"], full=totals.get("full"))


def pressure_fraction(
    prev_total_us: int, total_us: int, prev_now: float, now: float
) -> float | None:
    """Stall fraction over an interval: clip(Δtotal_µs / Δt_µs, 0, 1), or None if undefined.

    ``now`` values come from a monotonic clock in seconds. A counter that went backwards or a
    non-positive interval gives None (the sample is missing, not zero).

    >>> round(pressure_fraction(1_000, 51_000, 10.0, 10.1) or 0, 9)
    0.5
    >>> pressure_fraction(1_000, 900_000, 10.0, 10.1)
    1.0
    >>> pressure_fraction(1_000, 500, 10.0, 10.1) is None
    True
    """
    dt_us = (now - prev_now) * 1e6
    delta = total_us - prev_total_us
    if dt_us <= 0 or delta < 0:
        return None
    return min(1.0, delta / dt_us)
