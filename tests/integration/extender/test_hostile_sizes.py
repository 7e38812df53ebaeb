"""What a hostile client can make the extender hold stays bounded (over real HTTP).

Names are refused as the API server would refuse them, caches are bounded by bytes (Python
allocations traced in this process, which serves the extender), and request bodies held at once
share one budget. Sizes are asserted, never timings.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import grpc

from protos.carico.v1 import capacity_pb2_grpc
from scheduler_ext.decisions import CANDIDATE_CACHE_BYTES
from scheduler_ext.http_server import BODIES_IN_FLIGHT, BUDGET
from scheduler_ext.service import Settings

from .conftest import Extender, MakeExtender, extender_args, pod_object, report

MIB = 1 << 20


def _bind(**change: str) -> bytes:
    args = {"PodName": "p", "PodNamespace": "shop", "PodUID": "u", "Node": "n1", **change}
    return json.dumps(args).encode()


async def test_names_kubernetes_would_refuse_are_400s(make_extender: MakeExtender) -> None:
    ext: Extender = await make_extender(max_body=4 * MIB)
    ext.feed("n1", 5.0)
    long = "a" * MIB
    preempt = {"Pod": pod_object(), "NodeNameToMetaVictims": {"N_1": {"Pods": [{"UID": "v"}]}}}
    cases: list[tuple[str, bytes, str]] = [
        ("filter", extender_args(pod_object(name=long), ["n1"]), "pod name is 1048576"),
        ("filter", extender_args(pod_object(name="a" * 254), ["n1"]), "at most 253"),
        ("filter", extender_args(pod_object(name="Web_1"), ["n1"]), "DNS-1123 subdomain"),
        ("filter", extender_args(pod_object(namespace="n" * 64), ["n1"]), "at most 63"),
        ("filter", extender_args(pod_object(namespace="a.b"), ["n1"]), "DNS-1123 label"),
        ("prioritize", extender_args(pod_object(uid="u" * 129), ["n1"]), "at most 128"),
        (
            "filter",
            extender_args(pod_object(spec__priorityClassName=long), ["n1"]),
            "priority class",
        ),
        ("filter", extender_args(pod_object(spec__schedulerName="A b"), ["n1"]), "scheduler"),
        ("filter", extender_args(pod_object(), ["n1", "x" * 254]), "node name is 254"),
        ("prioritize", extender_args(pod_object(), ["n1", ""]), "node name is empty"),
        ("filter", extender_args(pod_object(), ["n1", "N2"], cache_capable=False), "'N2'"),
        ("preempt", json.dumps(preempt).encode(), "'N_1'"),
        ("bind", _bind(PodName=long), "PodName is 1048576"),
        ("bind", _bind(PodNamespace="Shop"), "PodNamespace 'Shop'"),
        ("bind", _bind(PodUID="u" * 129), "PodUID is 129"),
        ("bind", _bind(Node=long), "Node is 1048576"),
        ("bind", _bind(Node="node\n1"), "Node 'node\\n1'"),
    ]
    for verb, body, fragment in cases:
        status, got = await ext.post(verb, body)
        assert status == 400 and fragment in got["Error"], (verb, fragment, got)
        assert len(got["Error"]) < 300  # a refused name is quoted short
    # Nothing of them was remembered: no pod, no decision, no reservation, no node.
    assert not ext.service._recent and len(ext.service.explain) == 0
    assert ext.service.ledger.open_count() == 0 and not ext.cluster.bindings
    _, nodes = await ext.get("/api/v1/nodes")
    assert [n["name"] for n in nodes] == ["n1"]
    # The longest names Kubernetes allows are fine.
    ok = pod_object(name="a" * 253, namespace="n" * 63, uid="u")
    status, got = await ext.post("filter", extender_args(ok, ["n1", "b" * 253]))
    assert status == 200 and got["NodeNames"] == ["n1", "b" * 253], got


async def test_the_candidate_cache_is_bounded_by_bytes(make_extender: MakeExtender) -> None:
    """Forty different lists of half a MiB of short names: decoded, each takes ten times its
    JSON, so a cache bounded by count and request size alone held over 150 MB of them."""
    ext: Extender = await make_extender(Settings(explain_bytes=2 * MIB), max_body=2 * MIB)
    names = [f"n{i:x}" for i in range(60_000)]
    body = extender_args(pod_object(), names)
    assert len(body) < MIB
    tracemalloc.start()
    try:
        await ext.post("filter", body)  # the allocations every request makes warm up first
        base, _ = tracemalloc.get_traced_memory()
        for i in range(40):
            status, got = await ext.post("filter", extender_args(pod_object(), [*names, f"x{i}"]))
            assert status == 200 and len(got["NodeNames"]) == len(names) + 1
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What the process holds beyond the warm-up: the cache, the explain memory (2 MiB here) and
    # the last request's buffers (a few copies of 1 MiB); unbounded it was 32 lists of ~5 MB.
    assert held - base < 32 * MIB + 16 * MIB, (held - base) / MIB
    decider = ext.service.decider
    assert 0 < decider.candidate_bytes <= CANDIDATE_CACHE_BYTES == 32 * MIB
    assert decider.remembered_candidates()  # the bound keeps some, not none


async def test_bodies_held_at_once_share_one_budget(make_extender: MakeExtender) -> None:
    """Uploads that never finish pin at most BODIES_IN_FLIGHT bodies of the largest size; a
    request beyond that is answered 503 at once, and the budget is free again afterwards."""
    limit = 256 << 10
    ext: Extender = await make_extender(max_body=limit)
    ext.feed("n1", 5.0)
    budget = BODIES_IN_FLIGHT * limit
    release = asyncio.Event()
    part = b" " * (limit - 8192)  # four of them, with their heads, leave less than 32 KiB

    async def slow_body() -> AsyncIterator[bytes]:
        yield b'{"Pod":' + json.dumps(pod_object()).encode() + b',"NodeNames":["n1"],"x":"'
        yield part
        await release.wait()
        yield b'"}'

    async def upload() -> tuple[int, Any]:
        return await ext.post("filter", slow_body())  # type: ignore[arg-type]

    held = [asyncio.create_task(upload()) for _ in range(BODIES_IN_FLIGHT)]
    service_budget = ext.http.runner.app[BUDGET]
    while service_budget.held < BODIES_IN_FLIGHT * len(part):
        await asyncio.sleep(0.01)
    status, got = await ext.post("filter", extender_args(pod_object(), ["n1"]) + b" " * 32768)
    assert status == 503 and "retry" in got["Error"], got
    release.set()
    for status, got in await asyncio.gather(*held):
        assert status == 200 and got["NodeNames"] == ["n1"]
    assert service_budget.held == 0 and service_budget.peak <= budget
    status, got = await ext.post("filter", extender_args(pod_object(), ["n1"]) + b" " * 32768)
    assert status == 200


async def test_clients_cannot_add_nodes_past_max_nodes(make_extender: MakeExtender) -> None:
    """Reports and binds naming new nodes stop at --max-nodes (each node costs memory in the
    table and its history); the nodes tracked keep working, and room comes back as they go."""
    ext: Extender = await make_extender(Settings(max_nodes=3, forget_after=60.0))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ext.grpc.port}") as channel:
        stub = capacity_pb2_grpc.CapacityIngestStub(channel)
        reports = [report(f"fake-{i}", 5.0) for i in range(100)]
        summary = await stub.Report(iter(reports), timeout=10)
    assert (summary.accepted, summary.rejected) == (3, 97)
    assert "maximum of 3 nodes" in summary.last_rejection
    assert sorted(ext.service.table.nodes()) == ["fake-0", "fake-1", "fake-2"]
    status, got = await ext.post("bind", _bind(PodName="p1", Node="elsewhere"))
    assert status == 200 and "maximum of 3 nodes" in got["Error"]
    assert (await ext.post("bind", _bind(PodName="p2", Node="fake-1")))[1] == {"Error": ""}
    ext.service.sweep()
    _, history = await ext.get("/api/v1/history")
    assert sorted(history["nodes"]) == ["fake-0", "fake-1", "fake-2"]
    # Forgotten nodes make room; one with a reservation stays tracked until it ends.
    ext.clock.advance(61)
    ext.service.sweep()
    assert sorted(ext.service.table.nodes()) == []
    ext.feed("new-a", 5.0)
    ext.feed("new-b", 5.0)
    assert ext.service.ingest(report("new-c", 5.0), object())[0].value == "invalid"
