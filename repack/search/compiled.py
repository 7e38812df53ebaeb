"""Compiling the repacker's inner loops with numba: at import, for explicit signatures, without
the GIL, cached on disk where that is possible, so no solve ever pays for compilation inside its
time limit. Used by ``swap_kernel``, ``patterns`` and ``heuristics``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import njit


def compiled(signature: Any) -> Callable[[Callable[..., Any]], Any]:
    """Compiles a function at import for ``signature``, releasing the GIL while it runs, cached
    on disk where numba finds a writable place for it (beside the module, NUMBA_CACHE_DIR or the
    user's cache directory); elsewhere (a read-only image) it compiles in every process."""

    def wrap(function: Callable[..., Any]) -> Any:
        try:
            return njit(signature, cache=True, nogil=True)(function)
        except RuntimeError:  # numba: "cannot cache function ...: no locator available"
            return njit(signature, nogil=True)(function)

    return wrap
