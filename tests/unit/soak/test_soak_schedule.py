"""The soak's fault schedule: replayable from its seed, every kind met, inside the window."""

from __future__ import annotations

import pytest
from soak_schedule import FAULT_KINDS, HELD, PER_NODE, fault_schedule, format_schedule

NODES = ("n0", "n1", "n2")


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    first = fault_schedule(7, 600, NODES)
    assert first == fault_schedule(7, 600, NODES)
    assert first != fault_schedule(8, 600, NODES)


def test_faults_stay_inside_the_window_in_order() -> None:
    faults = fault_schedule(3, 300, NODES, warmup_s=20, quiet_s=40, mean_gap_s=10)
    times = [f.at for f in faults]
    assert times == sorted(times)
    assert times[0] >= 20 + 10 / 5  # warm-up plus the shortest gap
    assert times[-1] <= 300 - 40


def test_a_round_meets_every_kind_before_any_twice() -> None:
    faults = fault_schedule(11, 10_000, NODES, mean_gap_s=5)
    first_round = [f.kind for f in faults[: len(FAULT_KINDS)]]
    assert sorted(first_round) == sorted(FAULT_KINDS)


def test_targets_and_holds_belong_to_their_kinds() -> None:
    faults = fault_schedule(5, 2_000, NODES, hold_s=(8, 15))
    for f in faults:
        assert (f.target in NODES) == (f.kind in PER_NODE)
        if f.kind in HELD:
            assert 8 <= f.hold_s <= 15
        else:
            assert f.hold_s == 0
    assert {f.target for f in faults if f.target} == set(NODES)


def test_kinds_can_be_restricted_and_unknown_kinds_are_refused() -> None:
    only = fault_schedule(1, 500, NODES, kinds=("repack",))
    assert only and {f.kind for f in only} == {"repack"}
    with pytest.raises(ValueError, match="unknown fault kinds: nap"):
        fault_schedule(1, 500, NODES, kinds=("nap",))
    with pytest.raises(ValueError, match="need node names"):
        fault_schedule(1, 500, (), kinds=("kill-agent",))


def test_a_window_shorter_than_warmup_and_quiet_has_no_fault() -> None:
    assert fault_schedule(1, 20, NODES, warmup_s=15, quiet_s=15) == []


def test_the_printed_schedule_names_the_seed_and_every_fault() -> None:
    faults = fault_schedule(42, 200, NODES)
    text = format_schedule(42, faults)
    assert "--seed 42" in text
    assert len(text.splitlines()) == len(faults) + 1
    assert all(f.kind in text for f in faults)
