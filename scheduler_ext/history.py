"""A bounded history of each node's avail and reserved, for the dashboard's chart.

The extender samples its capacity table once per sweep (about once a second) and keeps the last
``points`` samples per node in a ring buffer, so memory stays bounded whatever the uptime; a node
the table has forgotten is dropped here too. Pure: times are passed in.

Neighbours: ``service`` (records at each sweep), ``http_server`` (``GET /api/v1/history``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from itertools import repeat

import msgspec
import numpy as np

DEFAULT_POINTS = 600  # ten minutes at one sample a second
# Nodes per block of the history's storage: it grows a block at a time, never by copying.
BLOCK_ROWS = 256
_encode = msgspec.json.Encoder().encode


class NodeHistory:
    """Every node's last ``points`` samples of ``[t, avail, reserved, stale]``, 32 bytes a point
    (a Python object per point would be ~4x that, tens of MB for a thousand nodes).

    Stored as columns: each node has a row in one of a few blocks of BLOCK_ROWS rows, and since
    every sample covers every node the table knows (a node missing from one is forgotten), all
    rows advance together through one ring position. A sample is then a handful of numpy
    assignments whatever the nodes, instead of a Python call per node, which made most of the
    extender's sweep (docs/architecture.md#observability)."""

    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        if points < 1:
            raise ValueError("a history needs room for at least one point")
        self.points = points
        self._row: dict[str, int] = {}
        self._free: list[int] = []  # rows of forgotten nodes, to reuse
        self._blocks: list[np.ndarray] = []  # (BLOCK_ROWS, points, 4) each
        self._count = np.zeros(0, dtype=np.int64)  # points kept per row
        self._next = 0  # the ring position the next sample goes to, shared by every row

    def record(self, t: float, nodes: Iterable[tuple[str, float | None, int, bool]]) -> None:
        """One sample of every node the table knows, each once: (name, avail, reserved,
        stale)."""
        rows = list(nodes)
        self.record_columns(
            t,
            [name for name, _, _, _ in rows],
            np.array([math.nan if a is None else a for _, a, _, _ in rows], dtype=np.float64),
            np.array([r for _, _, r, _ in rows], dtype=np.float64),
            np.array([s for _, _, _, s in rows], dtype=bool),
        )

    def record_columns(
        self,
        t: float,
        names: list[str],
        avail: np.ndarray,
        reserved: np.ndarray,
        stale: np.ndarray,
    ) -> None:
        """``record`` by columns: node names (each once), their avail (NaN: no report),
        reservations and staleness."""
        present = set(names)
        if len(present) != len(names):  # one row per node: a second point would take another
            raise ValueError("a sample names a node more than once")
        rows = np.fromiter(map(self._row.get, names, repeat(-1)), np.intp, len(names))
        if len(self._row) != int(np.count_nonzero(rows >= 0)):  # some nodes are gone
            self._forget(present)
        for i in np.flatnonzero(rows < 0).tolist():
            rows[i] = self._add(names[i])
        at = self._next
        sample = np.empty((len(names), 4))
        sample[:, 0] = t
        sample[:, 1] = avail
        sample[:, 2] = reserved
        sample[:, 3] = stale
        block_of = rows // BLOCK_ROWS
        for b in np.unique(block_of).tolist():
            mine = block_of == b
            self._blocks[b][rows[mine] % BLOCK_ROWS, at] = sample[mine]
        self._count[rows] = np.minimum(self._count[rows] + 1, self.points)
        self._next = (at + 1) % self.points

    def _add(self, name: str) -> int:
        if not self._free:
            base = len(self._blocks) * BLOCK_ROWS
            self._blocks.append(np.empty((BLOCK_ROWS, self.points, 4)))
            self._count = np.concatenate([self._count, np.zeros(BLOCK_ROWS, dtype=np.int64)])
            self._free = list(range(base + BLOCK_ROWS - 1, base - 1, -1))  # lowest first
        row = self._free.pop()
        self._count[row] = 0
        self._row[name] = row
        return row

    def _forget(self, present: set[str]) -> None:
        for name in [n for n in self._row if n not in present]:
            self._free.append(self._row.pop(name))

    def _ordered(self, row: int) -> np.ndarray:
        """The row's points, oldest first: the last ``count`` before the ring position."""
        count = int(self._count[row])
        at = (self._next - count + np.arange(count)) % self.points
        return self._blocks[row // BLOCK_ROWS][row % BLOCK_ROWS, at]

    def view(self) -> dict[str, list[list[float | int | bool | None]]]:
        """Per node, ``[t, avail, reserved, stale]`` rows, oldest first (compact JSON)."""
        return {
            name: [
                [float(t), None if math.isnan(a) else float(a), int(r), bool(s)]
                for t, a, r, s in self._ordered(row).tolist()
            ]
            for name, row in sorted(self._row.items())
        }

    def _json(self, row: int) -> bytes:
        """A row's points as JSON, built column by column in C (msgspec writes NaN as null)."""
        rows = self._ordered(row)
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

    def json_chunks(self, nodes_per_chunk: int = 64) -> Iterator[bytes]:
        """``view()`` as the members of a JSON object (``"name":[rows],...``), a few nodes per
        chunk: served chunk by chunk, a view of thousands of nodes never exists whole in memory
        as Python rows (those cost ~200 bytes a point, a gigabyte at 10,000 nodes)."""
        items = sorted(self._row.items())
        for start in range(0, len(items), nodes_per_chunk):
            # A sample taken while the chunks are written may have forgotten a node and given
            # its row to another: such a node is left out, not shown with the other's points.
            part = [
                (n, r) for n, r in items[start : start + nodes_per_chunk] if self._row.get(n) == r
            ]
            if part:
                yield b",".join(_encode(name) + b":" + self._json(row) for name, row in part)
