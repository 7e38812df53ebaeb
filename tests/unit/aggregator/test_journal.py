"""The journal: records round-trip in order, a damaged tail ends its segment's replay (never an
exception), and segments follow the checkpoints."""

import asyncio
import os
from pathlib import Path

import pytest

from aggregator import journal
from aggregator.journal import Journal


def test_records_come_back_in_order_across_segments(tmp_path: Path) -> None:
    path = tmp_path / "agg.json"
    j = Journal(path)
    j.append(1.0, b"first")
    j.append(2.0, b"")
    done = j.rotate()
    j.append(3.0, b"third" * 100)
    j.close()
    assert [n for n, _ in journal.segments(path)] == [1, 2] and done == 1
    found = journal.replay(path)
    assert found.records == [(1.0, b"first"), (2.0, b""), (3.0, b"third" * 100)]
    assert found.problems == []
    # A checkpoint on disk makes the segments up to the rotated one redundant.
    reopened = Journal(path)
    assert reopened.number == 3
    reopened.drop_through(done)
    assert [n for n, _ in journal.segments(path)] == [2, 3]
    reopened.close()


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda data: data[:-3], "cut"),  # the kill struck in the middle of a write
        (lambda data: data + b"CJ", "cut short"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "CRC"),
        (lambda data: b"\x00" * 30 + data, "damaged"),
        (lambda data: data[:11] + b"\xff\xff\xff\x7f" + data[15:], "damaged"),  # length 2 GiB
    ],
)
def test_a_damaged_record_ends_its_segment_and_is_reported(
    tmp_path: Path, damage, problem: str
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "agg.json"
    j = Journal(path)
    j.append(1.0, b"kept")
    j.rotate()
    j.append(2.0, b"second segment")
    j.append(3.0, b"last")
    j.close()
    second = journal.segments(path)[1][1]
    second.write_bytes(damage(second.read_bytes()))
    found = journal.replay(path)
    assert found.records[0] == (1.0, b"kept")  # the first segment is untouched
    assert len(found.problems) == 1 and problem in found.problems[0], found.problems
    assert second.name in found.problems[0]


def test_records_wait_for_the_end_of_the_event_loop_turn(tmp_path: Path) -> None:
    path = tmp_path / "agg.json"

    async def run() -> tuple[int, int]:
        j = Journal(path)
        j.append(1.0, b"a")
        j.append(2.0, b"b")
        before = len(journal.replay(path).records)  # nothing written within the turn
        await asyncio.sleep(0)
        after = len(journal.replay(path).records)
        j.close()
        return before, after

    assert asyncio.run(run()) == (0, 2)


def test_a_write_error_is_reported_not_raised(tmp_path: Path) -> None:
    errors: list[OSError] = []
    j = Journal(tmp_path / "agg.json", errors.append)
    os.close(j._fd)
    j._fd = os.open(os.devnull, os.O_RDONLY)  # writes to it fail
    j.append(1.0, b"x")
    assert len(errors) == 1 and isinstance(errors[0], OSError)
    j.close()
