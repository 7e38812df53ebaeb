"""The cluster interface backed by a real API server, through the official ``kubernetes`` client.

The client is synchronous, so its calls (evictions, the repacker's lists) run in a thread pool.
Bindings, the one call made for every pod, and the pod watches do not use it: ``apiclient`` runs
them on the event loop.

The reservation ledger lists and watches pods with the field selector
``status.phase=Pending,spec.nodeName!=`` (bound, not yet running): the API server reports a pod
leaving that selection (Running, Succeeded, Failed) as a DELETED event, so the watch stays small
even in a large cluster. When the repacker runs too, its trigger needs the unbound Pending pods
as well, and one watch of every Pending pod (``run_pending_watch``) feeds both: two watches would
each get an event for every binding (docs/architecture.md#pod-watches). Responses are decoded
with msgspec from the raw bytes instead of the client's slow model deserialisation.

Neighbours: ``cluster`` (the interface and the in-memory twin), ``ledger`` (PodState),
``apiclient`` (bindings).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import msgspec

from scheduler_ext import wire
from scheduler_ext.apiclient import Binder
from scheduler_ext.cluster import OnEvent, OnList
from scheduler_ext.ledger import PodState
from scheduler_ext.pods import PodFacts, facts_from_wire
from scheduler_ext.repack.evictions import Evicted, EvictionReply
from scheduler_ext.repack.trigger import Unscheduled, unscheduled

log = logging.getLogger(__name__)
T = TypeVar("T")

BOUND_PENDING = "status.phase=Pending,spec.nodeName!="  # the ledger's pods
PENDING = "status.phase=Pending"  # the ledger's and the repack trigger's pods, in one watch


class PodCondition(msgspec.Struct, gc=False):
    type: str = ""
    status: str = ""
    reason: str = ""


class PodStatus(msgspec.Struct):
    phase: str = ""
    conditions: list[PodCondition] | None = None


class ApiMeta(wire.ObjectMeta):
    deletionTimestamp: str | None = None


class ApiPod(wire.Pod):
    metadata: ApiMeta | None = None
    status: PodStatus | None = None


class ListMeta(msgspec.Struct):
    resourceVersion: str = ""


class ApiPodList(msgspec.Struct):
    metadata: ListMeta | None = None
    items: list[ApiPod] | None = None


class ApiStatus(msgspec.Struct):
    message: str = ""
    reason: str = ""
    code: int = 0


class PodEvent(msgspec.Struct):
    type: str = ""
    object: ApiPod | None = None


# A watch line: (event type, the object's resourceVersion, what the event means or None).
WatchLine = tuple[str, str, T | None]

_decode_list = msgspec.json.Decoder(ApiPodList).decode
_decode_event = msgspec.json.Decoder(PodEvent).decode
_decode_status = msgspec.json.Decoder(ApiStatus).decode


def pod_state(pod: ApiPod, *, deleted: bool = False) -> PodState:
    """A PodState from an API pod object (pure; used for list items and watch events)."""
    spec = pod.spec or wire.PodSpec()
    return PodState(
        facts_from_wire(pod, strict=False),
        spec.nodeName or "",
        (pod.status or PodStatus()).phase or "",
        deleted=deleted,
    )


def parse_pod_list(body: bytes) -> tuple[list[PodState], str]:
    """The pods and resourceVersion of a raw PodList response."""
    parsed = _decode_list(body)
    pods = [pod_state(p) for p in parsed.items or ()]
    return pods, (parsed.metadata or ListMeta()).resourceVersion


def _pod_event(line: bytes) -> tuple[str, str, ApiPod | None]:
    """A watch line's type, resourceVersion and pod (None for a BOOKMARK, or an ERROR, whose
    Status is not a pod: it is told by its type alone)."""
    try:
        event = _decode_event(line)
    except msgspec.ValidationError:
        generic = msgspec.json.decode(line)
        return str(generic.get("type", "")) if isinstance(generic, dict) else "", "", None
    pod = event.object
    version = pod.metadata.resourceVersion if pod is not None and pod.metadata else ""
    if pod is None or event.type not in ("ADDED", "MODIFIED", "DELETED"):
        return event.type, version, None
    return event.type, version, pod


def parse_watch_line(line: bytes) -> WatchLine[PodState]:
    """One line of the ledger's pod watch, decoded straight into the fields it needs."""
    kind, version, pod = _pod_event(line)
    if pod is None:
        return kind, version, None
    return kind, version, pod_state(pod, deleted=kind == "DELETED")


# A Pending pod as both consumers of the Pending-pods watch see it.
# The ledger's view is None for an unbound pod, of no concern to it: the pod's facts (its class,
# its requests) are then not derived at all, for the creation and kube-scheduler's verdicts.
PendingPod = tuple[PodState | None, Unscheduled]


def unscheduled_of(pod: ApiPod, *, deleted: bool = False) -> Unscheduled:
    """The repack trigger's view of an API pod object (pure)."""
    meta = pod.metadata or ApiMeta()
    spec = pod.spec or wire.PodSpec()
    status = pod.status or PodStatus()
    return unscheduled(
        f"{meta.namespace or 'default'}/{meta.name}",
        spec.schedulerName,
        ((c.type, c.status, c.reason) for c in status.conditions or ()),
        node=spec.nodeName,
        deleting=bool(meta.deletionTimestamp),
        phase=status.phase,
        deleted=deleted,
    )


def parse_pending_list(body: bytes) -> tuple[list[PendingPod], str]:
    """The Pending pods of a raw PodList response, for the ledger and the trigger at once."""
    parsed = _decode_list(body)
    pods = [(_bound_state(p), unscheduled_of(p)) for p in parsed.items or ()]
    return pods, (parsed.metadata or ListMeta()).resourceVersion


def parse_pending_line(line: bytes) -> WatchLine[PendingPod]:
    """One line of the Pending-pods watch, decoded once for the ledger and the trigger."""
    kind, version, pod = _pod_event(line)
    if pod is None:
        return kind, version, None
    deleted = kind == "DELETED"
    return kind, version, (_bound_state(pod, deleted), unscheduled_of(pod, deleted=deleted))


def _bound_state(pod: ApiPod, deleted: bool = False) -> PodState | None:
    bound = pod.spec is not None and pod.spec.nodeName
    return pod_state(pod, deleted=deleted) if bound else None


def fetch_cluster_lists(api_client: Any) -> list[bytes]:
    """Nodes, pods (all namespaces) and PodDisruptionBudgets as raw JSON list responses.

    Raw bytes, not the client's models: the repacker parses them with the same code that reads a
    ``kubectl get nodes,pods,pdb -A -o json`` dump, in its own process.
    """
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    calls = (
        core.list_node,
        core.list_pod_for_all_namespaces,
        policy.list_pod_disruption_budget_for_all_namespaces,
    )
    out: list[bytes] = []
    for call in calls:
        resp: Any = call(_preload_content=False)
        try:
            out.append(bytes(resp.data))
        finally:
            resp.release_conn()
    return out


def api_error_message(exc: Exception) -> str:
    """The API server's own message from an ApiException, else the exception text."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    if body:
        try:
            parsed = _decode_status(body if isinstance(body, bytes) else str(body).encode())
            if parsed.message:
                return f"{status} {parsed.reason}: {parsed.message}"
        except msgspec.DecodeError:
            pass
    return f"{status} {getattr(exc, 'reason', '') or exc}"


class KubernetesCluster:
    def __init__(self, kubeconfig: str | None = None, *, workers: int = 16) -> None:
        # Imported here so --no-kube never loads the (slow to import) client.
        from kubernetes import client, config

        configuration = client.Configuration()
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except config.ConfigException:
                config.load_kube_config(client_configuration=configuration)
        # One connection per worker, so parallel binds do not queue on urllib3's pool of 4.
        configuration.connection_pool_maxsize = workers
        self._client = client
        self._api = client.CoreV1Api(client.ApiClient(configuration))
        # Bindings, one per admitted pod, and the pod watches run on the event loop
        # (apiclient); the official client serves the rarer calls.
        self._binder = Binder(configuration, connections=workers)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")

    # -- bind ------------------------------------------------------------------------------

    async def bind(self, pod: PodFacts, node: str) -> None:
        await self._binder.bind(pod.namespace, pod.name, pod.uid, node)

    async def annotate(self, pod: PodFacts, key: str, value: str) -> None:
        await self._binder.annotate(pod.namespace, pod.name, pod.uid, key, value)

    # -- repack apply mode: evictions ------------------------------------------------------

    def _evict_sync(self, namespace: str, name: str, uid: str) -> EvictionReply:
        c = self._client
        body = c.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=c.V1ObjectMeta(name=name, namespace=namespace),
            # The uid precondition: never evict a pod that replaced the planned one by name.
            delete_options=c.V1DeleteOptions(preconditions=c.V1Preconditions(uid=uid or None)),
        )
        try:
            resp: Any = self._api.create_namespaced_pod_eviction(
                name=name, namespace=namespace, body=body, _preload_content=False
            )
            resp.release_conn()
        except c.ApiException as exc:
            message = api_error_message(exc)
            if exc.status == 429:
                return EvictionReply(Evicted.BLOCKED, message)
            if exc.status in (404, 409):
                return EvictionReply(Evicted.GONE, message)
            return EvictionReply(Evicted.FAILED, message)
        except Exception as exc:  # connection errors, timeouts: report, never crash the server
            return EvictionReply(Evicted.FAILED, str(exc) or type(exc).__name__)
        return EvictionReply(Evicted.EVICTED)

    async def evict(self, namespace: str, name: str, uid: str) -> EvictionReply:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._evict_sync, namespace, name, uid)

    # -- watch ---------------------------------------------------------------------------

    async def run_pod_watch(self, on_list: OnList, on_event: OnEvent) -> None:
        await self._binder.list_then_watch(
            "/api/v1/pods", BOUND_PENDING, parse_pod_list, parse_watch_line, on_list, on_event
        )

    async def run_pending_watch(
        self,
        on_list: OnList,
        on_event: OnEvent,
        on_unscheduled_list: Callable[[list[Unscheduled]], None],
        on_unscheduled_event: Callable[[Unscheduled], None],
    ) -> None:
        """``run_pod_watch`` and the repack trigger's watch of unbound pods in one: list, then
        watch every Pending pod until cancelled. The ledger gets what ``run_pod_watch`` gives it
        (bound pods, and a pod leaving Pending as a deletion); the trigger gets the unbound pods
        in its lists and every event, in which a bound pod is gone from its view. A callback
        that raises makes the watch list again, for both."""

        def listed(pods: list[PendingPod]) -> None:
            on_list([state for state, _ in pods if state is not None])
            on_unscheduled_list([view for state, view in pods if state is None])

        def event(pod: PendingPod) -> None:
            state, view = pod
            if state is not None:
                on_event(state)
            on_unscheduled_event(view)

        await self._binder.list_then_watch(
            "/api/v1/pods", PENDING, parse_pending_list, parse_pending_line, listed, event
        )

    # -- repacking: the whole cluster ----------------------------------------------------

    async def list_for_repack(self) -> list[bytes]:
        """Nodes, pods and PDBs as raw API list responses (``repack.live.merge_lists``)."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fetch_cluster_lists, self._api.api_client)
        except Exception as exc:  # the API server's own words, not the client's HTTP dump
            raise RuntimeError(api_error_message(exc)) from exc

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        await self._binder.close()
