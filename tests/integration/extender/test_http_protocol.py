"""The extender v1 protocol over real HTTP, with payloads shaped as kube-scheduler sends them."""

from __future__ import annotations

import json
import logging

import pytest

from scheduler_ext.ledger import StaleData
from scheduler_ext.pods import PodFacts
from scheduler_ext.service import Settings

from .conftest import Extender, MakeExtender, extender_args, node_object, pod_object

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


async def test_filter_with_node_names(extender: Extender) -> None:
    extender.feed("n1", 3.0)
    extender.feed("n2", 0.4)
    extender.feed("n3", 1.0)  # exactly the threshold passes
    status, body = await extender.post("filter", extender_args(pod_object(), ["n1", "n2", "n3"]))
    assert status == 200
    assert set(body) == FILTER_KEYS
    assert body["Nodes"] is None
    assert body["NodeNames"] == ["n1", "n3"]
    assert body["FailedNodes"] == {"n2": "carico: avail 0.4 - reserved 0 < 1"}
    assert body["FailedAndUnresolvableNodes"] == {}
    assert body["Error"] == ""


async def test_filter_with_full_nodes_returns_the_same_node_objects(extender: Extender) -> None:
    extender.feed("node-a", 5.0)
    extender.feed("node-b", 0.2)
    extender.feed("node-c", 2.0)
    request = extender_args(pod_object(), ["node-a", "node-b", "node-c"], cache_capable=False)
    status, body = await extender.post("filter", request)
    assert status == 200
    assert set(body) == FILTER_KEYS
    assert body["NodeNames"] is None
    # Every field of the passing Node objects comes back untouched (images, "Port" key, ...).
    assert body["Nodes"]["items"] == [node_object("node-a"), node_object("node-c")]
    assert body["FailedNodes"] == {"node-b": "carico: avail 0.2 - reserved 0 < 1"}


async def test_filter_full_nodes_all_pass_echoes_the_list(extender: Extender) -> None:
    for name in ("a", "b"):
        extender.feed(name, 4.0)
    request = extender_args(pod_object(), ["a", "b"], cache_capable=False)
    status, body = await extender.post("filter", request)
    assert status == 200
    assert body["Nodes"]["items"] == [node_object("a"), node_object("b")]
    assert body["FailedNodes"] == {}


async def test_prioritize_is_a_bare_list_scaled_to_the_best(extender: Extender) -> None:
    extender.feed("n1", 8.0)
    extender.feed("n2", 4.0)
    extender.feed("n3", 0.5)
    status, body = await extender.post(
        "prioritize", extender_args(pod_object(), ["n1", "n2", "n3", "unknown"])
    )
    assert status == 200
    # 10 * free / 8 rounded half up: 10, 5, 0.625 -> 1; no data -> 0 (fail-open).
    assert body == [
        {"Host": "n1", "Score": 10},
        {"Host": "n2", "Score": 5},
        {"Host": "n3", "Score": 1},
        {"Host": "unknown", "Score": 0},
    ]
    status, full = await extender.post(
        "prioritize", extender_args(pod_object(), ["n1", "n2"], cache_capable=False)
    )
    assert full == [{"Host": "n1", "Score": 10}, {"Host": "n2", "Score": 5}]


async def test_bind_reserves_and_creates_the_binding(extender: Extender) -> None:
    extender.feed("n1", 1.5)
    args = {"PodName": "p1", "PodNamespace": "shop", "PodUID": "u1", "Node": "n1"}
    status, body = await extender.post("bind", json.dumps(args).encode())
    assert (status, body) == (200, {"Error": ""})
    assert [(b.namespace, b.name, b.uid, b.node) for b in extender.cluster.bindings] == [
        ("shop", "p1", "u1", "n1")
    ]
    assert extender.service.table.reserved("n1") == 1
    # The reservation now fails the next pod: 1.5 - 1 < 1.
    status, body = await extender.post("filter", extender_args(pod_object(), ["n1"]))
    assert body["FailedNodes"] == {"n1": "carico: avail 1.5 - reserved 1 < 1"}
    args2 = {"PodName": "p2", "PodNamespace": "shop", "PodUID": "u2", "Node": "n1"}
    status, body = await extender.post("bind", json.dumps(args2).encode())
    assert status == 200
    assert body["Error"] == "carico: avail 1.5 - reserved 1 < 1"
    assert len(extender.cluster.bindings) == 1


async def test_each_bind_logs_the_room_it_was_decided_on(
    extender: Extender, caplog: pytest.LogCaptureFixture
) -> None:
    extender.feed("n1", 2.5)
    caplog.set_level(logging.INFO, logger="scheduler_ext.service")
    for i, node in enumerate(("n1", "n1", "never-reported")):
        args = {"PodName": f"p{i}", "PodNamespace": "shop", "PodUID": f"u{i}", "Node": node}
        status, body = await extender.post("bind", json.dumps(args).encode())
        assert (status, body) == (200, {"Error": ""})
    lines = [r for r in caplog.records if getattr(r, "decision", "") == "bind"]
    # The room before each unit was taken: 2.5, then 2.5 - 1; the unknown node passed on the
    # default fail-open policy with nothing to check, and says so.
    assert [(r.pod, r.node, r.room, r.reserved, r.stale) for r in lines] == [  # type: ignore[attr-defined]
        ("shop/p0", "n1", 2.5, 1, ""),
        ("shop/p1", "n1", 1.5, 2, ""),
        ("shop/p2", "never-reported", None, 1, "missing"),
    ]
    assert lines[1].getMessage() == "bind shop/p1 to n1: room 1.5 >= threshold 1"
    assert (
        lines[2].getMessage() == "bind shop/p2 to never-reported: missing capacity data (fail-open)"
    )


async def test_failed_binding_undoes_the_reservation(extender: Extender) -> None:
    extender.feed("n1", 3.0)
    extender.cluster.fail_next_bind('Operation cannot be fulfilled on pods/binding "p1"')
    args = {"PodName": "p1", "PodNamespace": "shop", "PodUID": "u1", "Node": "n1"}
    status, body = await extender.post("bind", json.dumps(args).encode())
    assert status == 200
    assert body == {"Error": 'Operation cannot be fulfilled on pods/binding "p1"'}
    assert extender.service.table.reserved("n1") == 0
    assert extender.service.ledger.open_count() == 0


async def test_exempt_pods_pass_untouched(extender: Extender) -> None:
    extender.feed("full", 0.0)
    daemon = pod_object(
        "agent-x", "monitoring", metadata__ownerReferences=[{"kind": "DaemonSet", "name": "a"}]
    )
    critical = pod_object("dns", "apps", spec__priorityClassName="system-cluster-critical")
    mirror = pod_object(
        "etcd-n1", "infra", metadata__annotations={"kubernetes.io/config.mirror": "abc"}
    )
    system = pod_object("coredns", "kube-system")
    for pod in (daemon, critical, mirror, system):
        status, body = await extender.post("filter", extender_args(pod, ["full", "nodata"]))
        assert body["NodeNames"] == ["full", "nodata"] and body["FailedNodes"] == {}, pod
        _, nodes_body = await extender.post(
            "filter", extender_args(pod, ["full"], cache_capable=False)
        )
        assert nodes_body["Nodes"]["items"] == [node_object("full")]
        _, scores = await extender.post("prioritize", extender_args(pod, ["full"]))
        assert scores == [{"Host": "full", "Score": 0}]
    # Bind of a pod seen in a filter call: exempt, no reservation, no capacity check.
    args = {"PodName": "agent-x", "PodNamespace": "monitoring", "PodUID": "", "Node": "full"}
    args["PodUID"] = daemon["metadata"]["uid"]
    status, body = await extender.post("bind", json.dumps(args).encode())
    assert body == {"Error": ""}
    assert extender.service.ledger.open_count() == 0


async def test_stale_data_fail_open_and_fail_closed(make_extender: MakeExtender) -> None:
    open_ext: Extender = await make_extender(Settings(stale_after=10))
    closed_ext: Extender = await make_extender(
        Settings(stale_after=10, stale_policy=StaleData.FAIL_CLOSED)
    )
    for ext in (open_ext, closed_ext):
        ext.feed("old", 0.0)
        ext.clock.advance(30)
        ext.feed("fresh", 5.0)
    request = extender_args(pod_object(), ["old", "fresh", "none"])
    _, body = await open_ext.post("filter", request)
    assert body["NodeNames"] == ["old", "fresh", "none"]
    _, body = await closed_ext.post("filter", request)
    assert body["NodeNames"] == ["fresh"]
    assert body["FailedAndUnresolvableNodes"] == {
        "old": "carico: capacity data of node old is 30s old (stale after 10s)",
        "none": "carico: no capacity report for node none",
    }
    _, metrics = await open_ext.get("/metrics")
    assert (
        'carico_extender_stale_data_decisions_total{policy="fail-open",reason="stale",'
        'verb="filter"} 1.0' in metrics
    )
    assert (
        'carico_extender_stale_data_decisions_total{policy="fail-open",reason="missing",'
        'verb="filter"} 1.0' in metrics
    )


async def test_preempt_keeps_nodes_the_victims_free_enough(extender: Extender) -> None:
    extender.feed("tight", 0.2)  # 0.2 + 1 victim >= 1: candidate
    extender.feed("hopeless", -0.0)  # 0 + 0 victims: dropped
    extender.feed("heavy", 0.5)
    extender.service.ledger.reserve(PodFacts("x", "r1"), "heavy", extender.clock(), check=False)
    extender.service.ledger.reserve(PodFacts("x", "r2"), "heavy", extender.clock(), check=False)
    # heavy: 0.5 - 2 + 2 victims = 0.5 < 1: dropped
    meta = {
        "tight": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 0},
        "hopeless": {"Pods": [], "NumPDBViolations": 0},
        "heavy": {"Pods": [{"UID": "v2"}, {"UID": "v3"}], "NumPDBViolations": 1},
    }
    body = {"Pod": pod_object(), "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
    status, reply = await extender.post("preempt", json.dumps(body).encode())
    assert status == 200
    assert reply == {"NodeNameToMetaVictims": {"tight": meta["tight"]}}
    # Full victims (nodeCacheCapable false) come back as MetaVictims with their UIDs.
    victim = pod_object("victim", "shop", uid="v9")
    full = {
        "Pod": pod_object(),
        "NodeNameToVictims": {"tight": {"Pods": [victim], "NumPDBViolations": 2}},
        "NodeNameToMetaVictims": None,
    }
    status, reply = await extender.post("preempt", json.dumps(full).encode())
    assert reply == {
        "NodeNameToMetaVictims": {"tight": {"Pods": [{"UID": "v9"}], "NumPDBViolations": 2}}
    }


async def test_nodes_explain_and_readiness(make_extender: MakeExtender) -> None:
    ext: Extender = await make_extender(watch=False)
    status, text = await ext.get("/readyz")
    assert status == 503 and "ledger" in text
    ext.service.on_pod_list([])
    assert (await ext.get("/readyz"))[0] == 200
    assert (await ext.get("/healthz"))[0] == 200

    ext.feed("n1", 2.5, sequence=7)
    ext.clock.advance(4)
    _, nodes = await ext.get("/api/v1/nodes")
    (n1,) = nodes
    assert n1["name"] == "n1" and n1["avail"] == 2.5 and n1["reserved"] == 0
    assert n1["data_age_seconds"] == 4.0 and n1["stale"] is False and n1["mode"] == "live"
    assert n1["k"] == 0.25 and n1["capacity"] == 2.0 and n1["per_pod_cost"] == 0.1
    assert n1["pods"] == 3 and n1["health"]["psi_available"] is True

    pod = pod_object("api-0", "shop")
    ext.feed("n2", 0.1)
    await ext.post("filter", extender_args(pod, ["n1", "n2"]))
    await ext.post("prioritize", extender_args(pod, ["n1"]))
    status, why = await ext.get("/api/v1/explain?pod=shop/api-0")
    assert status == 200
    assert why["filter"]["passed"] == ["n1"]
    assert why["filter"]["failed"] == {"n2": "carico: avail 0.1 - reserved 0 < 1"}
    assert why["prioritize"]["scores"] == {"n1": 10}
    assert (await ext.get("/api/v1/explain?pod=shop/nope"))[0] == 404
    assert (await ext.get("/api/v1/explain?pod=bad"))[0] == 400

    _, metrics = await ext.get("/metrics")
    for line in (
        'carico_extender_node_avail{node="n1"} 2.5',
        'carico_extender_node_reserved{node="n1"} 0.0',
        'carico_extender_requests_total{outcome="ok",verb="filter"} 1.0',
        'carico_extender_decisions_total{outcome="fail",verb="filter"} 1.0',
        'carico_extender_request_duration_seconds_count{verb="prioritize"} 1.0',
        "carico_extender_reservations_open 0.0",
        'carico_extender_reports_total{outcome="accepted"} 2.0',
    ):
        assert line in metrics, line


async def test_full_nodes_mode_is_explained_and_binds_are_counted(
    make_extender: MakeExtender,
) -> None:
    ext: Extender = await make_extender(Settings(forget_after=120))
    ext.feed("big", 4.0)
    ext.feed("small", 0.5)
    pod = pod_object("db-0", "shop")
    await ext.post("filter", extender_args(pod, ["big", "small"], cache_capable=False))
    _, why = await ext.get("/api/v1/explain?pod=shop/db-0")
    assert why["filter"]["passed"] == ["big"]
    assert why["filter"]["failed"] == {"small": "carico: avail 0.5 - reserved 0 < 1"}
    for name, node in (("db-0", "big"), ("db-1", "small")):
        args = {"PodName": name, "PodNamespace": "shop", "PodUID": f"u-{name}", "Node": node}
        await ext.post("bind", json.dumps(args).encode())
    _, metrics = await ext.get("/metrics")
    for line in (
        'carico_extender_decisions_total{outcome="bound",verb="bind"} 1.0',
        'carico_extender_decisions_total{outcome="refused",verb="bind"} 1.0',
        'carico_extender_node_reserved{node="big"} 1.0',
        "carico_extender_reservations_open 1.0",
    ):
        assert line in metrics, line
    # A node silent past --forget-after leaves the table (and /metrics); its reservation stays.
    ext.clock.advance(121)
    ext.feed("big", 4.0, sequence=2, timestamp=1.7e9 + 121)
    ext.service.sweep()
    _, nodes = await ext.get("/api/v1/nodes")
    assert [n["name"] for n in nodes] == ["big"]
    _, metrics = await ext.get("/metrics")
    assert 'node="small"' not in metrics


async def test_fail_closed_right_after_start_asks_kube_scheduler_to_retry(
    make_extender: MakeExtender,
) -> None:
    closed: Extender = await make_extender(
        Settings(stale_after=10, stale_policy=StaleData.FAIL_CLOSED)
    )
    request = extender_args(pod_object(), ["a", "b"])
    # No report yet, 2 s after start: an error (kube-scheduler backs off and retries), not
    # "unresolvable" (which would park the pod as unschedulable for minutes).
    closed.clock.advance(2)
    _, body = await closed.post("filter", request)
    assert "no capacity report received yet" in body["Error"]
    assert body["NodeNames"] == [] and body["FailedAndUnresolvableNodes"] == {}
    _, metrics = await closed.get("/metrics")
    assert 'carico_extender_requests_total{outcome="warming_up",verb="filter"} 1.0' in metrics
    # One node reports: ordinary decisions again, the silent one unresolvable.
    closed.feed("a", 3.0)
    _, body = await closed.post("filter", request)
    assert body["Error"] == "" and body["NodeNames"] == ["a"]
    assert set(body["FailedAndUnresolvableNodes"]) == {"b"}
    # Past one staleness window with no report at all: the policy applies as usual.
    later: Extender = await make_extender(
        Settings(stale_after=10, stale_policy=StaleData.FAIL_CLOSED)
    )
    later.clock.advance(11)
    _, body = await later.post("filter", request)
    assert body["Error"] == "" and set(body["FailedAndUnresolvableNodes"]) == {"a", "b"}
    # Fail-open never errors: it passes the unreported nodes.
    fail_open: Extender = await make_extender(Settings(stale_after=10))
    _, body = await fail_open.post("filter", request)
    assert body["Error"] == "" and body["NodeNames"] == ["a", "b"]
