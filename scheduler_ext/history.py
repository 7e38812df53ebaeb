"""A bounded history of each node's avail and reserved, for the dashboard's chart.

The extender samples its capacity table once per sweep (about once a second) and keeps the last
``points`` samples per node in a ring buffer, so memory stays bounded whatever the uptime; a node
the table has forgotten is dropped here too. Pure: times are passed in.

Neighbours: ``service`` (records at each sweep), ``http_server`` (``GET /api/v1/history``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_POINTS = 600  # ten minutes at one sample a second


@dataclass(frozen=True, slots=True)
class Point:
    t: float  # wall-clock seconds
    avail: float | None  # None: no report from the node yet
    reserved: int
    stale: bool


class NodeHistory:
    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        if points < 1:
            raise ValueError("a history needs room for at least one point")
        self.points = points
        self._nodes: dict[str, deque[Point]] = {}

    def record(self, t: float, nodes: Iterable[tuple[str, float | None, int, bool]]) -> None:
        """One sample of every node the table knows: (name, avail, reserved, stale)."""
        seen = set()
        for name, avail, reserved, stale in nodes:
            seen.add(name)
            ring = self._nodes.get(name)
            if ring is None:
                ring = self._nodes[name] = deque(maxlen=self.points)
            ring.append(Point(t, avail, reserved, stale))
        for name in [n for n in self._nodes if n not in seen]:
            del self._nodes[name]

    def view(self) -> dict[str, list[list[float | int | bool | None]]]:
        """Per node, ``[t, avail, reserved, stale]`` rows, oldest first (compact JSON)."""
        return {
            name: [[p.t, p.avail, p.reserved, p.stale] for p in ring]
            for name, ring in sorted(self._nodes.items())
        }
