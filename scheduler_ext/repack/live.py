"""A live cluster as the repacker's input: raw API list responses to a checked plan.

The extender and ``carico repack --kubeconfig`` read three lists from the API server (NodeList,
PodList, PodDisruptionBudgetList) as raw JSON. Items of an API list carry no ``kind`` (kubectl adds
it when it prints a ``List``), so ``merge_lists`` sets it from the list's kind and merges the three
into the document ``snapshot.parse_list`` reads — one parser for dumps and live clusters.

``compute`` is the unit of work the extender hands to its solver process: decoding, parsing and
solving all happen there, so the extender's event loop (and its filter path) only moves bytes.
The solver (OR-Tools, and the numba kernels compiled when first imported: seconds of CPU where
the image leaves no writable cache) is imported inside ``compute`` only, so importing this module
for ``merge_lists`` or ``Computed`` keeps the extender's own process free of it.
It also fingerprints the snapshot, so that a state already solved is not solved again. Pure: no
I/O; the clock is a parameter. Neighbours: ``service`` (calls it), ``snapshot``, ``solver``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from carico.pods import DEFAULT_SCHEDULER, class_of_pod
from repack.problem.goal_spec import GoalSpec
from repack.problem.plan import Plan
from repack.problem.snapshot import Snapshot, SnapshotError, parse_list

if TYPE_CHECKING:
    from repack.driver.options import SolveOptions


def merge_lists(raws: Sequence[bytes | str]) -> dict[str, Any]:
    """One kubectl-style ``List`` from API list responses (``NodeList``, ``PodList``, ...).

    An item without ``kind`` gets the list's kind minus ``List``; a plain ``List`` (a kubectl
    dump) is taken as it is.
    """
    items: list[Any] = []
    for raw in raws:
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise SnapshotError(f"an API list response is not JSON: {exc}") from exc
        if not isinstance(doc, Mapping) or not isinstance(doc.get("items"), list):
            raise SnapshotError("an API list response has no 'items' array")
        kind = str(doc.get("kind") or "")
        item_kind = kind[: -len("List")] if kind.endswith("List") and kind != "List" else ""
        for item in doc["items"]:
            if item_kind and isinstance(item, Mapping) and not item.get("kind"):
                item = {**item, "kind": item_kind}
            items.append(item)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def only_pending_of(document: Mapping[str, Any], schedulers: Iterable[str]) -> dict[str, Any]:
    """Drop the unbound pods of other schedulers: Carico cannot steer where they land.

    Bound pods of every scheduler stay, since they hold capacity. Empty ``schedulers``: keep all.
    """
    wanted = frozenset(schedulers)
    if not wanted:
        return dict(document)

    def keep(item: Any) -> bool:
        if not isinstance(item, Mapping) or item.get("kind") != "Pod":
            return True
        spec = item.get("spec") or {}
        if spec.get("nodeName"):
            return True
        return (spec.get("schedulerName") or DEFAULT_SCHEDULER) in wanted

    return {**document, "items": [i for i in document.get("items") or [] if keep(i)]}


def fingerprint(snapshot: Snapshot) -> str:
    """A digest of everything the solver sees: equal digests, equal plans."""
    # Snapshot is a tree of frozen dataclasses, dicts and tuples: its repr is deterministic for
    # the same API response order (the API server lists in key order).
    return hashlib.sha256(repr(snapshot).encode()).hexdigest()


@dataclass(frozen=True)
class Computed:
    """What ``compute`` found. ``snapshot`` and ``plan`` are None when the state was unchanged."""

    fingerprint: str
    snapshot: Snapshot | None
    plan: Plan | None
    pending: tuple[str, ...] = ()  # the pending pods the plan was computed for


def measured_use(
    document: Mapping[str, Any], footprints: Mapping[str, tuple[float, float]]
) -> dict[str, dict[str, float]]:
    """Each bound pod's measured use (cpu in millicores, memory in bytes) from the footprint of
    its workload class, for the pods whose class the agents have measured."""
    out: dict[str, dict[str, float]] = {}
    if not footprints:
        return out
    for item in document.get("items") or ():
        if not isinstance(item, Mapping) or item.get("kind") != "Pod":
            continue
        if not (item.get("spec") or {}).get("nodeName"):
            continue
        found = footprints.get(class_of_pod(item).name)
        if found is not None:
            meta = item.get("metadata") or {}
            key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            out[key] = {"cpu": found[0] * 1000, "memory": found[1]}
    return out


def compute(
    raws: Sequence[bytes | str],
    options: SolveOptions,
    excluded_namespaces: Iterable[str],
    managed_schedulers: Iterable[str] = (),
    unless: str | None = None,
    goal: GoalSpec | None = None,
    footprints: Mapping[str, tuple[float, float]] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Computed:
    """Merge, parse and solve; skip the solve when the snapshot's fingerprint is ``unless``.

    With ``goal`` the balancing engine runs instead of the repacker, measuring use on
    ``footprints`` (per workload class) where a pod's class has one."""
    # in the solver process only (module docstring)
    from repack.driver.balance import rebalance
    from repack.driver.solver import solve

    document = only_pending_of(merge_lists(raws), managed_schedulers)
    snapshot = parse_list(document, excluded_namespaces)
    usage = measured_use(document, footprints or {}) if goal is not None else {}
    digest = fingerprint(snapshot)
    if goal is not None:
        # a new measurement is a new state for the balance goal
        digest = hashlib.sha256((digest + repr(sorted(usage.items()))).encode()).hexdigest()
    if digest == unless:
        return Computed(digest, None, None)
    pending = tuple(sorted(p.key for p in snapshot.pods if p.pending))
    if goal is not None:
        return Computed(digest, snapshot, rebalance(snapshot, goal, options, usage, clock))
    return Computed(digest, snapshot, solve(snapshot, options, clock), pending)
