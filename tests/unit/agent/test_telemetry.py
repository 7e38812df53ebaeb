"""Feature maths: utilisation from counters, memory, the cpu combination, feature flags."""

from __future__ import annotations

import math

import pytest

from agent.telemetry import (
    CpuTimes,
    cpu_feature,
    cpu_utilisation,
    memory_used,
    parse_features,
)


def test_guest_time_is_not_counted_twice() -> None:
    # The kernel adds guest time to user as well; CpuTimes has no guest field to add again,
    # so a VM-heavy interval is 60 % busy, not more.
    a = CpuTimes(user=100, nice=0, system=0, idle=100, iowait=0, irq=0, softirq=0, steal=0)
    b = CpuTimes(user=160, nice=0, system=0, idle=140, iowait=0, irq=0, softirq=0, steal=0)
    assert cpu_utilisation(a, b) == pytest.approx(0.6)


def test_iowait_counts_as_idle_and_steal_irq_softirq_as_busy() -> None:
    a = CpuTimes(0, 0, 0, 0, 0, 0, 0, 0)
    b = CpuTimes(user=10, nice=10, system=10, idle=40, iowait=20, irq=4, softirq=3, steal=3)
    assert cpu_utilisation(a, b) == pytest.approx(40 / 100)


def test_no_elapsed_ticks_or_reset_counters_give_no_value() -> None:
    a = CpuTimes(10, 0, 0, 10, 0, 0, 0, 0)
    assert cpu_utilisation(a, a) is None
    assert cpu_utilisation(a, CpuTimes(5, 0, 0, 20, 0, 0, 0, 0)) is None


def test_memory_used_is_one_minus_available_over_total() -> None:
    assert memory_used(16e9, 4e9) == pytest.approx(0.75)
    assert memory_used(0, 0) is None
    assert memory_used(1e9, 2e9) == 0.0  # clipped, never negative


def test_cpu_feature_combines_util_and_psi_or_falls_back() -> None:
    assert cpu_feature(0.5, 0.3, True) == pytest.approx(0.4)
    assert cpu_feature(0.5, None, False) == 0.5
    assert math.isnan(cpu_feature(0.5, None, True))  # PSI is on but this read failed
    assert math.isnan(cpu_feature(None, 0.3, True))


def test_feature_flag_validation() -> None:
    assert parse_features("cpu,memory,io_pressure") == ("cpu", "memory", "io_pressure")
    with pytest.raises(ValueError, match="unknown feature"):
        parse_features("cpu,disk")
    with pytest.raises(ValueError, match="duplicate"):
        parse_features("cpu,cpu")
    with pytest.raises(ValueError, match="at least one"):
        parse_features(" , ")
