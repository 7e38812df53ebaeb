"""The dashboard's per-node history: bounded, ordered, and forgetting nodes the table dropped."""

from __future__ import annotations

import json

import pytest

from scheduler_ext.history import NodeHistory


def test_keeps_the_last_points_in_order() -> None:
    h = NodeHistory(points=3)
    for t in range(5):
        h.record(float(t), [("a", 10.0 - t, t, False)])
    assert h.view() == {"a": [[2.0, 8.0, 2, False], [3.0, 7.0, 3, False], [4.0, 6.0, 4, False]]}


def test_unreported_and_stale_points_are_kept_as_such() -> None:
    h = NodeHistory()
    h.record(1.0, [("a", None, 2, True), ("b", 3.5, 0, False)])
    assert h.view() == {"a": [[1.0, None, 2, True]], "b": [[1.0, 3.5, 0, False]]}


def test_a_node_missing_from_a_sample_is_forgotten() -> None:
    h = NodeHistory()
    h.record(1.0, [("a", 1.0, 0, False), ("b", 2.0, 0, False)])
    h.record(2.0, [("b", 2.5, 1, False)])
    assert list(h.view()) == ["b"]
    assert len(h.view()["b"]) == 2


def test_needs_room_for_a_point() -> None:
    with pytest.raises(ValueError):
        NodeHistory(points=0)


@pytest.mark.parametrize("count", [1, 3, 4, 7])
def test_any_count_of_points_reads_back_oldest_first(count: int) -> None:
    h = NodeHistory(points=3)
    for t in range(count):
        h.record(float(t), [("a", float(t), 0, t % 2 == 1)])
    kept = list(range(max(0, count - 3), count))
    assert h.view()["a"] == [[float(t), float(t), 0, t % 2 == 1] for t in kept]


def test_the_chunked_json_is_the_view() -> None:
    h = NodeHistory(points=3)
    for t in range(5):
        h.record(
            float(t), [(f"n{i}", None if t == 2 else t * 0.5, t, t % 2 == 0) for i in range(7)]
        )
    text = b"{" + b",".join(h.json_chunks(nodes_per_chunk=3)) + b"}"
    assert json.loads(text) == h.view()
    assert len(list(h.json_chunks(nodes_per_chunk=3))) == 3


def test_rows_are_reused_and_blocks_added_as_nodes_come_and_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A seeded walk of nodes joining, leaving and coming back across several storage blocks
    (4 rows each here) reads back as per-node lists of the last points would."""
    import random

    from scheduler_ext import history

    monkeypatch.setattr(history, "BLOCK_ROWS", 4)
    rng = random.Random(7)
    h = NodeHistory(points=5)
    expected: dict[str, list[list[float | int | bool | None]]] = {}
    pool = [f"n{i:02d}" for i in range(14)]
    present = set(rng.sample(pool, 6))
    for step in range(60):
        for name in rng.sample(pool, 3):  # each sample, a few nodes flip
            present ^= {name}
        sample = [
            (
                name,
                None if rng.random() < 0.2 else rng.uniform(0, 9),
                rng.randrange(4),
                step % 3 == 0,
            )
            for name in sorted(present, key=lambda _: rng.random())  # order does not matter
        ]
        h.record(float(step), sample)
        expected = {
            name: [*expected.get(name, []), [float(step), avail, reserved, stale]][-5:]
            for name, avail, reserved, stale in sample
        }
        assert h.view() == expected, step
    # rows are reused: 14 nodes at most take at most 4 blocks of 4 rows (6 at the start: 2)
    assert 2 <= len(h._blocks) <= 4


def test_columns_record_like_tuples() -> None:
    """The columns the service records (NaN for a node without a report, any order) read back
    as the tuples would."""
    import numpy as np

    by_columns, by_tuples = NodeHistory(points=4), NodeHistory(points=4)
    for t in range(6):
        by_columns.record_columns(
            float(t),
            ["b", "a"],
            np.array([np.nan, t + 0.5]),
            np.array([t, 0.0]),
            np.array([True, False]),
        )
        by_tuples.record(float(t), [("a", t + 0.5, 0, False), ("b", None, t, True)])
    assert by_columns.view() == by_tuples.view()
    assert list(by_columns.json_chunks()) == list(by_tuples.json_chunks())


def test_a_node_forgotten_while_its_chunks_are_written_is_left_out() -> None:
    """The dashboard's history is written chunk by chunk, and a sweep may sample meanwhile: a
    node forgotten since, whose row a new node took, is left out rather than shown with the new
    node's points, and what was written is still one JSON object."""
    h = NodeHistory(points=3)
    h.record(1.0, [(f"n{i}", float(i), 0, False) for i in range(6)])
    chunks = h.json_chunks(nodes_per_chunk=2)
    first = next(chunks)  # n0, n1
    # n2 and n3 are forgotten (x takes one of their rows), n4 and n5 stay and gain a point
    h.record(2.0, [(n, 0.5, 0, False) for n in ("n0", "n1", "n4", "n5")] + [("x", 99.0, 0, False)])
    rest = list(chunks)
    text = b"{" + b",".join([first, *rest]) + b"}"
    later = [[1.0, 4.0, 0, False], [2.0, 0.5, 0, False]]
    assert json.loads(text) == {
        "n0": [[1.0, 0.0, 0, False]],
        "n1": [[1.0, 1.0, 0, False]],
        "n4": later,
        "n5": [[1.0, 5.0, 0, False], [2.0, 0.5, 0, False]],
    }
    assert b"99" not in text


def test_a_sample_naming_a_node_twice_is_refused() -> None:
    h = NodeHistory(points=3)
    h.record(1.0, [("a", 1.0, 0, False)])
    with pytest.raises(ValueError, match="more than once"):
        h.record(2.0, [("a", 1.0, 0, False), ("a", 2.0, 0, False)])
    assert h.view() == {"a": [[1.0, 1.0, 0, False]]}  # nothing recorded
