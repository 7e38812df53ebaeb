"""Reading an HTTP request body within limits: on the wire, once decompressed, and all at once.

aiohttp would decompress a ``Content-Encoding: gzip`` body whole before checking its size, so a
body of a few hundred kilobytes could expand to gigabytes before the 413, and a body that is not
gzip at all ended as a bare 500. The server therefore runs with aiohttp's decompression off and
bodies are read here, chunk by chunk: a compressed body is inflated with zlib's ``max_length``,
so no more than the limit plus one byte is ever produced, and what is not gzip (or deflate) is a
400. Every body held counts against one :class:`BodyBudget` shared by all requests, so the memory
that concurrent (or deliberately slow) uploads can pin is bounded too; past it a request is
answered 503 and retried by its client (docs/architecture.md#failure-behaviour). A body that ends
before its ``Content-Length`` (or last chunk) because the client went away is the client's fault
too: a 400 (which nobody reads) counted and logged as a bad request, not an internal error.

Neighbours: ``http_server`` (the handlers call :func:`read_body`).
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import ClientPayloadError, web

INFLATE_STEP = 1 << 20  # bytes inflated per zlib call: no large transient output buffers
# What Content-Encoding may say, and the zlib window bits that decode it (32 + 15: gzip or zlib
# header, detected; deflate in HTTP means the zlib format, though some clients send raw deflate).
_ENCODINGS = {"": None, "identity": None, "gzip": 16 + 15, "x-gzip": 16 + 15, "deflate": 32 + 15}


class BodyRefused(Exception):
    """The body cannot be taken; ``status`` is the HTTP answer, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class BodyBudget:
    """The bytes of request bodies held at once, across all requests, up to ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0

    def take(self, n: int) -> None:
        if self.held + n > self.limit:
            raise BodyRefused(
                503, f"the extender holds {self.limit} bytes of request bodies already; retry"
            )
        self.held += n
        self.peak = max(self.peak, self.held)

    def give(self, n: int) -> None:
        self.held -= n


@asynccontextmanager
async def read_body(
    request: web.Request, max_bytes: int, budget: BodyBudget
) -> AsyncIterator[bytearray]:
    """The request's body, decompressed, at most ``max_bytes``; held in ``budget`` until the
    ``async with`` block ends. Raises :class:`BodyRefused` (413, 415, 400 or 503)."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in _ENCODINGS:
        raise BodyRefused(
            415, f"Content-Encoding {encoding[:40]!r} is not supported: send gzip, deflate or none"
        )
    wbits = _ENCODINGS[encoding]
    if wbits is None and (request.content_length or 0) > max_bytes:
        raise _too_large(max_bytes)
    inflate = zlib.decompressobj(wbits) if wbits is not None else None
    # One growing buffer, never joined from parts: a body is held once, not twice at the end
    # (msgspec and json decode a bytearray as they do bytes).
    body = bytearray()
    size = 0

    def add(data: bytes) -> None:
        nonlocal size
        if size + len(data) > max_bytes:
            raise _too_large(max_bytes)
        budget.take(len(data))
        size += len(data)
        body.extend(data)

    try:
        async for chunk in _chunks(request):
            if inflate is None:
                add(chunk)
                continue
            pending = chunk
            while pending:
                try:
                    # At most INFLATE_STEP bytes a step, and never more than one byte past the
                    # limit, whatever the ratio: a bomb costs the limit, not what it inflates to.
                    data = inflate.decompress(pending, min(INFLATE_STEP, max_bytes + 1 - size))
                except zlib.error as exc:
                    raise BodyRefused(400, f"body is not valid {encoding}: {exc}") from None
                add(data)
                pending = inflate.unconsumed_tail
        if inflate is not None and not inflate.eof:
            raise BodyRefused(400, f"body is not valid {encoding}: empty or truncated")
        if inflate is not None and inflate.unused_data:
            raise BodyRefused(400, f"body is not valid {encoding}: data after its end")
        yield body
    finally:
        budget.give(size)
        # The bytes go now, whatever still refers to the buffer: a refusal's traceback keeps
        # this frame (and so the buffer) alive until the cyclic collector runs, which after a
        # few refused bodies of the limit's size would be that many times the limit.
        with contextlib.suppress(BufferError):
            body.clear()


async def _chunks(request: web.Request) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive; a connection lost before its end is a refusal."""
    try:
        async for chunk in request.content.iter_any():
            yield chunk
    except (ConnectionResetError, ClientPayloadError) as exc:
        raise BodyRefused(400, f"the body ended before its announced length: {exc}") from None


def _too_large(max_bytes: int) -> BodyRefused:
    # Made where it is raised, never kept in a local: an exception held by the frame its
    # traceback refers to is a reference cycle.
    return BodyRefused(413, f"request body larger than the limit of {max_bytes} bytes")
