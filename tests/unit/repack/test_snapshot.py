"""Quantities, request summing and the movability rules of the snapshot parser."""

from __future__ import annotations

import pytest
from repack_builders import kube_list, node_obj, pod_obj

from repack.problem.snapshot import (
    SnapshotError,
    parse_list,
    parse_resource_quantity,
    pod_requests,
)


@pytest.mark.parametrize(
    ("resource", "text", "want"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", "0.1", 100),
        ("cpu", "1e3m", 1000),
        ("memory", "1Gi", 2**30),
        ("memory", "1G", 10**9),
        ("memory", "1e3", 1000),
        ("memory", "128Ki", 128 * 1024),
        ("memory", "5M", 5 * 10**6),
        ("memory", "1.5Ki", 1536),
        ("nvidia.com/gpu", "2", 2),
        ("cpu", "1.0005", 1001),  # rounded up to the next millicore, as the API does
    ],
)
def test_quantities(resource: str, text: str, want: int) -> None:
    assert parse_resource_quantity(resource, text) == want


@pytest.mark.parametrize("bad", ["abc", "1Qi", "-1", "", None, True])
def test_bad_quantities_are_rejected(bad: object) -> None:
    with pytest.raises(SnapshotError):
        parse_resource_quantity("memory", bad)


def test_requests_sum_containers_and_take_init_max_plus_overhead() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}},
            {"resources": {"requests": {"cpu": "200m", "example.com/fpga": "1"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "500m", "memory": "50Mi"}}},
            {"resources": {"requests": {"cpu": "100m", "memory": "300Mi"}}},
        ],
        "overhead": {"cpu": "10m", "memory": "1Mi"},
    }
    req = pod_requests(spec)
    # cpu: max(100+200, 500) + 10; memory: max(100, 300) Mi + 1 Mi
    assert req == {"cpu": 510, "memory": 301 * 2**20, "example.com/fpga": 1, "pods": 1}


def test_sidecar_init_containers_count_like_containers() -> None:
    spec = {
        "initContainers": [
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"resources": {"requests": {"cpu": "300m"}}},
        ],
        "containers": [{"resources": {"requests": {"cpu": "200m"}}}],
    }
    # running: 200 + sidecar 100 = 300; init peak: 300 + sidecar 100 = 400
    assert pod_requests(spec)["cpu"] == 400


def test_pod_without_requests_still_counts_one_pod() -> None:
    assert pod_requests({"containers": [{"name": "c"}]}) == {"pods": 1}


def test_movability_rules() -> None:
    doc = kube_list(
        node_obj("n1"),
        pod_obj("rs", "100m", "1M", node="n1"),
        pod_obj("ds", "100m", "1M", node="n1", owner=("DaemonSet", "d")),
        pod_obj("bare", "100m", "1M", node="n1", owner=None),
        pod_obj(
            "mirror", "100m", "1M", node="n1", annotations={"kubernetes.io/config.mirror": "x"}
        ),
        pod_obj("pinned", "100m", "1M", node="n1", annotations={"carico.io/do-not-move": "true"}),
        pod_obj("sys", "100m", "1M", node="n1", namespace="kube-system"),
        pod_obj("guarded", "100m", "1M", node="n1", labels={"app": "db"}),
        pod_obj("budget", "100m", "1M", node="n1", labels={"app": "web"}),
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 0},
        },
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "selector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]
                }
            },
            "status": {"disruptionsAllowed": 1},
        },
        {"kind": "Pod", "metadata": {"name": "done"}, "spec": {}, "status": {"phase": "Succeeded"}},
    )
    snap = parse_list(doc)
    reasons = {p.name: p.immovable for p in snap.pods}
    assert reasons == {
        "rs": "",
        "ds": "daemonset",
        "bare": "bare",
        "mirror": "mirror",
        "pinned": "do-not-move",
        "sys": "excluded-namespace",
        "guarded": "pdb",
        "budget": "",
    }
    assert {p.name: p.pdbs for p in snap.pods}["budget"] == ("default/web",)


@pytest.mark.parametrize(
    "doc",
    [
        {"kind": "List"},
        {"items": [{"kind": "Node", "metadata": {}}]},
        {"items": ["x"]},
        kube_list(pod_obj("p", "1x", "1M")),
    ],
)
def test_malformed_input_is_a_clear_error(doc: dict[str, object]) -> None:
    with pytest.raises(SnapshotError):
        parse_list(doc)
