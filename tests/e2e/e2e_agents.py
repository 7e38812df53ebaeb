"""Real ``carico agent`` processes, one per simulated node, for the e2e tier.

Each agent is the installed CLI, unchanged: it samples its node's fake procfs tree
(fake_procfs.py) through ``--proc-root``, reads its pods' usage from the node's fake cgroup tree
through ``--cgroup-root``, counts its node's pods (and learns their classes) with the real API
watch (``--kubeconfig`` of the test control plane), runs the production pipeline (Dynamic EMA,
local model, capacity signal, cost/capacity estimator, per-class footprints and headroom) and
streams ``NodeCapacity`` to ``--extender 127.0.0.1:<port>``. That port is fixed for the session:
every test's extender listens on it, and the agents reconnect (backoff at most ``BACKOFF_MAX_S``)
whenever one starts.

Deliberate settings, each an ordinary agent flag:

* ``--half-life 1e6`` (11 days): the local model keeps the expected-workload vector w of the idle
  node it first saw. With the default 30 s w follows the load, so k and avail drift for a minute
  after every change, which no exact assertion survives; with w fixed, k is linear in the pods and
  avail is what :meth:`fake_procfs.PodLoadModel.expected_avail` says. How w follows the load is
  tested at unit and simulator level.
* a real ``carico aggregator`` (:class:`AggregatorProcess`) when one is given: the agents exchange
  their models with it and merge its global model (weight N−1 : 1) into their own. Every node
  starts idle with the same load, so the fleet's frozen models agree and the merge keeps w; the
  fleet prior (median learned cost) is the same number the agents learn.

Agents run like control-plane components (e2e_controlplane.Component): own process group, log
file, SIGTERM then SIGKILL on stop, parent-death signal. :func:`warm_up` teaches every agent its
per-pod cost and the footprint of the bed's bare pods (class ``bare/best-effort``) before the
suite, by stepping real pods through each node.
"""

from __future__ import annotations

import os
import signal
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import kubernetes
from e2e_controlplane import Component, free_ports, wait_for
from e2e_extender import ExtenderProcess
from fake_procfs import FakeProcfs, PodLoadModel
from prometheus_client.parser import text_string_to_metric_families

from carico.pods import class_of_pod

BACKOFF_MAX_S = 1.0
HALF_LIFE_S = 1e6
WARM_STEPS = (1, 2, 3, 2)  # pods per node: two changes with pods on both sides teach the cost
SETTLED_REPORTS = 6  # reports after the churn hold: the estimator's settled window needs >= 5
# The learned cost and the idle avail must match the model this closely: the telemetry is exact
# below CPU saturation, so what remains is counter rounding (1 µs in 0.8 s of CPU time).
LEARNED_REL_TOL = 0.01
# A class's learned CPU footprint must match the model's pod this closely: each reading of a pod's
# CPU counter is up to one write (20 ms) older than the agent's clock says, over 0.5 s between
# readings (4 %), or more while the writer thread waits for a core on a loaded machine; the
# footprint averages readings of every pod. Memory is exact (bytes, read as written).
CLASS_REL_TOL = 0.05
# How close the room the agents' headroom leaves must come to the model's: the headroom is the full
# level minus the smoothed telemetry, exact below CPU saturation up to counter rounding.
ROOM_TOL = 0.05


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class AggregatorProcess:
    """``carico aggregator`` on free loopback ports."""

    def __init__(self, log_dir: Path) -> None:
        self.port, self.ops_port = free_ports(2)
        argv = [
            str(Path(sys.executable).parent / "carico"),
            "aggregator",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--ops-listen",
            f"127.0.0.1:{self.ops_port}",
            "--log-level",
            "info",
        ]
        self.component = Component("aggregator", argv, log_dir)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.component.pid

    def start(self, timeout_s: float = 60.0) -> None:
        self.component.start()

        def healthy() -> bool:
            if not self.component.alive():
                raise AssertionError(f"the aggregator exited:\n{self.component.log_tail()}")
            return _http_ok(f"http://127.0.0.1:{self.ops_port}/healthz")

        wait_for(healthy, timeout_s, "the aggregator's /healthz")

    def stop(self) -> None:
        self.component.stop()


class AgentProcess:
    """``carico agent`` for one node."""

    def __init__(
        self,
        node: str,
        proc_root: Path,
        kubeconfig: Path,
        extender: str,
        metrics_port: int,
        log_dir: Path,
        aggregator: str = "",
        cgroup_root: Path | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        """``extra``: more agent flags (TLS for an extender that requires it)."""
        self.node = node
        self.metrics_port = metrics_port
        argv = [
            str(Path(sys.executable).parent / "carico"),
            "agent",
            "--node-name",
            node,
            "--proc-root",
            str(proc_root),
            "--kubeconfig",
            str(kubeconfig),
            "--extender",
            extender,
            "--half-life",
            str(HALF_LIFE_S),
            "--backoff-max",
            str(BACKOFF_MAX_S),
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(metrics_port),
            "--log-level",
            "info",
        ]
        if aggregator:
            argv += ["--aggregator", aggregator]
        if cgroup_root is not None:
            argv += ["--cgroup-root", str(cgroup_root)]
        argv += extra
        self.component = Component(f"agent-{node}", argv, log_dir)

    @property
    def pid(self) -> int | None:
        return self.component.pid

    def start(self) -> None:
        self.component.start()

    def ready(self) -> bool:
        if not self.component.alive():
            raise AssertionError(f"agent {self.node} exited:\n{self.component.log_tail()}")
        return _http_ok(self._url("/readyz"))

    def _url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.metrics_port}{path}"

    def metrics(self) -> dict[str, float]:
        """The agent's own gauges and counters for its node (``carico_agent_`` stripped; the
        mode as ``mode_live``/``mode_estimate``, a feature's as ``<name>_<feature>``, a class's
        as ``<name>[<class>]``)."""
        with urllib.request.urlopen(self._url("/metrics"), timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.startswith("carico_agent_"):
                    continue
                name = sample.name.removeprefix("carico_agent_").removesuffix("_total")
                if "mode" in sample.labels:
                    name = f"{name}_{sample.labels['mode']}"
                elif "feature" in sample.labels:
                    name = f"{name}_{sample.labels['feature']}"
                elif "class" in sample.labels:
                    name = f"{name}[{sample.labels['class']}]"
                out[name] = sample.value
        return out

    def pause(self) -> None:
        """SIGSTOP: the process is there but says nothing (a hung agent)."""
        assert self.pid is not None
        os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.pid is not None
        os.killpg(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.pid is not None and self.component.alive():
            self.resume()  # a stopped process would sit out the SIGTERM grace period
        self.component.stop()


class NodeAgents:
    """One :class:`AgentProcess` per node, all reporting to ``127.0.0.1:extender_grpc_port`` (and
    exchanging models with ``aggregator`` when given)."""

    def __init__(
        self,
        kubeconfig: Path,
        procfs: FakeProcfs,
        nodes: Sequence[str],
        log_dir: Path,
        extender_grpc_port: int | None = None,
        aggregator: str = "",
        extra: Sequence[str] = (),
    ) -> None:
        self.procfs = procfs
        self.extender_grpc_port = extender_grpc_port or free_ports(1)[0]
        ports = free_ports(len(nodes))
        self.agents = {
            node: AgentProcess(
                node,
                procfs.proc_root(node),
                kubeconfig,
                f"127.0.0.1:{self.extender_grpc_port}",
                port,
                log_dir,
                aggregator,
                cgroup_root=procfs.cgroup_root(node),
                extra=extra,
            )
            for node, port in zip(nodes, ports, strict=True)
        }

    def __getitem__(self, node: str) -> AgentProcess:
        return self.agents[node]

    def start(self, timeout_s: float = 120.0) -> None:
        for agent in self.agents.values():
            agent.start()
        for agent in self.agents.values():
            wait_for(agent.ready, timeout_s, f"agent {agent.node} /readyz")

    def stop(self) -> None:
        for agent in self.agents.values():
            agent.stop()

    def pids(self) -> dict[str, int]:
        return {n: a.pid for n, a in self.agents.items() if a.pid is not None}

    def resume_all(self) -> None:
        for agent in self.agents.values():
            if agent.component.alive():
                agent.resume()

    def metrics(self) -> dict[str, dict[str, float]]:
        return {n: a.metrics() for n, a in self.agents.items()}

    def expected_avail(self, node: str, pods: int = 0) -> float:
        return self.procfs.node_model(node).expected_avail(pods, idle=self.procfs.model)

    def expected_room(self, node: str, pods: int = 0) -> float:
        return self.procfs.node_model(node).expected_room(pods)


def room_of(headroom: dict[str, float], model: PodLoadModel) -> float:
    """The model pod's room in a headroom (per feature): min_j headroom_j / need_j."""
    need = dict(zip(("cpu", "memory"), model.need, strict=True))
    return min(headroom[f] / need[f] for f in need)


def _warm_pod(name: str, node: str) -> dict[str, Any]:
    """A bare pod that asks for nothing, bound to ``node``: of the class the tests' pods have."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,  # bound directly: warm-up needs no scheduler
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.invalid/warm:1"}],
        },
    }


def _settle(agents: NodeAgents, pods: int, timeout_s: float) -> None:
    """Wait until every agent counts ``pods``, its churn hold is over and enough settled reports
    followed for the estimator's window."""
    after_hold: dict[str, float] = {}

    def settled() -> bool:
        for node, agent in agents.agents.items():
            m = agent.metrics()
            if m.get("pods") != pods or m.get("churn_hold") != 0.0:
                after_hold.pop(node, None)
                continue
            after_hold.setdefault(node, m["reports"])
        return all(
            node in after_hold and agents[node].metrics()["reports"] >= start + SETTLED_REPORTS
            for node, start in after_hold.items()
        ) and len(after_hold) == len(agents.agents)

    wait_for(settled, timeout_s, f"agents settled at {pods} pods", interval_s=0.5)


# The workload class of the warm-up pods and of the tests' bare pods (carico.pods.class_of_pod).
BARE_CLASS = class_of_pod(_warm_pod("x", "n")).name


def warm_up(
    api_client: kubernetes.client.ApiClient, agents: NodeAgents, timeout_s: float = 120.0
) -> None:
    """Step real pods through every node (``WARM_STEPS``) until each agent has learned the
    model's per-pod cost and the footprint of their class, then empty the nodes and wait for the
    idle avail and room.

    The estimator learns the cost only across a change of the pod count with settled windows on both
    sides and pods on both sides (docs/architecture.md#cost-and-capacity); its first differenced
    measurement, far from the configured prior, is gated out, the second is taken. The class's
    footprint is learned from the pods' cgroups while they run. Fails with the agents' figures if
    they do not learn.
    """
    core = kubernetes.client.CoreV1Api(api_client)
    ns = f"carico-warmup-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for(
        lambda: bool(
            core.list_namespaced_service_account(ns, field_selector="metadata.name=default").items
        ),
        60,
        f"ServiceAccount {ns}/default",
    )
    model = agents.procfs.model
    expected_cost = model.per_pod_cost
    current = 0
    try:
        for step, target in enumerate(WARM_STEPS):
            for node in agents.agents:
                for i in range(current, target):
                    core.create_namespaced_pod(ns, _warm_pod(f"{node}-{i}", node))
                for i in range(target, current):
                    core.delete_namespaced_pod(f"{node}-{i}", ns, grace_period_seconds=0)
            current = target
            if step < len(WARM_STEPS) - 1:  # the last change only closes the last window
                _settle(agents, target, timeout_s)

        def learned() -> bool:
            return all(
                abs(m["per_pod_cost"] - expected_cost) <= LEARNED_REL_TOL * expected_cost
                and abs(m.get(f"class_cpu_cores[{BARE_CLASS}]", 0.0) - model.pod_cpu_rate(1))
                <= CLASS_REL_TOL * model.pod_cpu_rate(1)
                and m.get(f"class_memory_bytes[{BARE_CLASS}]") == model.pod_memory
                for m in agents.metrics().values()
            )

        try:
            wait_for(learned, timeout_s, "every agent's learned per-pod cost")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {agents.metrics()}") from None
    finally:
        core.delete_namespace(ns)
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_for_idle(agents, timeout_s)


def wait_for_idle(agents: NodeAgents, timeout_s: float) -> None:
    """Every agent reports no pods, the model's idle avail (live) and its idle room."""

    def idle() -> bool:
        for node, m in agents.metrics().items():
            want = agents.expected_avail(node)
            if m.get("pods") != 0 or m.get("mode_live") != 1.0:
                return False
            if abs(m["avail"] - want) > LEARNED_REL_TOL * want:
                return False
            headroom = {f: m.get(f"headroom_{f}", -1.0) for f in ("cpu", "memory")}
            room = room_of(headroom, agents.procfs.node_model(node))
            if abs(room - agents.expected_room(node)) > ROOM_TOL:
                return False
        return True

    try:
        wait_for(idle, timeout_s, "agents idle at the model's avail", interval_s=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {agents.metrics()}") from None


# The ``carico_agents`` fixture: make(*extender_flags, node_cache_capable=False, ignorable=False)
# starts an extender where the session's agents report and returns it.
AgentFedFactory = Callable[..., ExtenderProcess]
