"""Fuzzing the extender's HTTP API with bodies drawn from its own OpenAPI description.

For every verb under the prefix, ``POST /repack`` and the JSON API's query parameters: valid
documents from the published schemas, and the same documents mutated (wrong types, missing and
extra fields, huge numbers, NaN and Infinity, deep nesting, duplicate keys, bytes that are not
UTF-8, truncated and oversized bodies), plus broken HTTP framing on a raw socket, all against a
real server on 127.0.0.1. Properties: no 5xx, an answer within the request timeout, a refused
input changes nothing (the JSON API's views, the ledger, the bindings), no request body stays
held, and the Python heap the servers keep stays within a bound over the run.
"""

from __future__ import annotations

import gc
import json
import logging
import tracemalloc
import urllib.parse
from collections import deque
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler_ext.openapi import OPENAPI_PATH

from .conftest import budget, tried
from .mutations import any_json, from_schema, mutated_bytes, mutated_json, strings
from .servers import MAX_BODY, NODE, NODES, POD, Extender

VERBS = ("filter", "prioritize", "bind", "preempt")
# What a request may be answered: never a 5xx (503 only under concurrent load, not sent here).
REFUSALS = {400, 404, 405, 413, 415}
# Python memory the servers (aiohttp, msgspec, the extender) still hold after the last LEAK_REPLAY
# inputs of the run are sent again twice: bodies are at most MAX_BODY (64 KiB) and none may be
# kept, and the explained decisions, the ledger and the history are bounded, so growth on inputs
# already seen is a leak. The bound is 256 KiB over 2 x 150 requests (under 1 KB a request): the
# servers kept about 10 KB (aiohttp's connection bookkeeping), a handler keeping each body it
# read 670 KB. Measured with tracemalloc over a replay, not over the whole run (tracing slows
# msgspec and hypothesis about eightfold), and not as the resident size: the allocator keeps the
# pages of freed transient bodies, so RSS rose by 60-100 MB over 2000-5000 inputs while the
# traced heap stayed flat.
HEAP_GROWTH_BOUND = 256 << 10
LEAK_REPLAY = 150
_TOOLING = ("/hypothesis/", "/tests/fuzz/", "tracemalloc", "/_pytest/", "/pluggy/")


@pytest.fixture(scope="module")
def openapi(extender: Extender) -> dict[str, Any]:
    status, body = extender.request("GET", OPENAPI_PATH)
    assert status == 200
    doc: dict[str, Any] = json.loads(body)
    return doc


def _request_schema(openapi: dict[str, Any], path: str) -> st.SearchStrategy[Any]:
    op = openapi["paths"][path]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    return from_schema(schema, openapi["components"]["schemas"])


def _node(name: str) -> dict[str, Any]:
    return {**NODE, "metadata": {**NODE["metadata"], "name": name}}


def _realistic(verb: str) -> st.SearchStrategy[Any]:
    """Bodies as kube-scheduler sends them, on nodes the extender knows (so that the mutations
    also reach the decisions, not only the decoding)."""
    names = st.lists(st.sampled_from((*NODES, "gone")), min_size=1, max_size=4)
    pod = st.just(POD)
    if verb in ("filter", "prioritize"):
        cached = st.fixed_dictionaries({"Pod": pod, "Nodes": st.none(), "NodeNames": names})
        full = names.map(
            lambda ns: {"Pod": POD, "Nodes": {"items": [_node(n) for n in ns]}, "NodeNames": None}
        )
        return st.one_of(cached, full)
    if verb == "bind":
        return st.fixed_dictionaries(
            {
                "PodName": st.sampled_from(("web-1", "web-2")),
                "PodNamespace": st.just("shop"),
                "PodUID": st.sampled_from(("u1", "u2")),
                "Node": st.sampled_from((*NODES, "gone")),
            }
        )
    victims = st.dictionaries(
        st.sampled_from(NODES),
        st.fixed_dictionaries(
            {"Pods": st.lists(st.fixed_dictionaries({"UID": strings}), max_size=2)},
            optional={"NumPDBViolations": st.integers(-5, 5)},
        ),
        max_size=3,
    )
    return st.fixed_dictionaries({"Pod": pod, "NodeNameToMetaVictims": victims})


def _refused(verb: str, status: int, body: bytes) -> bool:
    if status >= 400:
        return True
    # bind answers 200 with an Error when it could not bind: a refusal too
    return verb == "bind" and bool(json.loads(body).get("Error"))


def _check_answer(ext: Extender, verb: str, body: bytes, before: dict[str, Any]) -> None:
    errors = ext.failures()[0]
    status, reply = ext.request(
        "POST", f"/scheduler/{verb}", body, {"Content-Type": "application/json"}
    )
    assert status == 200 or status in REFUSALS, (verb, status, reply[:300])
    if status >= 400:
        error = json.loads(reply)["Error"]
        assert isinstance(error, str) and error, reply[:300]
    assert ext.settled() == 0 and ext.failures() == (errors, [])
    if _refused(verb, status, reply):
        assert ext.state() == before, (verb, status, reply[:300])


@pytest.mark.fuzz("extender HTTP verbs")
def test_extender_verbs_survive_schema_based_and_mutated_bodies(
    extender: Extender, openapi: dict[str, Any]
) -> None:
    bodies = {
        verb: mutated_json(
            st.one_of(_request_schema(openapi, f"/scheduler/{verb}"), _realistic(verb)), MAX_BODY
        )
        for verb in VERBS
    }
    sent: deque[tuple[str, bytes]] = deque(maxlen=LEAK_REPLAY)

    @budget(250)
    @given(st.sampled_from(VERBS).flatmap(lambda v: st.tuples(st.just(v), bodies[v])))
    def one(case: tuple[str, bytes]) -> None:
        verb, body = case
        tried("extender HTTP verbs")
        sent.append(case)
        _check_answer(extender, verb, body, extender.state())

    one()
    kept = _heap_kept(extender, list(sent))
    assert sum(s.size_diff for s in kept) < HEAP_GROWTH_BOUND, kept[:5]


def _heap_kept(ext: Extender, cases: list[tuple[str, bytes]]) -> list[tracemalloc.StatisticDiff]:
    """What the servers' heap grew by over two more rounds of ``cases`` (already sent once)."""

    def replay() -> None:
        for verb, body in cases:
            ext.request("POST", f"/scheduler/{verb}", body, {"Content-Type": "application/json"})
        assert ext.settled() == 0
        gc.collect()

    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    # The refusals' warnings off: pytest keeps every log record of a test, which is no leak.
    logging.disable(logging.WARNING)
    try:
        replay()  # anything tracing itself allocates on a first pass
        before = tracemalloc.take_snapshot()
        replay()
        replay()
        after = tracemalloc.take_snapshot()
    finally:
        logging.disable(logging.NOTSET)
        if not tracing:
            tracemalloc.stop()
    return [
        s
        for s in after.compare_to(before, "filename")
        if s.size_diff > 0 and not any(part in s.traceback[0].filename for part in _TOOLING)
    ]


@pytest.mark.fuzz("extender POST /repack")
def test_post_repack_survives_schema_based_and_mutated_bodies(
    extender: Extender, openapi: dict[str, Any]
) -> None:
    schema = openapi["components"]["schemas"]["RunRequest"]
    valid = from_schema(schema, {})
    # time_limit bounded small: an accepted body runs a real (dry-run) solve
    small = st.fixed_dictionaries(
        {}, optional={"time_limit": st.floats(0.01, 0.2), "dry_run": st.just(True)}
    )
    bodies = mutated_json(st.one_of(valid, small), 4096)

    @budget(50)
    @given(bodies)
    def one(body: bytes) -> None:
        tried("extender POST /repack")
        before, errors = extender.state(), extender.failures()[0]
        status, reply = extender.request("POST", "/repack", body)
        assert status in (200, 400, 413), (status, reply[:300])
        doc = json.loads(reply)
        assert extender.settled() == 0 and extender.failures() == (errors, [])
        if status != 200:
            assert doc["Error"].startswith("repack: "), doc
            assert extender.state() == before

    one()


@pytest.mark.fuzz("extender GET query")
def test_json_api_query_parameters_are_answered_or_refused(extender: Extender) -> None:
    values = st.one_of(strings, st.text(), st.integers().map(str), any_json.map(json.dumps))

    @budget(80)
    @given(
        st.sampled_from(("/api/v1/explain?pod=", "/api/v1/repack/plans?limit=")),
        values,
    )
    def one(path: str, value: str) -> None:
        tried("extender GET query")
        before = extender.state()
        quoted = urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe="")
        status, reply = extender.request("GET", path + quoted)
        assert status in (200, 400, 404), (path, value, status, reply[:300])
        json.loads(reply)
        assert extender.state() == before

    one()


FRAMES = (
    b'POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"Pod"',
    b"POST /scheduler/bind HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
    b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
    b"Content-Length: 3\r\n\r\n{}",
    b"POST /repack HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n"
    b"\x1f\x8b\x08\x00",
)


@pytest.mark.fuzz("extender HTTP framing")
def test_broken_http_framing_never_gets_a_5xx(extender: Extender) -> None:
    frames = st.one_of(st.sampled_from(FRAMES), st.sampled_from(FRAMES).flatmap(mutated_bytes))

    @budget(60)
    @given(frames)
    def one(frame: bytes) -> None:
        tried("extender HTTP framing")
        before, errors = extender.state(), extender.failures()[0]
        answer = extender.raw(frame)
        # Either no answer (the server closed a connection it could not read) or a status line.
        if answer:
            status_line = answer.split(b"\r\n", 1)[0]
            assert status_line.startswith(b"HTTP/"), answer[:200]
            status = int(status_line.split()[1])
            assert status < 500, answer[:300]
        assert extender.settled() == 0 and extender.failures() == (errors, [])
        assert extender.state() == before

    one()
