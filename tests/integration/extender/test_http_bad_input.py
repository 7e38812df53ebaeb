"""Bad requests get clear 4xx answers, never touch the state, and the server keeps serving."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import tracemalloc

import pytest

from scheduler_ext.http_server import BUDGET

from .conftest import Extender, MakeExtender, extender_args, node_object, pod_object


def _state(ext: Extender) -> tuple[object, ...]:
    return (
        ext.service.ledger.open_count(),
        tuple(sorted(ext.service.table.reserved_counts().items())),
        len(ext.cluster.bindings),
        len(ext.service.explain),
    )


async def test_bad_bodies_are_refused_and_leave_no_trace(make_extender: MakeExtender) -> None:
    ext: Extender = await make_extender(max_body=64 << 10)
    ext.feed("n1", 5.0)
    before = _state(ext)
    cases: list[tuple[str, bytes, int, str]] = [
        ("filter", b'{"Pod": {', 400, "malformed JSON"),
        ("filter", b"", 400, "malformed JSON"),
        ("filter", b'{"Nodes": null, "NodeNames": ["n1"]}', 400, "missing Pod"),
        ("filter", b'{"Pod": null, "Nodes": null, "NodeNames": ["n1"]}', 400, "missing Pod"),
        ("prioritize", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "n1"}', 400, "types"),
        (
            "filter",
            b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": null}',
            400,
            "neither Nodes nor NodeNames",
        ),
        ("filter", b'{"Pod": {"metadata": {}}, "NodeNames": ["n1"]}', 400, "metadata.name"),
        ("bind", b'{"PodName": "p"}', 400, "PodNamespace, Node"),
        ("bind", b"[1, 2]", 400, "types"),
        ("preempt", b'{"NodeNameToMetaVictims": {}}', 400, "missing Pod"),
        ("preempt", b"\xff\xfe", 400, "malformed JSON"),
        ("filter", extender_args(pod_object(), [f"n{i}" for i in range(10_000)]), 413, "limit"),
        ("evict", b"{}", 404, "unknown extender verb 'evict'"),
        ("filter/extra", b"{}", 404, "unknown extender verb"),
    ]
    for verb, body, status, fragment in cases:
        got_status, got = await ext.post(verb, body)
        assert got_status == status, (verb, body[:60], got)
        assert fragment in got["Error"], (verb, got)
    assert _state(ext) == before
    # Still serving, and the counters saw what happened.
    status, good = await ext.post("filter", extender_args(pod_object(), ["n1"]))
    assert status == 200 and good["NodeNames"] == ["n1"]
    _, metrics = await ext.get("/metrics")
    assert 'carico_extender_requests_total{outcome="bad_request",verb="filter"} 6.0' in metrics
    assert 'carico_extender_requests_total{outcome="too_large",verb="filter"} 1.0' in metrics


async def test_wrong_method_and_unknown_paths(extender: Extender) -> None:
    async with extender.session.get(f"{extender.url}/scheduler/filter") as resp:
        assert resp.status == 405
    async with extender.session.post(f"{extender.url}/elsewhere", data=b"{}") as resp:
        assert resp.status == 404


async def test_unexpected_bind_failure_is_reported_and_undone(extender: Extender) -> None:
    extender.feed("n1", 3.0)

    async def broken(pod: object, node: str) -> None:
        raise RuntimeError("connection reset by peer")

    extender.cluster.bind = broken  # type: ignore[method-assign]
    args = {"PodName": "p", "PodNamespace": "shop", "PodUID": "u", "Node": "n1"}
    status, body = await extender.post("bind", json.dumps(args).encode())
    assert status == 200 and body == {"Error": "connection reset by peer"}
    assert extender.service.table.reserved("n1") == 0


DEEP = b"[" * 1000 + b"]" * 1000  # deeper than Python's recursion limit lets a decoder go


async def test_malformed_json_and_encodings_are_400s_logged_as_one_line(
    make_extender: MakeExtender, caplog: pytest.LogCaptureFixture
) -> None:
    ext: Extender = await make_extender()
    ext.feed("n1", 5.0)
    before = _state(ext)
    pod = b'{"metadata":{"name":"p","namespace":"shop"}}'
    node = json.dumps(node_object("n1")).encode()
    cases: list[tuple[str, bytes, dict[str, str], str]] = [
        # Nesting inside a field the extender ignores is decoded (skipped) all the same.
        ("filter", b'{"Pod":' + pod + b',"NodeNames":["n1"],"x":' + DEEP + b"}", {}, "deeply"),
        ("prioritize", b'{"x":' + DEEP + b"}", {}, "nested too deeply"),
        ("preempt", b'{"Pod":' + pod + b',"x":' + DEEP + b"}", {}, "nested too deeply"),
        ("bind", b'{"x":' + DEEP + b"}", {}, "nested too deeply"),
        ("filter", b'{"Pod":' + pod + b',"NodeNames":' + DEEP + b"}", {}, "nested too deeply"),
        # Strings that are not UTF-8, in each place a name is read.
        ("bind", b'{"PodName":"\xff","PodNamespace":"shop","PodUID":"u","Node":"n1"}', {}, "UTF-8"),
        ("filter", b'{"Pod":{"metadata":{"name":"\xff"}},"NodeNames":["n1"]}', {}, "UTF-8"),
        ("filter", b'{"Pod":' + pod + b',"NodeNames":["n1","\xc3"]}', {}, "UTF-8"),
        (
            "filter",
            b'{"Pod":'
            + pod
            + b',"Nodes":{"items":['
            + node.replace(b'"n1"', b'"\xed\xa0\x80"')
            + b']},"NodeNames":null}',
            {},
            "UTF-8",
        ),
        # Content-Encoding that does not match the body, or is unknown.
        ("filter", b"abc", {"Content-Encoding": "gzip"}, "not valid gzip"),
        ("filter", gzip.compress(b"{}")[:-9], {"Content-Encoding": "gzip"}, "truncated"),
        ("filter", b"abc", {"Content-Encoding": "deflate"}, "not valid deflate"),
        ("filter", b"{}", {"Content-Encoding": "br"}, "not supported"),
    ]
    caplog.set_level(logging.INFO)
    for verb, body, headers, fragment in cases:
        caplog.clear()
        async with ext.session.post(f"{ext.url}/scheduler/{verb}", data=body, headers=headers) as r:
            status, got = r.status, await r.json()
        assert status in (400, 415), (verb, body[:60], got)
        assert fragment in got["Error"], (verb, body[:60], got)
        assert [(rec.levelno, rec.exc_info) for rec in caplog.records] == [(logging.WARNING, None)]
        line = caplog.records[0].getMessage()
        assert "\n" not in line and fragment in line, line
    assert _state(ext) == before
    _, metrics = await ext.get("/metrics")
    errors = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith('carico_extender_requests_total{outcome="error"')
    ]
    assert errors and not any(errors), errors
    # A well-formed body sent gzip-compressed is accepted as it is.
    good = gzip.compress(extender_args(pod_object(), ["n1"]))
    async with ext.session.post(
        f"{ext.url}/scheduler/filter", data=good, headers={"Content-Encoding": "gzip"}
    ) as resp:
        assert resp.status == 200 and (await resp.json())["NodeNames"] == ["n1"]


async def test_a_gzip_bomb_is_refused_without_inflating_it(make_extender: MakeExtender) -> None:
    """A small gzip body that would expand far past the limit gets 413, and the server never
    holds more than about the limit of it (Python allocations traced in this process)."""
    limit = 1 << 20
    ext: Extender = await make_extender(max_body=limit)
    bomb = gzip.compress(b'{"Pod":' + b" " * (64 << 20) + b"}", compresslevel=9)
    assert len(bomb) < limit // 4
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        async with ext.session.post(
            f"{ext.url}/scheduler/filter", data=bomb, headers={"Content-Encoding": "gzip"}
        ) as resp:
            status, got = resp.status, await resp.json()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 413 and "limit" in got["Error"]
    # The client's copy of the bomb and the server's inflated limit, with room for aiohttp's
    # buffers; inflating it whole would be 64 MiB.
    assert peak < 4 * limit, peak
    assert ext.service.explain.size_bytes == 0


async def _raw(extender: Extender, data: bytes) -> bytes:
    """``data`` sent as is on a new connection whose sending side is then closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", extender.http.port)
    writer.write(data)
    await writer.drain()
    writer.write_eof()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer


async def test_a_body_shorter_than_its_content_length_is_a_bad_request(
    extender: Extender, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by the fuzz tier: "Content-Length: 100" then 6 bytes and the client gone ended in
    # the verb's "internal error" path, logged with a traceback and counted as outcome error.
    frame = b'POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"Pod"'
    with caplog.at_level(logging.WARNING):
        await _raw(extender, frame)
        budget = extender.http.runner.app[BUDGET]
        for _ in range(500):  # the handler finishes after the client has gone
            if budget.held == 0 and caplog.records:
                break
            await asyncio.sleep(0.01)
    assert budget.held == 0
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "the body ended before its announced length" in caplog.records[0].getMessage()
    _, metrics = await extender.get("/metrics")
    assert 'carico_extender_requests_total{outcome="bad_request",verb="filter"} 1.0' in metrics
    assert 'carico_extender_requests_total{outcome="error",verb="filter"} 0.0' in metrics


async def test_a_request_aiohttp_cannot_parse_is_one_warning_line(
    extender: Extender, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by the fuzz tier: a chunked body whose chunk size is "zz" was answered 400 by
    # aiohttp but logged at ERROR with a traceback, as if the extender had failed.
    frame = b"POST /scheduler/bind HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
    with caplog.at_level(logging.WARNING):
        # aiohttp answers 400 (the answer may be lost: the connection is reset at once)
        await _raw(extender, frame)
        for _ in range(500):
            if caplog.records:
                break
            await asyncio.sleep(0.01)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    line = caplog.records[0].getMessage()
    assert "malformed HTTP request from 127.0.0.1 refused (400)" in line and "\n" not in line
    assert caplog.records[0].exc_info is None
