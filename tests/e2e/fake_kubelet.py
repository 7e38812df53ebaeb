"""A simulated kubelet (a fake: no containers run) for the e2e control plane.

It does, through the real API with the official client, the part of a kubelet that the control
plane can see:

* registers Node objects with capacity and allocatable, Ready, and keeps them Ready with Lease
  heartbeats in ``kube-node-lease`` like a real kubelet (every ``heartbeat_s``, lease duration
  ``lease_duration_s``). The node lifecycle controller stays ON: it is the component that lifts the
  ``node.kubernetes.io/not-ready`` taint the API server puts on every new node, and it is what a
  node whose heartbeats stop must meet, so the bed keeps that behaviour real;
* watches pods bound to its nodes, turns them Running after a start-up delay, turns them Succeeded
  after a run time, and confirms graceful deletions (deletes with grace 0) like a kubelet does once
  containers are gone;
* reports per-node pod counts to a callback whenever they change, so node agents can be fed.

Timing comes from a :class:`PodTiming`. :class:`AnnotationTiming` (the default) uses a fixed
start-up delay and the ``carico.io/sim-run-seconds`` annotation; a contention model implements the
same two methods, seeing the node's counts at that moment, and drives the same kubelet.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

RUN_SECONDS_ANNOTATION = "carico.io/sim-run-seconds"
# Overrides the start-up delay of one pod: tests hold pods bound-but-Pending with it.
STARTUP_SECONDS_ANNOTATION = "carico.io/sim-startup-seconds"
LEASE_NAMESPACE = "kube-node-lease"
RETRY_S = 1.0  # a pod's start, completion or removal is tried again this soon after the API failed
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
FAKE_KUBELET_VERSION = "v0.0.0-carico-fake-kubelet"

# The official client no longer guesses a patch type from the body; dict bodies must say theirs.
STRATEGIC = "application/strategic-merge-patch+json"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeSpec:
    """A simulated node: capacity equals allocatable (no system reservations here)."""

    name: str
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodCounts:
    """Pods on one node: ``starting`` (bound, not yet Running) and ``running``."""

    starting: int = 0
    running: int = 0

    @property
    def pods(self) -> int:
        """Pods occupying the node (what a node agent counts)."""
        return self.starting + self.running


class PodCountsRecorder:
    """An ``on_pod_counts`` hook that keeps the latest counts per node, as an agent would."""

    def __init__(self) -> None:
        self.latest: dict[str, PodCounts] = {}

    def __call__(self, node: str, counts: PodCounts) -> None:
        self.latest[node] = counts


class PodTiming(Protocol):
    """When a bound pod starts and how long it runs. ``counts`` is its node's state right now."""

    def startup_delay(self, pod: Any, node: str, counts: PodCounts) -> float: ...

    def run_seconds(self, pod: Any, node: str, counts: PodCounts) -> float | None:
        """Seconds from Running to Succeeded, or None to run until deleted."""
        ...


@dataclass(frozen=True)
class AnnotationTiming:
    """Start-up delay fixed or from ``carico.io/sim-startup-seconds``; run time from
    ``carico.io/sim-run-seconds``."""

    startup_delay_s: float = 0.5

    def startup_delay(self, pod: Any, node: str, counts: PodCounts) -> float:
        raw = (pod.metadata.annotations or {}).get(STARTUP_SECONDS_ANNOTATION)
        if raw is None:
            return self.startup_delay_s
        try:
            return max(0.0, float(raw))
        except ValueError:
            log.warning(
                "pod %s: ignoring bad %s=%r", pod.metadata.name, STARTUP_SECONDS_ANNOTATION, raw
            )
            return self.startup_delay_s

    def run_seconds(self, pod: Any, node: str, counts: PodCounts) -> float | None:
        raw = (pod.metadata.annotations or {}).get(RUN_SECONDS_ANNOTATION)
        if raw is None:
            return None
        try:
            seconds = float(raw)
        except ValueError:
            log.warning(
                "pod %s: ignoring bad %s=%r", pod.metadata.name, RUN_SECONDS_ANNOTATION, raw
            )
            return None
        return max(0.0, seconds)


@dataclass
class _Pod:
    uid: str
    namespace: str
    name: str
    node: str
    phase: str
    containers: list[tuple[str, str]]  # (name, image)
    pod: Any  # the last V1Pod seen, handed to PodTiming
    deleting: bool = False


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _iso(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(t: datetime.datetime) -> str:
    """metav1.MicroTime's wire form; always six fractional digits, which its parser requires."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class FakeKubelet:
    """Simulates the kubelets of ``nodes``. Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        nodes: Sequence[NodeSpec],
        *,
        timing: PodTiming | None = None,
        on_pod_counts: Callable[[str, PodCounts], None] | None = None,
        heartbeat_s: float = 10.0,
        lease_duration_s: int = 40,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not nodes or len({n.name for n in nodes}) != len(nodes):
            raise ValueError("nodes must be non-empty with unique names")
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.coordination = kubernetes.client.CoordinationV1Api(api_client)
        self.nodes = {n.name: n for n in nodes}
        self._node_index = {n.name: i for i, n in enumerate(nodes)}
        self.timing: PodTiming = timing if timing is not None else AnnotationTiming()
        self.on_pod_counts = on_pod_counts
        self.heartbeat_s = heartbeat_s
        self.lease_duration_s = lease_duration_s
        self.clock = clock
        self._pods: dict[str, _Pod] = {}
        # Re-entrant: a PodTiming may call pod_counts() while the kubelet holds the lock.
        self._lock = threading.RLock()
        self._timers: list[tuple[float, int, str, str]] = []  # (due, seq, action, uid)
        self._seq = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ip_seq = itertools.count(2)
        self.errors: list[str] = []  # unexpected API failures, for tests to assert empty

    # ---- nodes and leases ----------------------------------------------------------------
    def _node_ip(self, name: str) -> str:
        return f"10.240.{self._node_index[name] // 250}.{self._node_index[name] % 250 + 1}"

    def _node_status(self, spec: NodeSpec) -> dict[str, Any]:
        resources = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.pods)}
        now = _iso(_now())
        conditions = [
            {"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": "fake kubelet"}
            for t, r in (
                ("MemoryPressure", "SufficientMemory"),
                ("DiskPressure", "NoDiskPressure"),
                ("PIDPressure", "SufficientPID"),
            )
        ]
        conditions.append(
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake kubelet"}
        )
        for c in conditions:
            c["lastHeartbeatTime"] = now
            c["lastTransitionTime"] = now
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": self._node_ip(spec.name)},
                {"type": "Hostname", "address": spec.name},
            ],
            "nodeInfo": {
                "kubeletVersion": FAKE_KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "fake://0",
                "kernelVersion": "",
                "osImage": "carico fake kubelet",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kubeProxyVersion": "",
            },
        }

    def _register(self, spec: NodeSpec) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": spec.name,
                "labels": {
                    "kubernetes.io/hostname": spec.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    **spec.labels,
                },
            },
            "status": self._node_status(spec),
        }
        try:
            self.core.create_node(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        # Status on create is not guaranteed to be kept; set it through the status subresource.
        self.core.patch_node_status(
            spec.name, {"status": self._node_status(spec)}, _content_type=STRATEGIC
        )
        self._renew_lease(spec.name)

    def _renew_lease(self, node: str) -> None:
        now = _micro(_now())
        try:
            self.coordination.patch_namespaced_lease(
                node,
                LEASE_NAMESPACE,
                {"spec": {"renewTime": now, "holderIdentity": node}},
                _content_type=STRATEGIC,
            )
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        uid = self.core.read_node(node).metadata.uid
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": node,
                "namespace": LEASE_NAMESPACE,
                # As the kubelet does: the lease goes when the node goes.
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}],
            },
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": self.lease_duration_s,
                "renewTime": now,
            },
        }
        self.coordination.create_namespaced_lease(LEASE_NAMESPACE, lease)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            for name in list(self.nodes):
                try:
                    self._renew_lease(name)
                except Exception as exc:  # keep beating for the other nodes
                    if not self._stop.is_set():
                        self.errors.append(f"lease {name}: {exc}")

    def node_ready(self, name: str) -> bool:
        """Ready=True and not tainted not-ready (so the scheduler will use it)."""
        node = self.core.read_node(name)
        ready = any(
            c.type == "Ready" and c.status == "True" for c in (node.status.conditions or [])
        )
        tainted = any(t.key == NOT_READY_TAINT for t in (node.spec.taints or []))
        return ready and not tainted

    # ---- pods ----------------------------------------------------------------------------
    def _counts_locked(self, node: str) -> PodCounts:
        starting = running = 0
        for p in self._pods.values():
            if p.node != node or p.deleting:
                continue
            if p.phase == "Pending":
                starting += 1
            elif p.phase == "Running":
                running += 1
        return PodCounts(starting=starting, running=running)

    def pod_counts(self) -> dict[str, PodCounts]:
        with self._lock:
            return {n: self._counts_locked(n) for n in self.nodes}

    def running_pods(self) -> dict[str, list[str]]:
        """The uids of the pods Running on each node (those ``pod_counts`` counts as running):
        the pods whose containers, and cgroups, exist."""
        with self._lock:
            out: dict[str, list[str]] = {n: [] for n in self.nodes}
            for uid, p in self._pods.items():
                if p.phase == "Running" and not p.deleting:
                    out[p.node].append(uid)
            return out

    def _notify(self, nodes: set[str]) -> None:
        if self.on_pod_counts is None:
            return
        counts = self.pod_counts()
        for n in sorted(nodes):
            try:
                self.on_pod_counts(n, counts[n])
            except Exception as exc:
                self.errors.append(f"on_pod_counts({n}): {exc}")

    def _schedule_locked(self, delay_s: float, action: str, uid: str) -> None:
        heapq.heappush(self._timers, (self.clock() + delay_s, next(self._seq), action, uid))
        self._wake.notify()

    def starting(self, namespace: str) -> int:
        """Pods of ``namespace`` this kubelet has seen bound and not yet started."""
        with self._lock:
            return sum(
                1
                for st in self._pods.values()
                if st.namespace == namespace and st.phase == "Pending" and not st.deleting
            )

    def start_now(self, namespace: str) -> int:
        """Start every pod of ``namespace`` still starting (ends a long start-up delay early)."""
        with self._lock:
            uids = [
                uid
                for uid, st in self._pods.items()
                if st.namespace == namespace and st.phase == "Pending" and not st.deleting
            ]
            for uid in uids:
                self._schedule_locked(0.0, "start", uid)
        return len(uids)

    def _observe(self, event_type: str, pod: Any) -> set[str]:
        """Fold one watch event into the local state; returns nodes whose counts may change."""
        node = pod.spec.node_name
        if node not in self.nodes:
            return set()
        uid = pod.metadata.uid
        phase = (pod.status.phase if pod.status else None) or "Pending"
        with self._lock:
            if event_type == "DELETED":
                return {node} if self._pods.pop(uid, None) is not None else set()
            state = self._pods.get(uid)
            if state is None:
                state = _Pod(
                    uid=uid,
                    namespace=pod.metadata.namespace,
                    name=pod.metadata.name,
                    node=node,
                    phase=phase,
                    containers=[(c.name, c.image) for c in pod.spec.containers],
                    pod=pod,
                )
                self._pods[uid] = state
                counts = self._counts_locked(node)
                if phase == "Pending":
                    delay = self.timing.startup_delay(pod, node, counts)
                    self._schedule_locked(delay, "start", uid)
                elif phase == "Running":
                    # Seen Running already (a relist): finish the remaining run time.
                    run = self.timing.run_seconds(pod, node, counts)
                    if run is not None:
                        started = pod.status.start_time or _now()
                        elapsed = (_now() - started).total_seconds()
                        self._schedule_locked(max(0.0, run - elapsed), "complete", uid)
            else:
                state.pod = pod
                state.phase = phase
            if pod.metadata.deletion_timestamp is not None and not state.deleting:
                state.deleting = True
                self._schedule_locked(0.0, "finalize", uid)
            return {node}

    def _status_patch(self, state: _Pod, phase: str) -> dict[str, Any]:
        now = _iso(_now())
        running = phase == "Running"
        if running:
            container_state: dict[str, Any] = {"running": {"startedAt": now}}
        else:
            container_state = {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": now,
                    "finishedAt": now,
                }
            }
        ready = "True" if running else "False"
        conditions = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
            {"type": "Ready", "status": ready, "lastTransitionTime": now},
        ]
        if not running:
            for c in conditions[3:]:
                c["reason"] = "PodCompleted"
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": name,
                    "image": image,
                    "imageID": f"fake://{image}",
                    "containerID": f"fake://{state.uid}/{name}",
                    "ready": running,
                    "started": running,
                    "restartCount": 0,
                    "state": container_state,
                }
                for name, image in state.containers
            ],
        }
        if running:
            ip = f"10.244.{self._node_index[state.node] % 256}.{next(self._ip_seq) % 250 + 2}"
            status["hostIP"] = self._node_ip(state.node)
            status["hostIPs"] = [{"ip": status["hostIP"]}]
            status["podIP"] = ip
            status["podIPs"] = [{"ip": ip}]
            status["startTime"] = now
        return {"status": status}

    def _act(self, action: str, uid: str) -> None:
        with self._lock:
            state = self._pods.get(uid)
            if state is None:
                return
            if action != "finalize" and (state.deleting or state.phase in ("Succeeded", "Failed")):
                return
            counts = self._counts_locked(state.node)
        try:
            if action == "start":
                self.core.patch_namespaced_pod_status(
                    state.name,
                    state.namespace,
                    self._status_patch(state, "Running"),
                    _content_type=STRATEGIC,
                )
                with self._lock:
                    state.phase = "Running"
                    run = self.timing.run_seconds(state.pod, state.node, counts)
                    if run is not None:
                        self._schedule_locked(run, "complete", uid)
                self._notify({state.node})
            elif action == "complete":
                self.core.patch_namespaced_pod_status(
                    state.name,
                    state.namespace,
                    self._status_patch(state, "Succeeded"),
                    _content_type=STRATEGIC,
                )
                with self._lock:
                    state.phase = "Succeeded"
                self._notify({state.node})
            elif action == "finalize":
                # The kubelet's last word on a graceful deletion: containers are gone.
                self.core.delete_namespaced_pod(
                    state.name,
                    state.namespace,
                    grace_period_seconds=0,
                    body=kubernetes.client.V1DeleteOptions(
                        grace_period_seconds=0,
                        preconditions=kubernetes.client.V1Preconditions(uid=uid),
                    ),
                )
        except ApiException as exc:
            # 404: deleted meanwhile; 409: a precondition saw a newer pod of the same name.
            if exc.status in (429,) or exc.status >= 500:
                self._retry(action, uid)  # the API server is starting or overloaded
            elif exc.status not in (404, 409):
                self.errors.append(f"{action} {state.namespace}/{state.name}: {exc.status}")
        except (OSError, urllib3.exceptions.HTTPError):
            # The API server is down (restarting): a kubelet tries again; an exception here
            # would end the timer thread, and no pod would ever start or finish again.
            self._retry(action, uid)

    def _retry(self, action: str, uid: str) -> None:
        with self._lock:
            self._schedule_locked(RETRY_S, action, uid)

    def _timer_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while not self._stop.is_set() and (
                    not self._timers or self._timers[0][0] > self.clock()
                ):
                    timeout = self._timers[0][0] - self.clock() if self._timers else 1.0
                    self._wake.wait(timeout=min(max(timeout, 0.0), 1.0))
                if self._stop.is_set():
                    return
                _, _, action, uid = heapq.heappop(self._timers)
            self._act(action, uid)

    def _watch_loop(self) -> None:
        # Only pods bound to some node concern a kubelet.
        selector = "spec.nodeName!="
        while not self._stop.is_set():
            try:
                listed = self.core.list_pod_for_all_namespaces(field_selector=selector)
                seen = {p.metadata.uid for p in listed.items}
                changed: set[str] = set()
                with self._lock:
                    for uid in [u for u in self._pods if u not in seen]:
                        changed.add(self._pods.pop(uid).node)
                for pod in listed.items:
                    changed |= self._observe("ADDED", pod)
                self._notify(changed)
                version = listed.metadata.resource_version
                while not self._stop.is_set():
                    watch = kubernetes.watch.Watch()
                    # Short server-side timeouts bound how long stop() waits for this thread.
                    for event in watch.stream(
                        self.core.list_pod_for_all_namespaces,
                        field_selector=selector,
                        resource_version=version,
                        timeout_seconds=5,
                        allow_watch_bookmarks=True,
                    ):
                        if event["type"] == "ERROR":
                            raise ApiException(status=event["raw_object"].get("code", 500))
                        # raw_object: bookmarks do not deserialise into a V1Pod.
                        version = event["raw_object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._notify(self._observe(event["type"], event["object"]))
                        if self._stop.is_set():
                            watch.stop()
                            break
            except ApiException as exc:
                if exc.status != 410 and not self._stop.is_set():  # 410: relist and go on
                    self.errors.append(f"pod watch: {exc.status} {exc.reason}")
                    self._stop.wait(1.0)
            except Exception as exc:
                if not self._stop.is_set():
                    self.errors.append(f"pod watch: {exc!r}")
                    self._stop.wait(1.0)

    # ---- life cycle ----------------------------------------------------------------------
    def start(self, ready_timeout_s: float = 120.0) -> None:
        """Register the nodes, start heartbeats and the pod loop, wait until nodes are usable."""
        for spec in self.nodes.values():
            self._register(spec)
        for target, name in (
            (self._heartbeat_loop, "heartbeat"),
            (self._timer_loop, "timers"),
            (self._watch_loop, "pod-watch"),
        ):
            thread = threading.Thread(target=target, name=f"fake-kubelet-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        deadline = time.monotonic() + ready_timeout_s
        pending = set(self.nodes)
        while pending:
            pending = {n for n in pending if not self.node_ready(n)}
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"nodes not Ready/untainted in {ready_timeout_s} s: {pending}")
            if pending:
                time.sleep(0.25)

    def stop(self, delete_nodes: bool = False) -> None:
        self._stop.set()
        with self._lock:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout=15)
        self._threads.clear()
        if delete_nodes:
            for name in self.nodes:
                try:
                    self.core.delete_node(name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
