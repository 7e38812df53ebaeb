"""The score shape behind the real kube-scheduler, on load the session's real agents measure.

Design: docs/architecture.md#score-shape.

Three nodes: e2e-node-0 busy (background memory leaves room for two of the bare pods), e2e-node-1
running one anchor pod (it keeps the pods' class measured, so nothing is probed), e2e-node-2 idle.
Pods are created one at a time and held Pending (bound, reserved), so each decision sees the
reservations of the ones before. With ``--score-shape 0:0,100:10`` the pods pack onto the busiest
node that still passes the filter; with ``0:10,100:0`` they spread over the emptiest. The
extender's scores differ by at least one point (10 of kube-scheduler's 0..100 after its ×10)
where the in-tree plugins, on the pods' default requests of 100m and 200Mi on 8-core, 32 GiB
nodes, differ by one or two; every wait is a liveness bound, no assertion is about timing.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest
from e2e_agents import AgentFedFactory, NodeAgents
from e2e_controlplane import wait_for
from e2e_extender import ExtenderProcess
from test_carico_e2e import (
    HOLD,
    LIVENESS_S,
    N0,
    N1,
    N2,
    _anchor,
    _placement,
    _pod,
    _room,
    _wait_room,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PODS = 3


def _prepare(
    carico_agents: AgentFedFactory, node_agents: NodeAgents, core: Any, ns: str, shape: str
) -> ExtenderProcess:
    ext = carico_agents("--score-shape", shape)
    want = _room(node_agents, e2e_node_0=2.0)
    _anchor(core, ns, N1, ext)
    want[N1] = node_agents.expected_room(N1, 1)
    want[N2] = node_agents.expected_room(N2, 0)
    _wait_room(ext, node_agents, want)
    return ext


def _place_one_by_one(core: Any, ns: str, ext: ExtenderProcess) -> list[str]:
    """Create the pods in turn, each once the one before is bound; their nodes, in order."""
    nodes: list[str] = []
    for i in range(PODS):
        name = f"shaped-{i}"
        core.create_namespaced_pod(ns, _pod(name, HOLD))

        def bound(name: str = name) -> bool:
            return bool(core.read_namespaced_pod(name, ns).spec.node_name)

        wait_for(bound, LIVENESS_S, f"{name} bound")
        nodes.append(core.read_namespaced_pod(name, ns).spec.node_name)
    return nodes


def _shape_scores(ext: ExtenderProcess, ns: str, pod: str) -> dict[str, Any]:
    why = ext.get(f"/api/v1/explain?pod={ns}/{pod}")
    shape: dict[str, Any] = why["shape"]["nodes"]
    return shape


def test_a_packing_shape_fills_the_busiest_feasible_node_first(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    ext = _prepare(carico_agents, node_agents, core, namespace, "0:0,100:10")
    nodes = _place_one_by_one(core, namespace, ext)
    why = _shape_scores(ext, namespace, "shaped-0")
    # node 0 until its room (two pods) is reserved, then the busier of the others (the anchor's)
    assert nodes == [N0, N0, N1], (nodes, why)
    assert why[N0]["score"] > why[N1]["score"] > why[N2]["score"], why
    assert ext.nodes()[N0]["reserved"] == 2
    assert _placement(core, namespace)[N2] == 0


def test_a_spreading_shape_keeps_off_the_busiest_node(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    ext = _prepare(carico_agents, node_agents, core, namespace, "0:10,100:0")
    nodes = _place_one_by_one(core, namespace, ext)
    why = _shape_scores(ext, namespace, "shaped-0")
    # node 0 scores lowest throughout; the two others trade places as their reservations grow,
    # so neither takes all three
    assert N0 not in nodes, (nodes, why)
    assert {N1, N2} <= set(nodes), (nodes, why)
    assert why[N0]["score"] < min(why[N1]["score"], why[N2]["score"]), why
