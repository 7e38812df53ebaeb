"""The authoritative pod count: a Kubernetes API watch of the pods on this node.

Design: docs/architecture.md#pod-counting.

Lists then watches pods with ``fieldSelector=spec.nodeName=<node>`` and feeds
:class:`agent.pods.PodTable`. A watch that expires (HTTP 410 Gone: the resource version is too old)
is answered with a fresh list; any other failure is retried with exponential backoff and jitter.
The official client is synchronous, so the watch runs in its own thread and reports through a
callback ``on_pods(count, changed, classes)``, ``classes`` the running workload pods by uid with
their classes when something changed (else None); the caller hops back onto its event loop. This
module is imported only when Kubernetes is in use: ``--no-kube`` and ``--standalone`` never load
the client.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agent.backoff import Backoff
from agent.pods import PodTable, pod_info_from_dict
from carico.pods import PodClass

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 300  # the server ends each watch after this; the loop resumes from the last rv
REQUEST_TIMEOUT_S = 30.0

OnPods = Callable[[int, bool, Mapping[str, PodClass] | None], None]


def load_api(kubeconfig: str | None) -> Any:
    """A ``CoreV1Api``: in-cluster configuration, else ``kubeconfig`` (or the default file)."""
    from kubernetes import client, config

    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
    except (config.ConfigException, OSError) as exc:
        raise ValueError(
            f"cannot configure the Kubernetes client ({exc}); run in a pod, pass --kubeconfig, "
            "or count no pods with --no-kube"
        ) from exc
    return client.CoreV1Api()


class PodWatcher:
    """Keeps ``table`` in sync with the API; call :meth:`start` once, :meth:`stop` to end."""

    def __init__(
        self,
        api: Any,
        node: str,
        on_pods: OnPods,
        *,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._api = api
        self._node = node
        self._on_pods = on_pods
        self._backoff = backoff or Backoff(rng=rng or random.Random())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self.table = PodTable()
        self.relists = 0
        self.errors = 0

    @property
    def selector(self) -> str:
        return f"spec.nodeName={self._node}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout)

    def _relist(self) -> str:
        resp = self._api.list_pod_for_all_namespaces(
            field_selector=self.selector,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT_S,
        )
        body = json.loads(resp.data)
        changed = self.table.replace(pod_info_from_dict(p) for p in body.get("items") or [])
        self.relists += 1
        self._notify(changed)
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    def _run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                self._watch = watch.Watch()
                for event in self._watch.stream(
                    self._api.list_pod_for_all_namespaces,
                    field_selector=self.selector,
                    resource_version=rv,
                    timeout_seconds=WATCH_TIMEOUT_S,
                    allow_watch_bookmarks=True,
                ):
                    # The client's ERROR (410) handling needs its default deserialisation; the
                    # event keeps the wire form in raw_object, which is what PodInfo reads.
                    kind = event.get("type")
                    obj = event.get("raw_object") or {}
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if new_rv:
                        rv = str(new_rv)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._notify(self.table.apply(kind, pod_info_from_dict(obj)))
                    if self._stop.is_set():
                        break
                self._backoff.reset()
            except ApiException as exc:
                if exc.status == 410:
                    log.info("pod watch expired (410 Gone); relisting")
                    rv = None
                    continue
                self._failed(exc)
                rv = None
            except Exception as exc:  # network errors come in many types; all mean "retry"
                self._failed(exc)
                rv = None

    def _notify(self, changed: bool) -> None:
        self._on_pods(self.table.count, changed, self.table.classes if changed else None)

    def _failed(self, exc: BaseException) -> None:
        self.errors += 1
        delay = self._backoff.next_delay()
        log.warning("pod watch failed (%r); retrying in %.1f s", exc, delay)
        self._stop.wait(delay)
