"""Reading kernel files that are read over and over: procfs and cgroupfs.

procfs and cgroupfs regenerate a file's content on every read from offset 0, so a descriptor can
stay open and be re-read with ``os.pread``: far cheaper than opening the file each time (measured
in :mod:`agent.proc_source`, which reads its files 10 times a second, and in
:mod:`agent.cgroup_usage`, which reads three files per pod). A failing descriptor is closed and
reopened at the next read.
"""

from __future__ import annotations

import contextlib
import os


def read_bytes(path: str) -> bytes:
    """Open, read and close: the simple reader (tests use it on files they replace)."""
    with open(path, "rb") as f:
        return f.read()


class KeptOpenFiles:
    """Reads files through descriptors kept open between reads; a callable ``path -> bytes``."""

    def __init__(self, size: int = 16384) -> None:
        self._fds: dict[str, int] = {}
        self._size = size

    def __call__(self, path: str) -> bytes:
        fd = self._fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            self._fds[path] = fd
        try:
            return os.pread(fd, self._size, 0)
        except OSError:
            self.close(path)
            raise

    def __len__(self) -> int:
        return len(self._fds)

    def close(self, path: str | None = None) -> None:
        """Close the descriptor of ``path`` (every descriptor when None)."""
        for p in [path] if path is not None else list(self._fds):
            fd = self._fds.pop(p, None)
            if fd is not None:
                os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit os may already be gone
            self.close()
