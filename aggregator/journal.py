"""The journal: every model the store accepts, appended beside the checkpoint, so that a crash of
the process loses next to nothing the last checkpoint has not saved.

A checkpoint is written every ``--checkpoint-interval`` (30 s); without more, a SIGKILL lost
everything accepted since, and after the restart a node's older model (a late or replayed message
with sequence 31 when 33 had been accepted) was taken again. Each accepted model is therefore
appended here as the ``LocalModel`` bytes it came in, with the aggregator's receive time. The
records of one event-loop turn go out in one plain ``write`` at the end of the turn, without
fsync: the kernel holds them from then on, so a crash of the process (SIGKILL, OOM kill, a bug)
loses at most the models of the turn it struck; a crash of the machine loses what the kernel had
not written back, which the fsynced checkpoint bounds to one interval
(docs/architecture.md#failure-behaviour).

Files are segments ``PATH.journal.N``. When a checkpoint is taken, a new segment starts; once the
checkpoint is on disk the older segments hold nothing it lacks and are deleted, so the journal
holds about one checkpoint interval of models. At start the checkpoint is loaded, then every
segment replayed in order through the same validation and the store's own rules (the newest model
per node wins, entries past the TTL drop out). A record is checked by its length and CRC; the
first damaged one (a write cut short by the kill, a tampered file) ends its segment's replay, which
is logged, never fatal.

Record: ``b"CJ"``, format byte 1, receive time (float64), length and CRC-32 of the model bytes
(uint32 each), then the bytes. Pure file I/O: the owner (``service``) decides when to call.
Neighbours: ``checkpoint`` (the other half), ``service`` (appends, rotates, replays).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"CJ\x01"
_HEADER = struct.Struct("<3sdII")
# Larger than any message the server would take (--max-message-bytes tops out far below).
MAX_RECORD = 1 << 30


@dataclass
class Replay:
    """What replaying the segments found: the records in order, and one line per problem."""

    records: list[tuple[float, bytes]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def segments(path: Path) -> list[tuple[int, Path]]:
    """The journal segments of the checkpoint ``path``, oldest first."""
    found = []
    for candidate in path.parent.glob(f"{path.name}.journal.*"):
        number = candidate.name.rsplit(".", 1)[1]
        if number.isdigit():
            found.append((int(number), candidate))
    return sorted(found)


def _records(data: bytes, name: str, problems: list[str]) -> Iterator[tuple[float, bytes]]:
    offset = 0
    while offset < len(data):
        if len(data) - offset < _HEADER.size:
            problems.append(f"{name}: a record cut short at byte {offset}")
            return
        magic, received_at, length, crc = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        body = data[start : start + length]
        if magic != MAGIC or length > MAX_RECORD or len(body) != length:
            problems.append(f"{name}: a damaged or cut record at byte {offset}; the rest ignored")
            return
        if zlib.crc32(body) != crc:
            problems.append(f"{name}: a record at byte {offset} fails its CRC; the rest ignored")
            return
        yield received_at, body
        offset = start + length


def replay(path: Path) -> Replay:
    """Every record of every segment of ``path``'s journal, oldest first."""
    result = Replay()
    for _, segment in segments(path):
        try:
            data = segment.read_bytes()
        except OSError as exc:
            result.problems.append(f"{segment.name}: cannot read it ({exc.strerror})")
            continue
        result.records.extend(_records(data, segment.name, result.problems))
    return result


class Journal:
    """Appends records to the current segment; ``rotate`` and ``drop_through`` follow the
    checkpoints. Records wait in memory until the end of the event-loop turn (``flush``)."""

    def __init__(self, path: Path, on_error: Callable[[OSError], None] | None = None) -> None:
        self.path = path
        self.on_error = on_error
        existing = segments(path)
        self.number = existing[-1][0] + 1 if existing else 1
        self._fd = self._open(self.number)
        self._pending: list[bytes] = []
        self._flush_scheduled = False

    def _open(self, number: int) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        name = self.path.parent / f"{self.path.name}.journal.{number}"
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def append(self, received_at: float, raw: bytes) -> None:
        """Keep the model's bytes; written at the end of this event-loop turn."""
        self._pending.append(_HEADER.pack(MAGIC, received_at, len(raw), zlib.crc32(raw)) + raw)
        if not self._flush_scheduled:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a synchronous caller): write now
                self.flush()
                return
            self._flush_scheduled = True

    def flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            # A full disk must not stop the service: the models are in the store, and the next
            # checkpoint saves them; the owner counts the gap.
            if self.on_error is not None:
                self.on_error(exc)

    def rotate(self) -> int:
        """Start a new segment (the checkpoint being taken holds all before it); returns the
        last segment the checkpoint makes redundant, for ``drop_through`` once it is written."""
        self.flush()
        done = self.number
        os.close(self._fd)
        self.number += 1
        self._fd = self._open(self.number)
        return done

    def drop_through(self, number: int) -> None:
        """Delete the segments up to ``number``: a checkpoint on disk holds what they held."""
        for n, segment in segments(self.path):
            if n <= number:
                with contextlib.suppress(OSError):
                    segment.unlink()

    def close(self) -> None:
        self.flush()
        os.close(self._fd)
