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
