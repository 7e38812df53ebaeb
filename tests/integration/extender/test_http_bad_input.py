"""Bad requests get clear 4xx answers, never touch the state, and the server keeps serving."""

from __future__ import annotations

import json

from .conftest import Extender, MakeExtender, extender_args, pod_object


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
