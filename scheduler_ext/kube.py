"""The cluster interface backed by a real API server, through the official ``kubernetes`` client.

The client is synchronous, so calls run in a thread pool and the pod watch runs in its own thread,
handing events to the event loop with ``call_soon_threadsafe``. Pods are listed and watched with the
field selector ``status.phase=Pending,spec.nodeName!=`` (bound, not yet running): the API server
reports a pod leaving that selection (Running, Succeeded, Failed) as a DELETED event, so the watch
stays small even in a large cluster. Responses are decoded with msgspec from the raw bytes instead
of the client's slow model deserialisation — which also sidesteps the client's known failure to
deserialise the ``create_namespaced_pod_binding`` response (kubernetes-client/python#547).

Neighbours: ``cluster`` (the interface and the in-memory twin), ``ledger`` (PodState).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec

from scheduler_ext import wire
from scheduler_ext.cluster import BindError, Evicted, EvictionReply, OnEvent, OnList
from scheduler_ext.ledger import PodState
from scheduler_ext.pods import PodFacts, facts_from_wire

log = logging.getLogger(__name__)

BOUND_PENDING = "status.phase=Pending,spec.nodeName!="
WATCH_TIMEOUT_SECONDS = 300  # the server ends each watch after this; we resume from its last rv
RETRY_SECONDS = 2.0


class PodStatus(msgspec.Struct):
    phase: str = ""


class ApiPod(wire.Pod):
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


_decode_list = msgspec.json.Decoder(ApiPodList).decode
_decode_status = msgspec.json.Decoder(ApiStatus).decode


def pod_state(pod: ApiPod, *, deleted: bool = False) -> PodState:
    """A PodState from an API pod object (pure; used for list items and watch events)."""
    spec = pod.spec or wire.PodSpec()
    return PodState(
        facts_from_wire(pod),
        spec.nodeName or "",
        (pod.status or PodStatus()).phase or "",
        deleted=deleted,
    )


def parse_pod_list(body: bytes) -> tuple[list[PodState], str]:
    """The pods and resourceVersion of a raw PodList response."""
    parsed = _decode_list(body)
    pods = [pod_state(p) for p in parsed.items or ()]
    return pods, (parsed.metadata or ListMeta()).resourceVersion


def event_object(event: dict[str, Any]) -> dict[str, Any]:
    obj = event.get("object", event.get("raw_object"))
    return obj if isinstance(obj, dict) else {}


def parse_watch_event(event: dict[str, Any]) -> PodState | None:
    """A PodState from a raw watch event; None for bookmarks and unknown types."""
    kind = event.get("type")
    if kind not in ("ADDED", "MODIFIED", "DELETED"):
        return None
    # Watch.stream(deserialize=False) yields the parsed line: {"type", "object"}.
    pod = msgspec.convert(event_object(event), ApiPod)
    return pod_state(pod, deleted=kind == "DELETED")


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
        api_client = client.ApiClient(configuration)
        self._api = client.CoreV1Api(api_client)
        self._policy = client.PolicyV1Api(api_client)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")
        self._stop = threading.Event()

    # -- bind ------------------------------------------------------------------------------

    def _bind_sync(self, namespace: str, name: str, uid: str, node: str) -> None:
        c = self._client
        body = c.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=c.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None),
            target=c.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            resp: Any = self._api.create_namespaced_pod_binding(
                name=name, namespace=namespace, body=body, _preload_content=False
            )
            resp.release_conn()
        except c.ApiException as exc:
            raise BindError(
                f"binding {namespace}/{name} to {node} failed: {api_error_message(exc)}"
            ) from exc
        except Exception as exc:  # connection errors, timeouts: report, never crash the server
            raise BindError(f"binding {namespace}/{name} to {node} failed: {exc}") from exc

    async def bind(self, pod: PodFacts, node: str) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            self._pool, self._bind_sync, pod.namespace, pod.name, pod.uid, node
        )

    # -- repack: evictions and the objects a plan is checked against -----------------------

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

    def _list_objects_sync(self) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for kind, call in (
            ("Node", self._api.list_node),
            ("Pod", self._api.list_pod_for_all_namespaces),
            ("PodDisruptionBudget", self._policy.list_pod_disruption_budget_for_all_namespaces),
        ):
            resp: Any = call(_preload_content=False)
            try:
                listed = json.loads(resp.data)
            finally:
                resp.release_conn()
            for item in listed.get("items") or []:
                item["kind"] = kind  # list items carry no kind of their own
                items.append(item)
        return {"apiVersion": "v1", "kind": "List", "items": items}

    async def list_objects(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._list_objects_sync)

    # -- watch -----------------------------------------------------------------------------

    def _list_sync(self) -> tuple[list[PodState], str]:
        resp: Any = self._api.list_pod_for_all_namespaces(
            field_selector=BOUND_PENDING, _preload_content=False
        )
        try:
            return parse_pod_list(resp.data)
        finally:
            resp.release_conn()

    def _watch_thread(
        self, loop: asyncio.AbstractEventLoop, on_list: OnList, on_event: OnEvent
    ) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            try:
                pods, version = self._list_sync()
                loop.call_soon_threadsafe(on_list, pods)
                while not self._stop.is_set():
                    w = watch.Watch()
                    for event in w.stream(
                        self._api.list_pod_for_all_namespaces,
                        field_selector=BOUND_PENDING,
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=WATCH_TIMEOUT_SECONDS,
                        deserialize=False,
                    ):
                        if self._stop.is_set():
                            w.stop()
                            break
                        state = parse_watch_event(event)
                        if state is not None:
                            loop.call_soon_threadsafe(on_event, state)
                        meta = event_object(event).get("metadata") or {}
                        version = meta.get("resourceVersion") or version
            except Exception as exc:
                # 410 Gone (history compacted) and connection failures alike: relist, since
                # events may have been missed; reconcile() repairs the ledger from the list.
                if self._stop.is_set():
                    return
                if isinstance(exc, KeyError):
                    # The client's own ERROR-event branch (410 Gone) expects a key that
                    # deserialize=False does not provide; either way the answer is to relist.
                    log.info("pod watch got an error event (history expired?), relisting")
                else:
                    log.warning("pod watch failed, relisting: %s", exc)
                self._stop.wait(RETRY_SECONDS)

    async def run_pod_watch(self, on_list: OnList, on_event: OnEvent) -> None:
        loop = asyncio.get_running_loop()
        thread = threading.Thread(
            target=self._watch_thread, args=(loop, on_list, on_event), daemon=True, name="pod-watch"
        )
        thread.start()
        try:
            await asyncio.Event().wait()
        finally:
            self._stop.set()

    async def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
