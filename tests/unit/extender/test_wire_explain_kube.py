"""Decoding kube-scheduler's payloads, the explain memory, and the API-object parsing of kube.py."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from scheduler_ext import wire
from scheduler_ext.explain import ENTRY_BYTES, POD_BYTES, ExplainLog
from scheduler_ext.kube import api_error_message, parse_pod_list, parse_watch_line
from scheduler_ext.pods import facts_from_wire

PAYLOADS = Path(__file__).parents[2] / "integration" / "extender" / "payloads"
POD = json.loads((PAYLOADS / "pod.json").read_text())
NODE = (PAYLOADS / "node.json").read_text()


def test_decodes_a_full_pod_with_node_names() -> None:
    body = json.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["a", "b"]}).encode()
    args = wire.decode_args(body)
    assert args.NodeNames == ["a", "b"] and args.Nodes is None
    assert args.Pod is not None
    facts = facts_from_wire(args.Pod)
    assert (facts.namespace, facts.name, facts.uid) == (
        "shop",
        "web-7d4b9c8f6d-x2kqp",
        "3f1c2a9e-5b7d-4e21-9c0a-8d6f4b2e1a77",
    )
    assert facts.owner_kinds == ("ReplicaSet",) and not facts.mirror and facts.priority_class == ""


def test_full_node_list_keeps_items_byte_for_byte() -> None:
    items = [json.loads(NODE.replace("NODE_NAME", n)) for n in ("x", "y")]
    body = json.dumps({"Pod": POD, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})
    args = wire.decode_args(body.encode())
    assert args.Nodes is not None and args.NodeNames is None
    assert [i.metadata.name for i in args.Nodes.items or () if i.metadata] == ["x", "y"]
    raws = wire.decode_nodes_raw(body.encode())
    assert raws.Nodes is not None
    assert [json.loads(bytes(r)) for r in raws.Nodes.items or ()] == items
    reply = wire.encode(wire.FilterResultNodes(wire.RawNodeList(raws.Nodes.items or []), {}, {}))
    assert json.loads(reply)["Nodes"]["items"] == items


def test_reply_keys_match_the_go_field_names() -> None:
    names = json.loads(wire.encode(wire.FilterResultNames(["a"], {"b": "why"}, {})))
    assert names == {
        "NodeNames": ["a"],
        "FailedNodes": {"b": "why"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
        "Nodes": None,
    }
    assert json.loads(wire.encode([wire.HostPriority("a", 3)])) == [{"Host": "a", "Score": 3}]
    assert json.loads(wire.encode(wire.BindingResult())) == {"Error": ""}
    victims = wire.PreemptionResult({"n": wire.MetaVictims([wire.MetaPod("u")], 1)})
    assert json.loads(wire.encode(victims)) == {
        "NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "u"}], "NumPDBViolations": 1}}
    }


def test_wrong_types_are_validation_errors() -> None:
    with pytest.raises(msgspec.ValidationError):
        wire.decode_args(b'{"Pod": {}, "NodeNames": "a"}')
    with pytest.raises(msgspec.DecodeError):
        wire.decode_binding(b"{")


def test_explain_is_bounded_lru() -> None:
    log = ExplainLog(max_pods=2, max_bytes=10_000)
    body = wire.encode(wire.FilterResultNames(["a"], {"b": "full"}, {}))
    log.record("ns/p1", "filter", 10.0, body, None)
    log.record("ns/p2", "filter", 11.0, body, None)
    log.record("ns/p1", "prioritize", 12.0, wire.encode([wire.HostPriority("a", 7)]), None)
    log.record("ns/p3", "filter", 13.0, body, "owned by a DaemonSet")
    assert log.explain("ns/p2", 20.0) is None  # least recently decided
    p1 = log.explain("ns/p1", 20.0)
    assert p1 is not None
    assert p1["filter"] == {
        "at": 10.0,
        "age_seconds": 10.0,
        "exempt": None,
        "passed": ["a"],
        "failed": {"b": "full"},
        "unresolvable": {},
    }
    assert p1["prioritize"]["scores"] == {"a": 7}
    assert log.explain("ns/p3", 20.0)["filter"]["exempt"] == "owned by a DaemonSet"  # type: ignore[index]
    # The byte bound drops the oldest pods too, and never stores one oversize entry.
    log.record("ns/big", "filter", 14.0, b"x" * 10_001, None)
    assert log.explain("ns/big", 20.0) is None
    one = POD_BYTES + len("ns/0") + ENTRY_BYTES + len(body)
    tight = ExplainLog(max_pods=100, max_bytes=2 * one)
    for i in range(5):
        tight.record(f"ns/{i}", "filter", 1.0, body, None)
    assert len(tight) == 2 and tight.size_bytes == 2 * one
    # The pod's key counts too: long names leave room for fewer pods.
    tight.record("ns/" + "p" * 2 * one, "filter", 2.0, body, None)
    assert tight.explain("ns/" + "p" * 2 * one, 3.0) is None and len(tight) == 2
    tight.record("ns/" + "p" * (one // 2), "filter", 2.0, body, None)
    assert len(tight) == 1 and tight.size_bytes <= tight.max_bytes


def test_a_deferred_entry_is_encoded_only_when_asked_and_counts_its_reckoned_size() -> None:
    log = ExplainLog(max_pods=10, max_bytes=10_000)
    rendered: list[int] = []

    def render() -> bytes:
        rendered.append(1)
        return b'{"class": "ns/Job/x", "nodes": {"a": {"fits": 2}}}'

    log.record_deferred("ns/p", "class", 5.0, render, 300)
    assert rendered == [] and log.size_bytes == POD_BYTES + len("ns/p") + ENTRY_BYTES + 300
    explained = log.explain("ns/p", 6.0)
    assert explained is not None and explained["class"]["nodes"] == {"a": {"fits": 2}}
    assert rendered == [1]
    # Its reckoned size counts against the bound like a body's bytes: too big, not kept.
    log.record_deferred("ns/q", "class", 5.0, render, 10_000)
    assert log.explain("ns/q", 6.0) is None and rendered == [1]


def test_pod_list_and_watch_events_from_the_api() -> None:
    listed = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "1234"},
        "items": [
            {**POD, "spec": {**POD["spec"], "nodeName": "n7"}},
            {
                "metadata": {
                    "name": "ds-x",
                    "namespace": "mon",
                    "uid": "u2",
                    "ownerReferences": [{"kind": "DaemonSet", "name": "ds", "controller": True}],
                },
                "spec": {"nodeName": "n8", "priorityClassName": "system-node-critical"},
                "status": {"phase": "Pending"},
            },
        ],
    }
    pods, version = parse_pod_list(json.dumps(listed).encode())
    assert version == "1234"
    assert [(p.facts.key, p.node, p.phase) for p in pods] == [
        ("shop/web-7d4b9c8f6d-x2kqp", "n7", "Pending"),
        ("mon/ds-x", "n8", "Pending"),
    ]
    assert pods[1].facts.owner_kinds == ("DaemonSet",)
    assert pods[1].facts.priority_class == "system-node-critical"

    running = {**POD, "spec": {**POD["spec"], "nodeName": "n7"}, "status": {"phase": "Running"}}
    # Leaving the field selector arrives as DELETED carrying the new state.
    running["metadata"] = {**running["metadata"], "resourceVersion": "812"}

    def line(event: dict[str, object]) -> bytes:
        return json.dumps(event).encode()

    kind, version, event = parse_watch_line(line({"type": "DELETED", "object": running}))
    assert (kind, version) == ("DELETED", "812")
    assert event is not None and event.deleted and event.phase == "Running" and event.node == "n7"
    assert event.facts.name == POD["metadata"]["name"]
    _, _, modified = parse_watch_line(line({"type": "MODIFIED", "object": running}))
    assert modified is not None and not modified.deleted
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    assert parse_watch_line(line(bookmark)) == ("BOOKMARK", "9", None)
    # an ERROR event carries a Status, whose "status" is no pod status: told by its type
    gone = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
    assert parse_watch_line(line({"type": "ERROR", "object": gone})) == ("ERROR", "", None)


def test_api_errors_carry_the_servers_message() -> None:
    class FakeApiException(Exception):  # the shape of kubernetes.client.ApiException
        status = 409
        reason = "Conflict"
        body = json.dumps(
            {
                "kind": "Status",
                "message": 'pods "p" is already assigned to node "n1"',
                "reason": "Conflict",
                "code": 409,
            }
        )

    assert api_error_message(FakeApiException()) == (
        '409 Conflict: pods "p" is already assigned to node "n1"'
    )

    class Plain(Exception):
        status = 500
        reason = "Internal Server Error"
        body = "not json"

    assert api_error_message(Plain()) == "500 Internal Server Error"
