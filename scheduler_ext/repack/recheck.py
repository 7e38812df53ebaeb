"""What the executor decides from the live cluster state, before and after each plan step.

Pure: a ``LiveView`` is built from the live objects as one ``List`` (``live.merge_lists`` of
what ``list_for_repack`` returns; the form ``snapshot.parse_list`` reads). The functions here say
whether a step may still run (``drift``: the planned pod is where the plan expects it and still
allowed to move; the target still has room and accepts it) and whether a step is done
(``landed``: the pod the step waits for is bound to its planned node). No I/O and no clock.
Neighbours: ``executor`` (the async runner that calls these), ``snapshot`` (parsing),
``eligibility`` (node constraints).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from carico.pods import DEFAULT_EXCLUDED_NAMESPACES
from repack.problem.eligibility import eligible
from repack.problem.plan import Step
from repack.problem.snapshot import (
    Pod,
    Snapshot,
    SnapshotError,
    parse_list,
    parse_pod,
)
from scheduler_ext.slots import Signature, signature

# Why a bound pod may never be evicted by a plan (snapshot.Pod.immovable values). "pdb" is not
# here: the Eviction API is the authority on budgets and answers 429, which pauses the plan.
NEVER_MOVE = frozenset(
    {"do-not-move", "mirror", "daemonset", "bare", "excluded-namespace", "terminating"}
)
EVICTING = frozenset({"evict", "move", "evict-first"})
LANDING = frozenset({"move", "land", "place"})


@dataclass(frozen=True)
class LiveView:
    snapshot: Snapshot
    pods: Mapping[str, Pod]  # by namespace/name
    owner_uid: Mapping[str, str]  # pod key -> uid of its controlling owner ("" for none)

    @property
    def nodes(self) -> dict[str, Any]:
        return {n.name: n for n in self.snapshot.nodes}

    def load(self, node: str) -> dict[str, int]:
        """Requests of every pod bound to ``node`` (terminating ones still hold their room)."""
        total: dict[str, int] = {}
        for pod in self.snapshot.pods:
            if pod.node == node:
                for r, v in pod.requests.items():
                    total[r] = total.get(r, 0) + v
        return total


def live_view(
    document: Mapping[str, Any], excluded: Collection[str] = DEFAULT_EXCLUDED_NAMESPACES
) -> LiveView:
    snapshot = parse_list(document, excluded)
    owners: dict[str, str] = {}
    for item in document.get("items") or ():
        if item.get("kind") != "Pod":
            continue
        meta = item.get("metadata") or {}
        refs = meta.get("ownerReferences") or []
        ctrl = next((o for o in refs if o.get("controller")), refs[0] if refs else None)
        owners[f"{meta.get('namespace', 'default')}/{meta.get('name')}"] = (
            str(ctrl.get("uid", "")) if ctrl else ""
        )
    return LiveView(snapshot, {p.key: p for p in snapshot.pods}, owners)


def pod_signature(pod: Pod) -> Signature:
    """The class signature a replacement of ``pod`` must have to take its slot."""
    return signature(pod.requests, pod.priority, pod.node_selector, pod.affinity, pod.tolerations)


def _fits(load: Mapping[str, int], need: Mapping[str, int], alloc: Mapping[str, int]) -> str:
    over = [
        f"{r} {load.get(r, 0)}+{v} > {alloc.get(r, 0)}"
        for r, v in sorted(need.items())
        if v and load.get(r, 0) + v > alloc.get(r, 0)
    ]
    return ", ".join(over)


def drift(step: Step, planned: Pod, uid: str, live: LiveView) -> str | None:
    """Why ``step`` must not run now (the live state is not what the plan assumed), or None.

    ``planned`` is the pod as the plan saw it; ``uid`` the uid it had then.
    """
    current = live.pods.get(step.pod)
    if step.action in EVICTING:
        if current is None:
            return f"pod {step.pod} is gone"
        if uid and current.uid != uid:
            return f"pod {step.pod} was replaced (uid {current.uid}, planned {uid})"
        if current.node != step.from_node:
            return f"pod {step.pod} is on {current.node or 'no node'}, planned {step.from_node}"
        if current.immovable in NEVER_MOVE:
            return f"pod {step.pod} must not be moved ({current.immovable})"
    if step.action == "place":
        if current is None or (uid and current.uid != uid):
            return f"pending pod {step.pod} is gone"
        if current.node is not None and current.node != step.to_node:
            return f"pending pod {step.pod} was bound to {current.node}, planned {step.to_node}"
        if current.node == step.to_node:
            return None  # already there: nothing to check
    if step.action in LANDING and step.to_node is not None:
        node = live.nodes.get(step.to_node)
        if node is None:
            return f"node {step.to_node} is gone"
        if not eligible(planned, node):
            return f"node {step.to_node} no longer accepts {step.pod} (labels, taints or cordon)"
        # A land step only waits: the replacement left with its evict-first step, may already
        # sit on the target, and cannot be bound there before the room exists anyway.
        over = (
            ""
            if step.action == "land"
            else _fits(live.load(step.to_node), planned.requests, node.allocatable)
        )
        if over:
            return f"node {step.to_node} has no room for {step.pod}: {over}"
    return None


def gone(step: Step, uid: str, live: LiveView) -> bool:
    """The planned pod has left ``step.from_node`` (deleted, finished or replaced)."""
    current = live.pods.get(step.pod)
    return current is None or (bool(uid) and current.uid != uid) or current.node != step.from_node


def landed(
    step: Step, uid: str, owner_uid: str, known: Collection[str], live: LiveView
) -> str | None:
    """The uid of the pod that fulfils ``step`` on ``step.to_node``, or None while none has.

    For ``place`` that is the pending pod itself; for ``move`` and ``land`` a pod of the same
    controller (``owner_uid``) whose uid is not in ``known`` (the pods that existed before, and
    the replacements already counted for earlier steps).
    """
    if step.to_node is None:
        return None
    if step.action == "place":
        current = live.pods.get(step.pod)
        if current is not None and current.uid == uid and current.node == step.to_node:
            return current.uid
        return None
    for key, pod in live.pods.items():
        if (
            pod.node == step.to_node
            and pod.uid not in known
            and owner_uid
            and live.owner_uid.get(key) == owner_uid
        ):
            return pod.uid
    return None


def request_signature(body: bytes | bytearray) -> Signature | None:
    """The class signature of the pod in an extender filter request (None if unreadable).

    Called only for a pod whose controller holds a replacement slot, so the full decode of the
    pod is paid only then, never on the common path.
    """
    try:
        doc = json.loads(body)
        raw = doc.get("Pod") if isinstance(doc, dict) else None
        pod = parse_pod(raw, frozenset()) if isinstance(raw, dict) else None
    except (ValueError, RecursionError, SnapshotError):
        return None
    return pod_signature(pod) if pod is not None else None
