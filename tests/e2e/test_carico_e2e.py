"""The Carico extender behind the real kube-scheduler, binding through the real API.

Design: docs/architecture.md#testing.

Capacity comes from the session's real node agents (``carico agent``, one per node: e2e_agents.py),
which sample a fake procfs and read a fake cgroup tree written from the pods the fake kubelet runs
(fake_procfs.py), and count their node's pods, with their classes, through the real API watch.
The extender decides per workload class (docs/architecture.md#decisions): a node passes when at
least one pod of the incoming pod's class fits its headroom after its reservations, a pod counting
when more than half of it fits (so a node with room for R pods of a measured class admits
round(R) of them), and a class nobody has measured is probed two pods per node at a time.
A test shapes a node's room with background memory load that is not a pod
(``FakeProcfs.leave_room``, ``FakeProcfs.fill``); the agents' pipeline turns that into headroom,
and the tests read the room the extender holds before they act. Rooms are whole numbers of pods,
half a pod from where the rounding turns. Where a test needs the class measured, an *anchor* pod of
the same class runs on a node throughout (the agents report the classes they learned, and the
extender's fleet view is made of those). No test here uses the scripted
CapacityFeed. Pods that must stay bound-but-Pending carry a long ``carico.io/sim-startup-seconds``,
so reservations are held until the test releases them (and the agents, which count Running pods,
do not see them). Every wait is a liveness bound, far above the expected time; no assertion is
about timing.
"""

from __future__ import annotations

import collections
import math
import time
import urllib.error
from typing import Any

import kubernetes
import pytest
from e2e_agents import (
    BARE_CLASS,
    CLASS_REL_TOL,
    LEARNED_REL_TOL,
    ROOM_TOL,
    AgentFedFactory,
    NodeAgents,
    room_of,
)
from e2e_controlplane import wait_for
from e2e_extender import ExtenderProcess
from fake_kubelet import STARTUP_SECONDS_ANNOTATION, FakeKubelet

from carico_app.schedconfig import CARICO_PROFILE
from scheduler_ext.waiting import WAKE_ANNOTATION

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

N0, N1, N2 = (f"e2e-node-{i}" for i in range(3))  # conftest.FAKE_NODES
HOLD = {STARTUP_SECONDS_ANNOTATION: "3600"}  # bound pods stay Pending until start_now
ANCHOR_LABEL = "e2e.carico.io/anchor"
LIVENESS_S = 90.0
# How close the extender's (legacy) avail must come to the model's: below CPU saturation the fake
# procfs is exact, so what is left is counter rounding and the frozen model's drift (measured:
# < 0.002 pods). On top of it: warm-up accepts a learnt per-pod cost within LEARNED_REL_TOL of the
# model's, and avail scales with its inverse, so the agents' avail may sit that fraction off the
# model's (seen: p-hat 1.9805 for 2.0). The room (ROOM_TOL) does not depend on a learnt cost: it is
# the headroom, full level minus telemetry, over the model pod's need.
AVAIL_TOL = 0.05
# Above CPU saturation a PSI total is up to one write (20 ms) old in a 100 ms sample, smoothed by
# the EMA: a few hundredths of a pod, bounded well inside this (for avail and room alike).
SATURATED_AVAIL_TOL = 0.3


def _wait_avail(ext: ExtenderProcess, want: dict[str, float], tol: float = AVAIL_TOL) -> None:
    """Until the extender holds fresh, live reports with ``want``'s (legacy) avail per node: the
    agents still report it, for extenders and nodes without per-class data."""

    def close() -> bool:
        rows = ext.nodes()
        return all(
            n in rows
            and rows[n].get("reported")
            and not rows[n]["stale"]
            and rows[n]["mode"] == "live"
            and abs(rows[n]["avail"] - a) <= tol + LEARNED_REL_TOL * a
            for n, a in want.items()
        )

    try:
        wait_for(close, LIVENESS_S, f"the agents' avail {want} at the extender")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {ext.nodes()}") from None


def _room_at(row: dict[str, Any], node_agents: NodeAgents, node: str) -> float | None:
    """The room for one of the model's pods in the headroom the extender holds for ``node``."""
    classes = row.get("classes")
    if not classes:
        return None
    return room_of(classes["headroom"], node_agents.procfs.node_model(node))


def _wait_room(
    ext: ExtenderProcess, node_agents: NodeAgents, want: dict[str, float], tol: float = ROOM_TOL
) -> None:
    """Until the extender holds fresh, live reports with ``want``'s room per node."""

    def close() -> bool:
        rows = ext.nodes()
        for n, r in want.items():
            row = rows.get(n)
            if not (row and row.get("reported") and not row["stale"] and row["mode"] == "live"):
                return False
            room = _room_at(row, node_agents, n)
            if room is None or abs(room - r) > tol:
                return False
        return True

    try:
        wait_for(close, LIVENESS_S, f"the agents' room {want} at the extender")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {ext.nodes()}") from None


def _room(
    node_agents: NodeAgents, pods: dict[str, int] | None = None, **room: float
) -> dict[str, float]:
    """Leave each node (``e2e_node_0=2.0``) that much room with ``pods`` (node -> count) running
    there; returns the room the agents must report (the model's, node name -> pods)."""
    want = {}
    for key, r in room.items():
        node = key.replace("_", "-")
        n = (pods or {}).get(node, 0)
        node_agents.procfs.leave_room(node, r, n)
        want[node] = node_agents.expected_room(node, n)
    return want


def _fill(node_agents: NodeAgents, *nodes: str) -> dict[str, float]:
    """Fill the nodes' memory: no room (returns that want)."""
    for node in nodes:
        node_agents.procfs.fill(node)
    return dict.fromkeys(nodes, 0.0)


def _anchor(core: kubernetes.client.CoreV1Api, ns: str, node: str, ext: ExtenderProcess) -> None:
    """Run a pod of the bare pods' class on ``node`` (bound directly) and wait until the node's
    agent reports it, measured: the class is then known fleet-wide, not probed."""
    pod = _pod("anchor", scheduler="default-scheduler")
    pod["metadata"]["labels"] = {ANCHOR_LABEL: "true"}
    pod["spec"]["nodeName"] = node
    core.create_namespaced_pod(ns, pod)

    def measured() -> bool:
        classes = (ext.nodes().get(node, {}).get("classes") or {}).get("classes") or []
        return any(
            c["class"] == BARE_CLASS and c["source"] == "learned" and c["pods"] == 1
            for c in classes
        )

    try:
        wait_for(measured, LIVENESS_S, f"the anchor pod measured on {node}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {ext.nodes().get(node)}") from None


def _touch_nodes(core: kubernetes.client.CoreV1Api) -> None:
    """Update every node (a label), which moves unschedulable pods back to the active queue."""
    stamp = str(time.monotonic_ns())
    for n in (N0, N1, N2):
        core.patch_node(n, {"metadata": {"labels": {"e2e.carico.io/requeue": stamp}}})


def _allowed(room: float) -> int:
    """Pods of a measured class the filter admits on a node with ``room`` (the default threshold
    of one pod): reserved r passes while round(room − r) ≥ 1, i.e. room − r ≥ 0.5."""
    return max(math.floor(room + 0.5), 0)


def _pod(name: str, annotations: dict[str, str] | None = None, scheduler: str = CARICO_PROFILE):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "registry.invalid/x:1"}],
        },
    }


def _pods(core: kubernetes.client.CoreV1Api, ns: str) -> list[Any]:
    """The test's pods (not the anchor)."""
    return list(core.list_namespaced_pod(ns, label_selector=f"!{ANCHOR_LABEL}").items)


def _unschedulable(pod: Any) -> bool:
    return any(
        c.type == "PodScheduled" and c.status == "False"
        for c in (pod.status.conditions or [])
        if pod.status
    )


def _placement(core: kubernetes.client.CoreV1Api, ns: str) -> collections.Counter[str]:
    return collections.Counter(p.spec.node_name for p in _pods(core, ns) if p.spec.node_name)


def _all_decided(core: kubernetes.client.CoreV1Api, ns: str, count: int) -> bool:
    pods = _pods(core, ns)
    return len(pods) == count and all(p.spec.node_name or _unschedulable(p) for p in pods)


def test_burst_respects_room_minus_reserved(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
) -> None:
    ext = carico_agents()
    core = kubernetes.client.CoreV1Api(api_client)
    # N1 full (it runs the anchor, which keeps the class measured), N0 and N2 with room for 4
    # and 2 pods.
    want = {**_fill(node_agents, N1), **_room(node_agents, e2e_node_0=4.0, e2e_node_2=2.0)}
    _anchor(core, namespace, N1, ext)
    _wait_room(ext, node_agents, want)
    at_start = {n: _room_at(row, node_agents, n) or 0.0 for n, row in ext.nodes().items()}
    allowed = {n: _allowed(at_start[n]) for n in (N0, N1, N2)}
    assert allowed == {N0: 4, N1: 0, N2: 2}, at_start
    burst = sum(allowed.values()) + 4  # 4 more than fit
    for i in range(burst):
        core.create_namespaced_pod(namespace, _pod(f"burst-{i}", HOLD))
    wait_for(lambda: _all_decided(core, namespace, burst), LIVENESS_S, "every pod bound/refused")
    # The real bindings, against the room the extender held when the burst started.
    placement = _placement(core, namespace)
    assert {n: placement.get(n, 0) for n in allowed} == allowed, (placement, at_start)
    # The refused pods keep being retried; none may land later either.
    nodes = ext.nodes()
    assert {n: nodes[n]["reserved"] for n in allowed} == allowed
    pending = [p for p in _pods(core, namespace) if not p.spec.node_name]
    assert len(pending) == 4 and all(_unschedulable(p) for p in pending)
    assert _placement(core, namespace) == placement
    # Each was refused for the room of its class: the reason names it and its measured cost
    # (learned on the node, or the fleet's: never a prior).
    explain = ext.get(f"/api/v1/explain?pod={namespace}/{pending[0].metadata.name}")
    costs = explain["class"]["nodes"]
    assert explain["class"]["class"] == BARE_CLASS, explain
    assert {c["source"] for c in costs.values()} <= {"learned", "fleet"}, explain
    assert all(BARE_CLASS in why for why in explain["filter"]["failed"].values()), explain


def test_a_turned_away_pod_is_woken_when_room_appears(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
) -> None:
    """Room that appears on a node by itself (its use falls, no pod or node changes) is no
    event kube-scheduler hears of: the pod it turned away would wait out the five-minute flush
    of its unschedulable queue. The extender annotates it instead, and it is bound at once
    (docs/architecture.md#waking-turned-away-pods)."""
    ext = carico_agents()
    core = kubernetes.client.CoreV1Api(api_client)
    want = _fill(node_agents, N0, N1, N2)
    _anchor(core, namespace, N1, ext)  # the class measured: refused on room, not probed
    _wait_room(ext, node_agents, want)
    core.create_namespaced_pod(namespace, _pod("waiting", HOLD))
    wait_for(
        lambda: _unschedulable(core.read_namespaced_pod("waiting", namespace)),
        LIVENESS_S,
        "the pod turned away",
    )
    _wait_room(ext, node_agents, _room(node_agents, e2e_node_0=2.0))
    # LIVENESS_S (90 s) is well inside kube-scheduler's five minutes: without the wake the pod
    # is still waiting when this gives up.
    wait_for(
        lambda: core.read_namespaced_pod("waiting", namespace).spec.node_name == N0,
        LIVENESS_S,
        "the pod bound once N0 had room",
    )
    annotations = core.read_namespaced_pod("waiting", namespace).metadata.annotations or {}
    assert WAKE_ANNOTATION in annotations, annotations


def test_reservations_released_when_pods_run(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    namespace: str,
) -> None:
    ext = carico_agents()
    _wait_room(ext, node_agents, {n: node_agents.expected_room(n) for n in (N0, N1, N2)})
    core = kubernetes.client.CoreV1Api(api_client)
    for i in range(3):
        core.create_namespaced_pod(namespace, _pod(f"run-{i}", HOLD))
    wait_for(lambda: sum(_placement(core, namespace).values()) == 3, LIVENESS_S, "3 pods bound")
    # No pod of this class runs anywhere (the agents learned it, but report only the classes
    # running on their node): the class is probed, one pod per node until one is measured.
    assert _placement(core, namespace) == {N0: 1, N1: 1, N2: 1}
    assert sum(row["reserved"] for row in ext.nodes().values()) == 3
    # The kubelet's own watch may see a bind after the API shows it: start what it has seen.
    wait_for(lambda: fake_kubelet.starting(namespace) == 3, LIVENESS_S, "the kubelet seeing 3")
    assert fake_kubelet.start_now(namespace) == 3
    wait_for(
        lambda: all(p.status.phase == "Running" for p in _pods(core, namespace)),
        LIVENESS_S,
        "pods Running",
    )
    wait_for(
        lambda: all(row["reserved"] == 0 for row in ext.nodes().values()),
        LIVENESS_S,
        "reservations released at /api/v1/nodes",
    )
    assert ext.get("/api/v1/reservations") == []
    # Each ended when its node's agent reported the pod among those it counts, not by the
    # hand-over timeout (docs/architecture.md#reservations).
    ended = {
        e: ext.metric(f'carico_extender_reservations_total{{event="{e}"}}')
        for e in ("counted", "released", "uncounted", "expired", "undone")
    }
    assert ended["counted"] == 3, ended
    # The running pods now load their nodes: the agents count them through their pod watch, and
    # their room and their avail fall by exactly the pods that run there (one pod costs what it
    # costs on an idle node: the model is linear below CPU saturation).
    placed = _placement(core, namespace)
    _wait_room(
        ext, node_agents, {n: node_agents.expected_room(n, placed.get(n, 0)) for n in placed}
    )
    want = {n: node_agents.expected_avail(n, placed.get(n, 0)) for n in (N0, N1, N2)}
    _wait_avail(ext, want)
    rows = ext.nodes()
    assert {n: rows[n]["pods"] for n in want} == {n: placed.get(n, 0) for n in want}
    # Each agent reports the running pod's class with the footprint it measured from the pod's
    # cgroup: the model's 2 cores and 0.5 GiB.
    model = node_agents.procfs.model
    for n in want:
        (reported,) = rows[n]["classes"]["classes"]
        assert (reported["class"], reported["source"], reported["pods"]) == (
            BARE_CLASS,
            "learned",
            1,
        )
        assert reported["cpu_cores"] == pytest.approx(model.pod_cpu_rate(1), rel=CLASS_REL_TOL)
        assert reported["memory_bytes"] == model.pod_memory
    # Each agent merged the aggregator's global model into its own for these reports.
    assert all(rows[n]["health"]["global_model"] for n in want), rows


def test_restart_rebuilds_the_ledger_from_the_api(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
) -> None:
    # fail-closed: right after the restart no report has arrived yet, and the nodes must not be
    # passed blind meanwhile (fail-open would, by design).
    ext = carico_agents("--stale-policy", "fail-closed")
    core = kubernetes.client.CoreV1Api(api_client)
    # The anchor on N0 keeps the class measured; with it, N0 has room for 2 more.
    want = _room(node_agents, {N0: 1}, e2e_node_0=2.0, e2e_node_1=1.0, e2e_node_2=1.0)
    _anchor(core, namespace, N0, ext)
    _wait_room(ext, node_agents, want)
    rows = ext.nodes()
    allowed = {n: _allowed(_room_at(rows[n], node_agents, n) or 0.0) for n in (N0, N1, N2)}
    assert allowed == {N0: 2, N1: 1, N2: 1}
    for i in range(3):
        core.create_namespaced_pod(namespace, _pod(f"first-{i}", HOLD))
    wait_for(lambda: sum(_placement(core, namespace).values()) == 3, LIVENESS_S, "3 pods bound")
    before = _placement(core, namespace)
    ext.kill()  # SIGKILL: the in-memory ledger is gone
    # Pods created while the extender is down stay pending (ignorable: false) and are in flight
    # when it comes back.
    second = [f"second-{i}" for i in range(4)]
    for name in second:
        core.create_namespaced_pod(namespace, _pod(name, HOLD))
    ext.start()
    # Ready means rebuilt from the API: the 3 bound Pending pods are reserved again, where they are.
    # The restarted extender may already have bound the one more pod that fits (a report can
    # arrive, and a waiting pod be retried, before the ledger is read): its reservation is made
    # before its binding is posted, so it shows in the placement read just after, if not before.
    rebuilt = collections.Counter(
        {name: row["reserved"] for name, row in ext.nodes().items() if row["reserved"]}
    )
    bound_after = _placement(core, namespace)
    assert before <= rebuilt <= bound_after, (before, rebuilt, bound_after)
    assert rebuilt.total() - before.total() <= 1, rebuilt  # 4 free places, 3 taken before
    # The agents reconnect to the restarted extender and report the same room. The rebuilt
    # reservations carry no class cost (no report had come when they were rebuilt): each is
    # charged the fleet's typical pod, which is this class's (the anchor's) footprint.
    _wait_room(ext, node_agents, want)
    # Pods the restarted extender refused before the agents' reports arrived sit in kube-scheduler's
    # unschedulable queue; the extender coming back is no cluster event, a Node update is one.
    _touch_nodes(core)
    # Total free places were 2 + 1 + 1 = 4 and 3 were taken before the restart: one more fits.
    wait_for(lambda: sum(_placement(core, namespace).values()) == 4, LIVENESS_S, "a 4th pod bound")

    def decided_by_new_extender(name: str) -> bool:
        try:
            return bool(ext.get(f"/api/v1/explain?pod={namespace}/{name}"))
        except urllib.error.HTTPError:
            return False  # 404: the restarted extender has not seen this pod yet

    # Every still-pending pod has been filtered by the restarted extender (and refused).
    wait_for(
        lambda: all(
            decided_by_new_extender(p.metadata.name)
            for p in _pods(core, namespace)
            if not p.spec.node_name
        ),
        LIVENESS_S,
        "the pending pods retried through the restarted extender",
    )
    after = _placement(core, namespace)
    assert sum(after.values()) == 4
    assert all(after[n] <= allowed[n] for n in allowed), (after, allowed)
    rows = ext.nodes()
    assert all(rows[n]["reserved"] == after[n] for n in (N0, N1, N2)), rows


@pytest.mark.parametrize("ignorable", [True, False])
def test_extender_down(
    carico_agents: AgentFedFactory,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    ignorable: bool,
) -> None:
    ext = carico_agents(ignorable=ignorable)
    ext.stop()
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, _pod("orphan"))
    if ignorable:
        # kube-scheduler skips an ignorable extender that does not answer and binds by itself.
        wait_for(
            lambda: bool(core.read_namespaced_pod("orphan", namespace).spec.node_name),
            LIVENESS_S,
            "the pod bound without the extender",
        )
        return

    def error_event() -> bool:
        events = core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=orphan"
        ).items
        return any(
            e.reason == "FailedScheduling" and "scheduler" in (e.message or "") for e in events
        )

    wait_for(error_event, LIVENESS_S, "a FailedScheduling event naming the extender error")
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=orphan")
    messages = [e.message for e in events.items if e.reason == "FailedScheduling"]
    # The extender's URL is in kube-scheduler's error: connection refused to the extender.
    assert any(str(ext.port) in m for m in messages), messages
    assert not core.read_namespaced_pod("orphan", namespace).spec.node_name


@pytest.mark.parametrize("policy", ["fail-open", "fail-closed"])
def test_silent_node_follows_the_stale_policy(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    policy: str,
) -> None:
    # Stale after 5 s: agents report every second, a 5x margin for a loaded machine.
    ext = carico_agents("--stale-after", "5", "--stale-policy", policy)
    # Every reporting node is full; N2 has room but its agent is about to go silent.
    _wait_room(ext, node_agents, _fill(node_agents, N0, N1))
    _wait_room(ext, node_agents, {N2: node_agents.expected_room(N2)})
    # SIGSTOP: the agent process hangs (the carico_agents fixture resumes it afterwards).
    node_agents[N2].pause()
    wait_for(lambda: ext.nodes().get(N2, {}).get("stale", False), LIVENESS_S, f"{N2} stale")
    assert not ext.nodes()[N0]["stale"] and not ext.nodes()[N1]["stale"]
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, _pod("stale-0", HOLD))
    if policy == "fail-open":
        wait_for(
            lambda: bool(core.read_namespaced_pod("stale-0", namespace).spec.node_name),
            LIVENESS_S,
            "the pod bound on the stale node",
        )
        assert core.read_namespaced_pod("stale-0", namespace).spec.node_name == N2
        return
    wait_for(
        lambda: _unschedulable(core.read_namespaced_pod("stale-0", namespace)),
        LIVENESS_S,
        "the pod refused everywhere",
    )
    explain = ext.get(f"/api/v1/explain?pod={namespace}/stale-0")
    assert "stale" in str(explain) or "no capacity report" in str(explain), explain
    assert not core.read_namespaced_pod("stale-0", namespace).spec.node_name
    # The agent resumes where it stopped: its reports make the node fresh again.
    node_agents[N2].resume()
    _wait_room(ext, node_agents, {N2: node_agents.expected_room(N2)})


@pytest.mark.parametrize("node_cache_capable", [False, True])
def test_both_node_cache_modes(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
    node_cache_capable: bool,
) -> None:
    ext = carico_agents(node_cache_capable=node_cache_capable)
    # Only N1 has room, for one pod.
    _wait_room(
        ext, node_agents, {**_fill(node_agents, N0, N2), **_room(node_agents, e2e_node_1=1.0)}
    )
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, _pod("only", HOLD))
    core.create_namespaced_pod(namespace, _pod("plain", HOLD, scheduler="default-scheduler"))
    wait_for(lambda: _all_decided(core, namespace, 2), LIVENESS_S, "both pods decided")
    assert core.read_namespaced_pod("only", namespace).spec.node_name == N1
    # The default profile's pod passed through the extender untouched (full nodes included) and
    # took no reservation.
    assert core.read_namespaced_pod("plain", namespace).spec.node_name
    assert {n: r["reserved"] for n, r in ext.nodes().items()} == {N0: 0, N1: 1, N2: 0}
    explain = ext.get(f"/api/v1/explain?pod={namespace}/only")
    assert explain, "the extender recorded its filter decision"


def test_deployment_scaled_through_the_controller_manager(
    carico_agents: AgentFedFactory,
    node_agents: NodeAgents,
    api_client: kubernetes.client.ApiClient,
    namespace: str,
) -> None:
    ext = carico_agents()
    _wait_room(ext, node_agents, {n: node_agents.expected_room(n) for n in (N0, N1, N2)})
    apps = kubernetes.client.AppsV1Api(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    labels = {"app": "web"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 6,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulerName": CARICO_PROFILE,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "registry.invalid/x:1"}],
                },
            },
        },
    }
    apps.create_namespaced_deployment(namespace, deployment)

    def running(n: int) -> bool:
        pods = [p for p in _pods(core, namespace) if not p.metadata.deletion_timestamp]
        return len(pods) == n and all(p.status.phase == "Running" for p in pods)

    mismatch = ["nothing polled yet"]

    def counts_match() -> bool:
        # The agents count Running workload pods through their own API watch; the extender shows
        # what they reported. Their room and their avail follow the load the fake procfs derives
        # from the same pods (exact below CPU saturation, i.e. up to 3 pods on these nodes).
        placed = _placement(core, namespace)
        rows = ext.nodes()
        for n in (N0, N1, N2):
            pods = placed.get(n, 0)
            model = node_agents.procfs.node_model(n)
            saturated = model.base_threads + model.pod_threads * pods > model.cores
            tol = SATURATED_AVAIL_TOL if saturated else AVAIL_TOL
            want = node_agents.expected_avail(n, pods)
            want_room = node_agents.expected_room(n, pods)
            mismatch[0] = (
                f"{n}: {pods} pods placed, avail {want:.3f} and room {want_room:.3f} expected,"
                f" extender has {rows[n]}"
            )
            if rows[n].get("pods") != pods or rows[n].get("mode") != "live":
                return False
            if abs(rows[n]["avail"] - want) > tol + LEARNED_REL_TOL * want:
                return False
            room = _room_at(rows[n], node_agents, n)
            if room is None or abs(room - want_room) > tol:
                return False
            # The Deployment's pods run as one class, measured where they run.
            classes = {c["class"]: c for c in rows[n]["classes"]["classes"]}
            web = classes.get(f"{namespace}/Deployment/web")
            if pods and (web is None or web["pods"] != pods or web["source"] != "learned"):
                return False
        return True

    try:
        wait_for(lambda: running(6), LIVENESS_S, "6 replicas Running")
        wait_for(
            counts_match,
            LIVENESS_S,
            "the agents' pod counts and avail = pods per node",
            detail=lambda: mismatch[0],
        )
        # A deleted pod is replaced by the ReplicaSet controller, through the extender again.
        victim = _pods(core, namespace)[0].metadata.name
        core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
        wait_for(
            lambda: running(6) and victim not in {p.metadata.name for p in _pods(core, namespace)},
            LIVENESS_S,
            "the replacement Running",
        )
        replacement = [p.metadata.name for p in _pods(core, namespace)]
        for name in replacement:
            assert ext.get(f"/api/v1/explain?pod={namespace}/{name}"), name
        apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 2}})
        wait_for(lambda: running(2), LIVENESS_S, "scaled down to 2")
        wait_for(
            counts_match,
            LIVENESS_S,
            "the agents' pod counts follow the scale-down",
            detail=lambda: mismatch[0],
        )
        assert sum(_placement(core, namespace).values()) == 2
    finally:
        apps.delete_namespaced_deployment("web", namespace, propagation_policy="Foreground")
        wait_for(lambda: not apps.list_namespaced_deployment(namespace).items, LIVENESS_S, "gone")
