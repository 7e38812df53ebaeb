"""The cluster interface the extender binds through and watches pods with, and its in-memory twin.

Two implementations share this interface: ``kube.KubernetesCluster`` talks to a real API server;
``InMemoryCluster`` (for ``--no-kube``, the demo and the simulator) records bindings and lets its
owner move pods through their phases. The decision code and the ledger are the same objects in
both cases. ``run_pod_watch`` calls ``on_list`` with every pod that is bound and still Pending —
at start and again whenever the watch had to relist — and ``on_event`` for each change after that;
both callbacks run on the event loop's thread.

For the repacker in apply mode the interface also evicts pods through the Eviction API
(``evict``), which refuses with 429 while a PodDisruptionBudget allows no disruption. The
in-memory twin answers evictions the same way (budgets computed from ``minAvailable`` /
``maxUnavailable`` over the Running pods of ``objects``) and, like a ReplicaSet controller,
creates a pending replacement for every evicted pod that has a controller.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import msgspec

from scheduler_ext import wire
from scheduler_ext.ledger import PENDING, PodState
from scheduler_ext.pods import PodFacts, facts_from_wire
from scheduler_ext.repack.evictions import Evicted, EvictionReply
from scheduler_ext.repack.trigger import Unscheduled, unscheduled_from_object

OnList = Callable[[list[PodState]], None]
OnEvent = Callable[[PodState], None]


class BindError(Exception):
    """The binding was refused or could not be created; the message goes back to the scheduler."""


RUNNING = "Running"


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """matchLabels only: enough for the budgets the in-memory cluster is given."""
    if selector is None:
        return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


class Cluster(Protocol):
    async def bind(self, pod: PodFacts, node: str) -> None:
        """Create the pod's ``pods/binding`` to ``node``; raise BindError on failure."""
        ...

    async def run_pod_watch(self, on_list: OnList, on_event: OnEvent) -> None:
        """List, then watch bound Pending pods until cancelled (relisting when needed)."""
        ...

    async def evict(self, namespace: str, name: str, uid: str) -> EvictionReply:
        """Create the pod's ``pods/eviction`` (policy/v1), with ``uid`` as a precondition."""
        ...

    async def annotate(self, pod: PodFacts, key: str, value: str) -> None:
        """Set one annotation on the pod (uid as a precondition); raise BindError on failure."""
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
        self.annotations: list[tuple[str, str, str]] = []  # (pod key, annotation, value) set
        self._fail_next: list[str] = []
        self._watchers: list[OnEvent] = []
        # What a repack lists: a kubectl-style List of Node, Pod and PodDisruptionBudget objects
        # (pods added with ``add_object`` are kept in step with ``pods``).
        self.objects: dict[str, Any] = {"apiVersion": "v1", "kind": "List", "items": []}
        self._unscheduled_watchers: list[Callable[[list[Unscheduled]], None]] = []
        # Apply mode: evictions made, refusals to answer before a pod may be evicted, and whether
        # an evicted pod with a controller gets a replacement (as a ReplicaSet's would).
        self.evictions: list[str] = []
        self.refuse_evictions: dict[str, int] = {}
        self.replace_evicted = True
        self._replacements = itertools.count(1)

    # -- driven by the owner ---------------------------------------------------------------

    def add_pod(self, facts: PodFacts, *, node: str = "", phase: str = PENDING) -> None:
        self._emit(PodState(facts, node, phase))

    def set_phase(self, key: str, phase: str) -> None:
        self._emit(replace(self.pods[key], phase=phase))

    def add_object(self, obj: dict[str, Any]) -> None:
        """Add a Node, PodDisruptionBudget or Pod to ``objects``; a pod is also added as a
        PodState (a watch event), and an unbound one reaches the repack trigger."""
        meta = obj.setdefault("metadata", {})
        kind = str(obj.get("kind", ""))
        if kind != "Node":
            meta.setdefault("namespace", "default")
        key = f"{meta.get('namespace', '')}/{meta['name']}" if kind != "Node" else meta["name"]
        old = self.object(kind, key)
        items = self.objects.setdefault("items", [])
        if old is not None:
            items.remove(old)
        items.append(obj)
        if kind == "Pod":
            facts = facts_from_wire(msgspec.convert(obj, wire.Pod), strict=False)
            node = str((obj.get("spec") or {}).get("nodeName") or "")
            self._emit(PodState(facts, node, str((obj.get("status") or {}).get("phase", PENDING))))
            self._tell_unscheduled()

    def object(self, kind: str, key: str) -> dict[str, Any] | None:
        """The object of ``kind`` named ``key`` (namespace/name; a Node by name) in ``objects``."""
        for item in self.objects.get("items") or []:
            if isinstance(item, dict) and item.get("kind") == kind:
                meta = item.get("metadata") or {}
                name = meta.get("name")
                if (
                    name if kind == "Node" else f"{meta.get('namespace', 'default')}/{name}"
                ) == key:
                    return item
        return None

    def delete_pod(self, key: str) -> None:
        pod = self.pods.pop(key)
        obj = self.object("Pod", key)
        if obj is not None:
            self.objects["items"].remove(obj)
        for watcher in list(self._watchers):
            watcher(replace(pod, deleted=True))
        if obj is not None:
            self._tell_unscheduled()

    def subscribe(self, on_event: OnEvent) -> None:
        """Receive every later pod event synchronously (an owner without an event loop)."""
        self._watchers.append(on_event)

    def fail_next_bind(self, message: str) -> None:
        self._fail_next.append(message)

    def _emit(self, pod: PodState) -> None:
        self.pods[pod.facts.key] = pod
        obj = self.object("Pod", pod.facts.key)
        if obj is not None:
            obj.setdefault("spec", {})["nodeName"] = pod.node or None
            obj.setdefault("status", {})["phase"] = pod.phase
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

    async def annotate(self, pod: PodFacts, key: str, value: str) -> None:
        current = self.pods.get(pod.key)
        if current is None or (pod.uid and current.facts.uid and pod.uid != current.facts.uid):
            raise BindError(f'pods "{pod.name}" not found')
        self.annotations.append((pod.key, key, value))

    async def run_pod_watch(self, on_list: OnList, on_event: OnEvent) -> None:
        on_list([p for p in self.pods.values() if p.node and p.phase == PENDING])
        self._watchers.append(on_event)
        try:
            await asyncio.Event().wait()  # events are pushed by the owner's calls
        finally:
            self._watchers.remove(on_event)

    def disruptions_allowed(self, pdb: dict[str, Any]) -> int:
        """What the disruption controller would compute: healthy (Running) pods minus the
        minimum, from ``minAvailable`` or ``maxUnavailable`` (integers only)."""
        ns = pdb["metadata"].get("namespace", "default")
        spec = pdb.get("spec") or {}
        selected = [
            o
            for o in self.objects.get("items") or []
            if o.get("kind") == "Pod"
            and o["metadata"].get("namespace") == ns
            and _selects(spec.get("selector"), o["metadata"].get("labels") or {})
        ]
        healthy = sum(1 for o in selected if (o.get("status") or {}).get("phase") == RUNNING)
        if "minAvailable" in spec:
            return max(0, healthy - int(spec["minAvailable"]))
        return max(0, int(spec.get("maxUnavailable", 0)) - (len(selected) - healthy))

    async def evict(self, namespace: str, name: str, uid: str) -> EvictionReply:
        key = f"{namespace}/{name}"
        obj = self.object("Pod", key)  # objects are the truth (``set_objects`` adds no PodState)
        if obj is None:
            return EvictionReply(Evicted.GONE, f'pods "{name}" not found')
        current_uid = str(obj["metadata"].get("uid", ""))
        if uid and current_uid != uid:
            return EvictionReply(Evicted.GONE, f"pod {key} now has uid {current_uid}")
        if self.refuse_evictions.get(key, 0) > 0:
            self.refuse_evictions[key] -= 1
            return EvictionReply(Evicted.BLOCKED, "429 TooManyRequests: refused for the test")
        labels = obj["metadata"].get("labels") or {}
        for pdb in [o for o in self.objects["items"] if o.get("kind") == "PodDisruptionBudget"]:
            if pdb["metadata"].get("namespace", "default") != namespace:
                continue
            selector = (pdb.get("spec") or {}).get("selector")
            if _selects(selector, labels) and self.disruptions_allowed(pdb) <= 0:
                return EvictionReply(
                    Evicted.BLOCKED,
                    "429 TooManyRequests: Cannot evict pod as it would violate the pod's "
                    f"disruption budget {pdb['metadata']['name']}",
                )
        self.evictions.append(key)
        if key in self.pods:
            self.delete_pod(key)
        else:
            self.objects["items"].remove(obj)
            self._tell_unscheduled()
        owners = obj["metadata"].get("ownerReferences") or []
        controller = next((o for o in owners if o.get("controller")), None)
        if self.replace_evicted and controller is not None and controller.get("kind") != "Node":
            # What a ReplicaSet controller does: a new pod from the same template, unbound.
            n = next(self._replacements)
            fresh = copy.deepcopy(obj)
            fresh["metadata"]["name"] = f"{controller.get('name', name)}-r{n}"
            fresh["metadata"]["uid"] = f"{controller.get('uid', '')}-r{n}"
            fresh["spec"]["nodeName"] = None
            fresh["status"] = {"phase": PENDING}
            self.add_object(fresh)
        return EvictionReply(Evicted.EVICTED)

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

    def _tell_unscheduled(self) -> None:
        if self._unscheduled_watchers:
            pods = self._unscheduled()
            for on_list in list(self._unscheduled_watchers):
                on_list(pods)

    async def list_for_repack(self) -> list[bytes]:
        document = copy.deepcopy(self.objects)
        for item in document.get("items") or []:
            # A budget given without a status gets the one the disruption controller would write.
            if item.get("kind") == "PodDisruptionBudget" and "status" not in item:
                item["status"] = {"disruptionsAllowed": self.disruptions_allowed(item)}
        return [json.dumps(document).encode()]

    async def run_pending_watch(
        self,
        on_list: OnList,
        on_event: OnEvent,
        on_unscheduled_list: Callable[[list[Unscheduled]], None],
        on_unscheduled_event: Callable[[Unscheduled], None],
    ) -> None:
        """The ledger's pod watch and the repack trigger's, as ``KubernetesCluster`` gives both
        from one watch; here they are the two watches above, run together."""
        async with asyncio.TaskGroup() as both:
            both.create_task(self.run_pod_watch(on_list, on_event))
            both.create_task(self.run_unscheduled_watch(on_unscheduled_list, on_unscheduled_event))

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
