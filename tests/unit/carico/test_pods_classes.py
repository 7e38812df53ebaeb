"""The workload class every part computes the same way, and pod requests as kube-scheduler sums
them (carico.pods)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from carico.pods import (
    MAX_CACHED_QUANTITY,
    MAX_CLASS_NAME,
    ContainerResources,
    Requests,
    class_of_pod,
    parse_quantity,
    pod_requests,
    workload_class,
)
from carico.pods import _parse_text as _parse_text  # the cache, to check what it keeps
from scheduler_ext import wire
from scheduler_ext.pods import facts_from_wire

POD = json.loads((Path(__file__).parents[2] / "integration/extender/payloads/pod.json").read_text())


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", "0.1"),
        ("2", "2"),
        ("1.5Gi", str(Decimal("1.5") * 2**30)),
        ("64Mi", str(64 * 2**20)),
        ("1k", "1000"),
        ("5e2", "500"),
        ("12n", "1.2E-8"),
    ],
)
def test_quantities_parse_in_base_units(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("bad", ["", "1 Gi", "abc", "-1", "1.2.3", "1Xi", None, True, [1]])
def test_bad_quantities_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_repeated_quantities_parse_alike_and_long_ones_are_not_remembered() -> None:
    # Parsed quantities are remembered (they repeat on every pod of a workload), but only short
    # texts: a request full of long valid quantities must not grow the extender's memory.
    assert parse_quantity("250m") == parse_quantity("250m") == Decimal("0.25")
    assert parse_quantity(0.25) == Decimal("0.25") and parse_quantity(3) == Decimal(3)
    remembered = _parse_text.cache_info().currsize
    long_text = "1" + "0" * (MAX_CACHED_QUANTITY + 10)
    assert parse_quantity(long_text) == Decimal(long_text)
    assert _parse_text.cache_info().currsize == remembered
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity("1" * (MAX_CACHED_QUANTITY + 1) + "x")


def test_requests_sum_containers_and_take_the_largest_init_container() -> None:
    app = ContainerResources({"cpu": "500m", "memory": "1Gi"})
    side = ContainerResources({"cpu": "100m", "memory": "64Mi"}, sidecar=True)
    big_init = ContainerResources({"cpu": "2", "memory": "128Mi"})
    r = pod_requests([app, app], [side, big_init])
    # cpu: max(2·0.5 + 0.1, 2 + 0.1 with the sidecar running) = 2.1; memory: 2 Gi + 64 Mi
    assert r == Requests(pytest.approx(2.1), float(2 * 2**30 + 64 * 2**20))
    assert pod_requests([app], overhead={"cpu": "250m"}).cpu == pytest.approx(0.75)


def test_pods_of_one_controller_share_a_class_across_replicasets() -> None:
    a = workload_class("web", ("ReplicaSet", "shop-5d8f9"), {"pod-template-hash": "5d8f9"}, [])
    b = workload_class("web", ("ReplicaSet", "shop-77aa1"), {"pod-template-hash": "77aa1"}, [])
    assert a == b == "web/Deployment/shop"
    # a ReplicaSet whose name does not end with the hash is classed as itself
    assert workload_class("web", ("ReplicaSet", "rs1"), {"pod-template-hash": "x"}, []) == (
        "web/ReplicaSet/rs1"
    )
    assert workload_class("ml", ("Job", "train"), None, []) != workload_class(
        "other", ("Job", "train"), None, []
    )


def test_bare_pods_are_classed_by_what_they_ask_for_whatever_their_name() -> None:
    small = [ContainerResources({"cpu": "100m"})]
    same = [ContainerResources({"cpu": "0.1"})]  # the same amount written differently
    big = [ContainerResources({"cpu": "2"}, {"memory": "1Gi"})]
    assert workload_class("a", None, None, small) == workload_class("b", None, None, same)
    assert workload_class("a", None, None, small) != workload_class("a", None, None, big)
    assert workload_class("a", None, None, []) == "bare/best-effort"
    many = [ContainerResources({f"x{i}": "1"}, {"cpu": str(i + 1)}) for i in range(200)]
    assert len(workload_class("a", None, None, many)) <= MAX_CLASS_NAME


def test_the_agent_and_the_extender_compute_the_same_class_and_requests() -> None:
    """The agent classes pods from the API's JSON, the extender from its request bytes."""
    agent_side = class_of_pod(POD)
    extender_side = facts_from_wire(msgspec.json.decode(json.dumps(POD).encode(), type=wire.Pod))
    assert agent_side.name == extender_side.workload_class == "shop/Deployment/web"
    assert agent_side.requests == extender_side.requests == Requests(0.1, float(128 * 2**20))


def test_the_extender_refuses_a_pod_with_a_bad_quantity_but_a_watch_does_not() -> None:
    pod = json.loads(json.dumps(POD))
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    decoded = msgspec.json.decode(json.dumps(pod).encode(), type=wire.Pod)
    with pytest.raises(ValueError):
        facts_from_wire(decoded)
    tolerant = facts_from_wire(decoded, strict=False)
    assert tolerant.workload_class == "shop/Deployment/web" and tolerant.requests == Requests()
