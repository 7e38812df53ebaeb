"""The service remembers the facts of recent Pods by their JSON: the prioritize that follows a
filter reuses them, a changed Pod is never answered with the old facts, and the memory is
bounded. The prioritize reuses the filter's passed list too."""

from __future__ import annotations

import json

import pytest

from scheduler_ext import service as service_module

from .conftest import MakeExtender, extender_args, pod_object


async def test_prioritize_reuses_the_facts_of_the_filtered_pod(
    make_extender: MakeExtender,
) -> None:
    ext = await make_extender()
    ext.feed("n1", 5.0)
    pod = pod_object("web-1", spec__schedulerName="carico-scheduler")
    status, _ = await ext.post("filter", extender_args(pod, ["n1"]))
    assert status == 200
    status, _ = await ext.post("prioritize", extender_args(pod, ["n1"]))
    assert status == 200
    memo = ext.service._pod_facts
    assert len(memo) == 1
    (facts,) = memo.values()
    assert facts.name == "web-1" and facts.scheduler == "carico-scheduler"
    assert ext.service._recent["shop/web-1"] is facts


async def test_a_changed_pod_is_decided_on_its_new_facts(make_extender: MakeExtender) -> None:
    ext = await make_extender()
    ext.feed("n1", 0.5)  # below the threshold: fails every managed pod
    managed = pod_object("web-1", spec__schedulerName="carico-scheduler")
    _, reply = await ext.post("filter", extender_args(managed, ["n1"]))
    assert reply["NodeNames"] == [] and "n1" in reply["FailedNodes"]
    # the same pod, now of a scheduler Carico does not manage: exempt, so the node passes
    other = pod_object("web-1", spec__schedulerName="default-scheduler")
    _, reply = await ext.post("filter", extender_args(other, ["n1"]))
    assert reply["NodeNames"] == ["n1"]
    assert len(ext.service._pod_facts) == 2


async def test_the_memory_of_pods_is_bounded(make_extender: MakeExtender) -> None:
    ext = await make_extender()
    ext.feed("n1", 5.0)
    kept = service_module.POD_FACTS_KEPT
    for i in range(kept + 10):
        status, _ = await ext.post("filter", extender_args(pod_object(f"p-{i}"), ["n1"]))
        assert status == 200
    memo = ext.service._pod_facts
    assert len(memo) == kept
    assert "p-0" not in {f.name for f in memo.values()}  # the oldest went first
    assert ext.service._pod_facts_bytes == sum(len(raw) for raw in memo)


async def test_prioritize_reuses_the_list_the_filter_passed(
    make_extender: MakeExtender, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-scheduler sends prioritize the very list the filter's reply passed, encoded as Go
    encodes it (compact): the extender remembers it with the filter's lookups and does not decode
    or check it again."""
    ext = await make_extender()
    # more than the per-node loops take (decisions.SMALL_FILTER, SMALL_PRIORITIZE): the filter
    # looks the names up in the table, and the prioritize reads its slots
    names = [f"n{i}" for i in range(260)]
    for i, name in enumerate(names):
        ext.feed(name, 0.5 if i % 3 == 0 else 5.0)
    pod = pod_object("web-1", spec__schedulerName="carico-scheduler")
    status, reply = await ext.post("filter", extender_args(pod, names))
    assert status == 200 and 64 < len(reply["NodeNames"]) < len(names)
    expected = await ext.post("prioritize", extender_args(pod, reply["NodeNames"]))

    def no_decoding(raw: bytes) -> list[str]:
        raise AssertionError("the passed list was decoded again")

    monkeypatch.setattr(ext.service, "_names", no_decoding)  # a list is checked only once decoded
    body = {"Pod": pod, "Nodes": None, "NodeNames": reply["NodeNames"]}
    compact = json.dumps(body, separators=(",", ":")).encode()  # as kube-scheduler sends it
    assert await ext.post("prioritize", compact) == expected
