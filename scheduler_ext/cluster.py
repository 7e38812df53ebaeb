"""The cluster interface the extender binds through and watches pods with, and its in-memory twin.

Two implementations share this interface: ``kube.KubernetesCluster`` talks to a real API server;
``InMemoryCluster`` (for ``--no-kube``, the demo and the simulator) records bindings and lets its
owner move pods through their phases. The decision code and the ledger are the same objects in
both cases. ``run_pod_watch`` calls ``on_list`` with every pod that is bound and still Pending —
at start and again whenever the watch had to relist — and ``on_event`` for each change after that;
both callbacks run on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from scheduler_ext.ledger import PENDING, PodState
from scheduler_ext.pods import PodFacts
from scheduler_ext.repack.trigger import Unscheduled, unscheduled_from_object

OnList = Callable[[list[PodState]], None]
OnEvent = Callable[[PodState], None]


class BindError(Exception):
    """The binding was refused or could not be created; the message goes back to the scheduler."""


class Cluster(Protocol):
    async def bind(self, pod: PodFacts, node: str) -> None:
        """Create the pod's ``pods/binding`` to ``node``; raise BindError on failure."""
        ...

    async def run_pod_watch(self, on_list: OnList, on_event: OnEvent) -> None:
        """List, then watch bound Pending pods until cancelled (relisting when needed)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Binding:
    namespace: str
    name: str
    uid: str
    node: str


class InMemoryCluster:
    """A cluster held in memory: pods, their phases and the bindings made to them.

    Methods must be called on the event loop's thread (they deliver watch events synchronously).
    ``auto_create`` makes a bind of an unknown pod create it, which suits a simulator driving the
    extender directly; with it off, such a bind fails as the API server would (not found).
    """

    def __init__(self, *, auto_create: bool = True, bind_delay: float = 0.0) -> None:
        self.auto_create = auto_create
        self.bind_delay = bind_delay
        self.pods: dict[str, PodState] = {}
        self.bindings: list[Binding] = []
        self._fail_next: list[str] = []
        self._watchers: list[OnEvent] = []
        # What a repack lists: a kubectl-style List of Node, Pod and PodDisruptionBudget objects.
        self.objects: dict[str, Any] = {"apiVersion": "v1", "kind": "List", "items": []}
        self._unscheduled_watchers: list[Callable[[list[Unscheduled]], None]] = []

    # -- driven by the owner ---------------------------------------------------------------

    def add_pod(self, facts: PodFacts, *, node: str = "", phase: str = PENDING) -> None:
        self._emit(PodState(facts, node, phase))

    def set_phase(self, key: str, phase: str) -> None:
        self._emit(replace(self.pods[key], phase=phase))

    def delete_pod(self, key: str) -> None:
        pod = self.pods.pop(key)
        for watcher in list(self._watchers):
            watcher(replace(pod, deleted=True))

    def subscribe(self, on_event: OnEvent) -> None:
        """Receive every later pod event synchronously (an owner without an event loop)."""
        self._watchers.append(on_event)

    def fail_next_bind(self, message: str) -> None:
        self._fail_next.append(message)

    def _emit(self, pod: PodState) -> None:
        self.pods[pod.facts.key] = pod
        for watcher in list(self._watchers):
            watcher(pod)

    # -- the Cluster interface -------------------------------------------------------------

    async def bind(self, pod: PodFacts, node: str) -> None:
        if self.bind_delay:
            await asyncio.sleep(self.bind_delay)
        if self._fail_next:
            raise BindError(self._fail_next.pop(0))
        current = self.pods.get(pod.key)
        if current is None:
            if not self.auto_create:
                raise BindError(f'pods "{pod.name}" not found')
            current = PodState(pod, "", PENDING)
        if pod.uid and current.facts.uid and pod.uid != current.facts.uid:
            raise BindError(f"pod {pod.key} has uid {current.facts.uid}, not {pod.uid}")
        if current.node:
            raise BindError(f"pod {pod.key} is already assigned to node {current.node}")
        self.bindings.append(Binding(pod.namespace, pod.name, pod.uid, node))
        self._emit(replace(current, node=node))

    async def run_pod_watch(self, on_list: OnList, on_event: OnEvent) -> None:
        on_list([p for p in self.pods.values() if p.node and p.phase == PENDING])
        self._watchers.append(on_event)
        try:
            await asyncio.Event().wait()  # events are pushed by the owner's calls
        finally:
            self._watchers.remove(on_event)

    async def close(self) -> None:
        return None

    # -- what a repack sees (``repack.service.RepackSource``) ------------------------------

    def set_objects(self, document: Mapping[str, Any]) -> None:
        """Replace the objects a repack lists; unbound pods in it feed the repack trigger."""
        self.objects = json.loads(json.dumps(document))  # a copy the caller cannot change
        pods = self._unscheduled()
        for on_list in list(self._unscheduled_watchers):
            on_list(pods)

    def _unscheduled(self) -> list[Unscheduled]:
        return [
            unscheduled_from_object(item)
            for item in self.objects.get("items") or []
            if isinstance(item, dict)
            and item.get("kind") == "Pod"
            and not (item.get("spec") or {}).get("nodeName")
        ]

    async def list_for_repack(self) -> list[bytes]:
        return [json.dumps(self.objects).encode()]

    async def run_unscheduled_watch(
        self,
        on_list: Callable[[list[Unscheduled]], None],
        on_event: Callable[[Unscheduled], None],
    ) -> None:
        """Every ``set_objects`` is delivered as a fresh list (``on_event`` is never called)."""
        on_list(self._unscheduled())
        self._unscheduled_watchers.append(on_list)
        try:
            await asyncio.Event().wait()
        finally:
            self._unscheduled_watchers.remove(on_list)
