"""A bounded history of each node's avail and reserved, for the dashboard's chart.

The extender samples its capacity table once per sweep (about once a second) and keeps the last
``points`` samples per node in a ring buffer, so memory stays bounded whatever the uptime; a node
the table has forgotten is dropped here too. Pure: times are passed in.

Neighbours: ``service`` (records at each sweep), ``http_server`` (``GET /api/v1/history``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import msgspec
import numpy as np

DEFAULT_POINTS = 600  # ten minutes at one sample a second
_encode = msgspec.json.Encoder().encode


class _Ring:
    """The last ``n`` rows of ``[t, avail, reserved, stale]`` in one float64 array: 32 bytes a
    point (a Python object per point would be ~4x that, tens of MB for a thousand nodes)."""

    __slots__ = ("data", "next", "size")

    def __init__(self, n: int) -> None:
        self.data = np.empty((n, 4))
        self.next = 0
        self.size = 0

    def append(self, t: float, avail: float | None, reserved: int, stale: bool) -> None:
        n = len(self.data)
        self.data[self.next] = (t, math.nan if avail is None else avail, reserved, stale)
        self.next = (self.next + 1) % n
        self.size = min(self.size + 1, n)

    def rows(self) -> list[list[float | int | bool | None]]:
        return [
            [float(t), None if math.isnan(a) else float(a), int(r), bool(s)]
            for t, a, r, s in self._ordered().tolist()
        ]

    def _ordered(self) -> np.ndarray:
        if self.size == len(self.data):
            return np.roll(self.data, -self.next, axis=0)
        return self.data[: self.size]

    def json(self) -> bytes:
        """``rows()`` as JSON, built column by column in C (msgspec writes NaN as null)."""
        rows = self._ordered()
        return _encode(
            list(
                zip(
                    rows[:, 0].tolist(),
                    rows[:, 1].tolist(),
                    rows[:, 2].astype(np.int64).tolist(),
                    rows[:, 3].astype(bool).tolist(),
                    strict=True,
                )
            )
        )


class NodeHistory:
    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        if points < 1:
            raise ValueError("a history needs room for at least one point")
        self.points = points
        self._nodes: dict[str, _Ring] = {}

    def record(self, t: float, nodes: Iterable[tuple[str, float | None, int, bool]]) -> None:
        """One sample of every node the table knows: (name, avail, reserved, stale)."""
        seen = set()
        for name, avail, reserved, stale in nodes:
            seen.add(name)
            ring = self._nodes.get(name)
            if ring is None:
                ring = self._nodes[name] = _Ring(self.points)
            ring.append(t, avail, reserved, stale)
        for name in [n for n in self._nodes if n not in seen]:
            del self._nodes[name]

    def view(self) -> dict[str, list[list[float | int | bool | None]]]:
        """Per node, ``[t, avail, reserved, stale]`` rows, oldest first (compact JSON)."""
        return {name: ring.rows() for name, ring in sorted(self._nodes.items())}

    def json_chunks(self, nodes_per_chunk: int = 64) -> Iterator[bytes]:
        """``view()`` as the members of a JSON object (``"name":[rows],...``), a few nodes per
        chunk: served chunk by chunk, a view of thousands of nodes never exists whole in memory
        as Python rows (those cost ~200 bytes a point, a gigabyte at 10,000 nodes)."""
        items = sorted(self._nodes.items())
        for start in range(0, len(items), nodes_per_chunk):
            part = items[start : start + nodes_per_chunk]
            yield b",".join(_encode(name) + b":" + ring.json() for name, ring in part)
