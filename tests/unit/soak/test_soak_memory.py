"""RSS slopes of the soak's components."""

from __future__ import annotations

import pytest
from soak_memory import MIB, judge, parse_vm_rss, rss_slope

STATUS = "Name:\tcarico\nVmPeak:\t  300000 kB\nVmRSS:\t  123456 kB\nThreads:\t4\n"


def test_vm_rss_in_bytes() -> None:
    assert parse_vm_rss(STATUS) == 123456 * 1024
    assert parse_vm_rss("Name:\tzombie\nState:\tZ (zombie)\n") is None


def test_slope_in_mib_per_minute() -> None:
    line = [(t, 100 * MIB + 2 * MIB * t / 60) for t in range(0, 600, 10)]
    assert rss_slope(line) == pytest.approx(2.0)
    assert rss_slope([(0, 5.0)]) == 0.0
    assert rss_slope([(3, 5.0), (3, 9.0)]) == 0.0


def _curve(pid: int, start: float, seconds: int, rss: object) -> list[tuple[int, float, int]]:
    return [(pid, start + t, int(rss(t))) for t in range(0, seconds, 5)]  # type: ignore[operator]


def test_a_heap_that_fills_then_stays_is_not_growing() -> None:
    # 40 MiB in the first two minutes (caches, imports), then flat.
    samples = _curve(1, 0, 900, lambda t: (60 + min(t, 120) / 3) * MIB)
    v = judge("extender", samples, warmup_s=60, min_span_s=300)
    assert v is not None and v.judged and not v.growing
    assert v.late_slope == pytest.approx(0.0, abs=1e-9)
    assert v.slope > 0  # the fill still shows over the whole span


def test_a_steady_leak_is_growing() -> None:
    samples = _curve(1, 0, 900, lambda t: (60 + 3 * t / 60) * MIB)
    v = judge("agent", samples, warmup_s=60, min_span_s=300)
    assert v is not None and v.growing and v.late_slope == pytest.approx(3.0)


def test_the_longest_lived_process_is_judged_and_short_ones_are_not() -> None:
    leak_then_restart = _curve(1, 0, 200, lambda t: (60 + 10 * t / 60) * MIB)
    flat = _curve(2, 200, 700, lambda t: 80 * MIB)
    v = judge("extender", leak_then_restart + flat, warmup_s=30, min_span_s=300)
    assert v is not None and v.pid == 2 and not v.growing
    short = judge("x", _curve(3, 0, 100, lambda t: (50 + t) * MIB), warmup_s=30, min_span_s=300)
    assert short is not None and not short.judged and not short.growing
    assert judge("none", [], warmup_s=30, min_span_s=300) is None
