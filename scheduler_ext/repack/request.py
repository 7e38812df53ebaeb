"""The body of ``POST /repack``: what an operator may ask of one run, and its validation.

Pure: no I/O. Neighbours: ``service`` (runs what is asked), ``scheduler_ext.http_server`` (reads
the body and answers 400 with the message of a ``ValueError``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from repack.problem.goal_spec import GOALS

PLACE = "place"  # the repacker proper: make pending pods fit
RUN_MODES = (PLACE, *GOALS)  # and the balancing engine's goals (docs/architecture.md#balancing)


@dataclass(frozen=True)
class RunRequest:
    """The optional JSON body of ``POST /repack``."""

    time_limit: float | None = None
    dry_run: bool = False
    mode: str = PLACE


MAX_REQUEST_BYTES = 4096


def parse_run_request(body: bytes | bytearray, max_time_limit: float) -> RunRequest:
    """``{"time_limit": seconds, "dry_run": bool, "mode": name}``, all optional (``mode``: place,
    the default, or a balancing goal); an empty body is ``{}``.

    Raises ValueError with a message fit for an HTTP 400."""
    if len(body) > MAX_REQUEST_BYTES:
        raise ValueError(f"body larger than {MAX_REQUEST_BYTES} bytes")
    if not body.strip():
        return RunRequest()
    try:
        doc = json.loads(body)
    except ValueError as exc:  # UnicodeDecodeError included
        raise ValueError(f"malformed JSON: {exc}") from exc
    except RecursionError:
        raise ValueError("malformed JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError("the body must be a JSON object")
    unknown = sorted(set(doc) - {"time_limit", "dry_run", "mode"})
    if unknown:
        # ascii(): a key may be anything JSON can spell, lone surrogates included.
        names = ", ".join(ascii(name)[:60] for name in unknown[:5])
        raise ValueError(f"unknown field(s) {names}; use time_limit, dry_run, mode")
    limit = doc.get("time_limit")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int | float):
            raise ValueError("time_limit must be a number of seconds")
        if not 0 < limit <= max_time_limit:
            raise ValueError(f"time_limit must be in (0, {max_time_limit:g}] seconds")
    dry_run = doc.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ValueError("dry_run must be true or false")
    mode = doc.get("mode", PLACE)
    if mode not in RUN_MODES:
        raise ValueError(f"mode must be one of {', '.join(RUN_MODES)}")
    return RunRequest(float(limit) if limit is not None else None, dry_run, mode)
