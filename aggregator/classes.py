"""The fleet's per-class summary, kept as arrays: pure, no I/O.

Design: docs/architecture.md#aggregation.

:func:`carico.footprint.fleet_summary` walks every (sender, class) pair in Python: about half a
microsecond each, so 5,000 nodes with 16 classes each cost over 100 ms per summary, all of it on
the event loop. Here each sender's classes are turned into arrays once, when its model is taken
into the store (:meth:`ClassVotes.update`), and the summary groups them with one numpy sort and
takes each kept class's medians with ``np.partition``: the same result as ``fleet_summary`` over
the senders' classes in order of arrival (tests compare them), a fraction of the time.

* A sender's classes: their ids and a k×4 array (cpu, memory, request cpu, request memory). Ids
  are shared by name and counted by the senders that learned the class; an id no sender holds is
  reused, so hostile names do not pile up.
* The summary keeps the ``max_classes`` classes learned by the most senders (ties by name); per
  class the medians of cpu and memory over its senders (one vote each: a sender names a class at
  most once, validation sees to it), and the requests of its latest sender. The ratios and the
  typical pod are ``fleet_summary``'s.

Neighbours: ``store`` feeds it and keeps its summary in the ``GlobalView``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from carico.footprint import EMPTY_FLEET, ClassFootprint, FleetSummary, Footprint
from carico.pods import Requests
from carico.subspace import FloatArray

IntArray = np.ndarray  # int64 ids


class _Row(NamedTuple):  # built for every model taken in: cheaper than a frozen dataclass
    names: tuple[str, ...]
    ids: IntArray
    values: FloatArray  # k×4: cpu, memory, request cpu, request memory


class ClassVotes:
    """Per sender, the classes it learned; per class, how many senders learned it."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}
        self._ids: dict[str, int] = {}
        self._names: list[str] = []  # by id ("" for a free id)
        self._senders: list[int] = []  # by id: the senders that learned the class
        self._free: list[int] = []

    def __len__(self) -> int:
        """The distinct classes the senders hold."""
        return len(self._ids)

    def update(self, sender: str, classes: tuple[ClassFootprint, ...]) -> bool:
        """``sender`` now holds ``classes`` (its latest model's; none: it holds none); whether
        that changed anything (compared here, on arrays, rather than object by object)."""
        old = self._rows.get(sender)
        if not classes:
            if old is None:
                return False
            del self._rows[sender]
            self._release(old.ids)
            return True
        names = tuple(c.name for c in classes)
        if old is not None and old.names == names:
            ids = old.ids  # the same classes as before, new footprints: the usual case
        else:
            ids = np.array([self._acquire(name) for name in names], dtype=np.int64)
            if old is not None:
                self._release(old.ids)
        values = np.array(
            [
                (c.footprint.cpu, c.footprint.memory, c.requests.cpu, c.requests.memory)
                for c in classes
            ]
        )
        self._rows[sender] = _Row(names, ids, values)
        # Same classes, same shape: the bytes compare cheapest (a tenth of np.array_equal).
        return old is None or ids is not old.ids or values.tobytes() != old.values.tobytes()

    def remove(self, sender: str) -> bool:
        return self.update(sender, ())

    def _acquire(self, name: str) -> int:
        i = self._ids.get(name)
        if i is None:
            if self._free:
                i = self._free.pop()
                self._names[i] = name
            else:
                i = len(self._names)
                self._names.append(name)
                self._senders.append(0)
            self._ids[name] = i
        self._senders[i] += 1
        return i

    def _release(self, ids: IntArray) -> None:
        senders = self._senders
        for i in ids.tolist():
            senders[i] -= 1
            if not senders[i]:
                del self._ids[self._names[i]]
                self._names[i] = ""
                self._free.append(i)

    def _kept(self, max_classes: int) -> IntArray:
        """The ids of the ``max_classes`` classes learned by the most senders (ties by name)."""
        counts = np.asarray(self._senders, dtype=np.int64)
        live = np.flatnonzero(counts)
        if len(live) <= max_classes:
            return live
        live_counts = counts[live]
        # The count of the max_classes-th most learned class: those above it are all kept, those
        # at it by name, as far as places remain.
        bar = np.partition(live_counts, len(live) - max_classes)[len(live) - max_classes]
        above = live[live_counts > bar]
        at_bar = live[live_counts == bar].tolist()
        places = max_classes - len(above)
        names = self._names
        chosen = sorted(at_bar, key=names.__getitem__)[:places]
        return np.concatenate((above, np.array(chosen, dtype=np.int64)))

    def summary(
        self, senders: Iterable[str], max_classes: int
    ) -> tuple[FleetSummary, dict[str, Requests]]:
        """The fleet's summary and each kept class's requests; ``senders`` in order of arrival
        (a class's requests are those of the last of them that learned it)."""
        rows = [row for s in senders if (row := self._rows.get(s)) is not None]
        if not rows:
            return EMPTY_FLEET, {}
        ids = np.concatenate([row.ids for row in rows])
        values = np.concatenate([row.values for row in rows])
        senders_of, names = self._senders, self._names
        # Most learned first, then by name: the order the summary lists them in.
        kept = np.array(
            sorted(self._kept(max_classes).tolist(), key=lambda i: (-senders_of[i], names[i])),
            dtype=np.int64,
        )
        # Each class's entries side by side, in order of arrival within a class (a stable sort:
        # a linear radix sort while the ids fit 16 bits), then per kept class its order
        # statistics (np.partition: linear too), so the whole summary stays about linear in the
        # (sender, class) pairs.
        small = len(names) <= np.iinfo(np.int16).max
        grouped = values[np.argsort(ids.astype(np.int16) if small else ids, kind="stable")]
        per_id = np.bincount(ids, minlength=len(names))
        starts = (np.cumsum(per_id) - per_id).tolist()
        counts = per_id.tolist()
        medians: dict[str, Footprint] = {}
        requests: dict[str, Requests] = {}
        cpu_ratios: list[float] = []
        memory_ratios: list[float] = []
        for i in kept.tolist():
            start, n = starts[i], counts[i]
            block = grouped[start : start + n]
            low, high = (n - 1) // 2, n // 2
            # statistics.median's arithmetic: the middle value, or the mean of the middle two.
            cpu = np.partition(block[:, 0], (low, high))
            memory = np.partition(block[:, 1], (low, high))
            median = Footprint(
                float((cpu[low] + cpu[high]) / 2), float((memory[low] + memory[high]) / 2)
            )
            medians[names[i]] = median
            latest = Requests(float(block[-1, 2]), float(block[-1, 3]))
            requests[names[i]] = latest
            if latest.cpu > 0:
                cpu_ratios.append(median.cpu / latest.cpu)
            if latest.memory > 0:
                memory_ratios.append(median.memory / latest.memory)
        fleet = FleetSummary.of(
            medians,
            statistics.median(cpu_ratios) if cpu_ratios else None,
            statistics.median(memory_ratios) if memory_ratios else None,
        )
        return fleet, requests
