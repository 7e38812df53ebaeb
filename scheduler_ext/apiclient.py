"""Bindings and pod watches on the event loop, over kept-alive connections to the API server.

Carico binds every pod it admits (docs/architecture.md#reservations), so a binding is on the path
of every pod. Through the official client a binding cost the extender about 2 ms of CPU: a worker
thread, the client's argument validation and models, urllib3, and the GIL handed back and forth
with the event loop. Here the Binding is a few hundred bytes of JSON posted with aiohttp (already
the extender's HTTP server) on the loop itself, with a pool of kept-alive TLS connections; the
official client's ``Configuration`` still supplies the server, the CA, a client certificate and
the bearer token (refreshed by its own hook, as for a projected service-account token).

The pod watches (list, then watch from the list's resourceVersion, and list again after any
failure) run here too: in a thread of the official client, each event took the GIL from the loop
in the middle of kube-scheduler's calls, and a watch of Pending pods sees several events per pod.

Neighbours: ``kube`` (the cluster interface that binds through this), ``cluster`` (BindError).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import msgspec

from scheduler_ext.cluster import BindError

log = logging.getLogger(__name__)
T = TypeVar("T")

WATCH_TIMEOUT_SECONDS = 300  # the server ends each watch after this; we resume from its last rv
RETRY_SECONDS = 2.0
# A service-account token is rotated well before it expires (after 80 % of an hour, at least), so
# taking the token again every few seconds keeps a rotated one in use long before the old one ends.
HEADERS_FOR_S = 5.0

# kube-scheduler gives up on an extender's bind after its httpTimeout (5 s by default); a binding
# still in flight long after that has failed for it anyway.
BIND_TIMEOUT_S = 30.0


class _Status(msgspec.Struct):
    message: str = ""
    reason: str = ""


_decode_status = msgspec.json.Decoder(_Status).decode


def status_message(status: int, body: bytes) -> str:
    """``"409 Conflict: the message"`` from an API error response (its ``Status``), else the
    HTTP status and the start of the body. Pure.

    >>> status_message(404, b'{"kind":"Status","reason":"NotFound","message":"pod x not found"}')
    '404 NotFound: pod x not found'
    >>> status_message(502, b"bad gateway")
    "502 b'bad gateway'"
    """
    try:
        parsed = _decode_status(body)
        if parsed.message:
            return f"{status} {parsed.reason}: {parsed.message}"
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    return f"{status} {body[:200]!r}"


def binding_body(namespace: str, name: str, uid: str, node: str) -> bytes:
    """The v1 Binding of a pod to a node; the uid (when known) makes the API server refuse a pod
    that replaced the one decided on under the same name. Pure."""
    meta: dict[str, str] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return msgspec.json.encode(
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
    )


def ssl_context_of(configuration: Any) -> ssl.SSLContext | bool:
    """The TLS settings of an official-client ``Configuration`` (False: not verified)."""
    if not configuration.host.startswith("https://"):
        return False
    if not configuration.verify_ssl:
        return False
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


class WatchError(Exception):
    """The watch must start again from a new list (an ERROR event: history expired)."""


def split_lines(buffer: bytearray, chunk: bytes) -> list[bytes]:
    """Append ``chunk`` to ``buffer`` and take out the complete lines (without their newline),
    leaving a partial last line in ``buffer``. Pure.

    >>> buf = bytearray(b'{"a"')
    >>> split_lines(buf, b':1}\\n{"b":2}\\n{"c"'), bytes(buf)
    ([b'{"a":1}', b'{"b":2}'], b'{"c"')
    """
    buffer += chunk
    end = buffer.rfind(b"\n")
    if end < 0:
        return []
    lines = [bytes(line) for line in buffer[:end].split(b"\n") if line.strip()]
    del buffer[: end + 1]
    return lines


class Binder:
    """Bindings and watches over one aiohttp session, made on first use on the running loop."""

    def __init__(self, configuration: Any, connections: int = 16) -> None:
        self.configuration = configuration
        self.connections = connections
        self.host = configuration.host.rstrip("/")
        self._ssl = ssl_context_of(configuration)
        self._session: aiohttp.ClientSession | None = None
        self._cached_headers: dict[str, str] = {}
        self._headers_at: float | None = None

    def _headers(self) -> dict[str, str]:
        # The client's own auth settings: its token under whichever key the loader used, after
        # its refresh hook (a rotated service-account token) has run. The hook re-reads its
        # configuration each time, so that happens at most every HEADERS_FOR_S, not per pod.
        now = time.monotonic()
        if self._headers_at is None or now - self._headers_at >= HEADERS_FOR_S:
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            for setting in self.configuration.auth_settings().values():
                if setting.get("in") == "header" and setting.get("value"):
                    headers[setting["key"]] = setting["value"]
            self._cached_headers, self._headers_at = headers, now
        return self._cached_headers

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, ssl=self._ssl),
                timeout=aiohttp.ClientTimeout(total=BIND_TIMEOUT_S),
            )
        return self._session

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod, or raise BindError with the API server's own words."""
        await self._write(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
            binding_body(namespace, name, uid, node),
            f"binding {namespace}/{name} to {node} failed",
        )

    async def annotate(self, namespace: str, name: str, uid: str, key: str, value: str) -> None:
        """Set one annotation on the pod (a merge patch; the uid is its precondition: a pod
        recreated under the name is left alone). Raises BindError with the API server's words."""
        meta: dict[str, object] = {"annotations": {key: value}}
        if uid:
            meta["uid"] = uid
        await self._write(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            msgspec.json.encode({"metadata": meta}),
            f"annotating {namespace}/{name} failed",
            content_type="application/merge-patch+json",
        )

    async def _write(
        self, method: str, path: str, data: bytes, what: str, content_type: str = ""
    ) -> None:
        """One write to the API server; any failure is a BindError saying ``what`` and why."""
        headers = self._headers()
        if content_type:
            headers = {**headers, "Content-Type": content_type}
        try:
            async with self._session_now().request(
                method,
                f"{self.host}{path}",
                data=data,
                headers=headers,
                proxy=self.configuration.proxy or None,
            ) as resp:
                body = await resp.read()
                if resp.status >= 300:
                    raise BindError(f"{what}: {status_message(resp.status, body)}")
        except BindError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise BindError(f"{what}: {type(exc).__name__}: {exc}") from exc

    async def _get(self, path: str, query: dict[str, str]) -> bytes:
        async with self._session_now().get(
            f"{self.host}{path}?{urlencode(query)}",
            headers=self._headers(),
            proxy=self.configuration.proxy or None,
        ) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise WatchError(f"list {path}: {status_message(resp.status, body)}")
            return body

    async def list_then_watch(
        self,
        path: str,
        selector: str,
        parse_list: Callable[[bytes], tuple[list[T], str]],
        parse_line: Callable[[bytes], tuple[str, str, T | None]],
        on_list: Callable[[list[T]], None],
        on_event: Callable[[T], None],
    ) -> None:
        """List ``path`` with the field ``selector`` and hand the items to ``on_list``; then watch
        from the list's resourceVersion and hand the item ``parse_line`` makes of each event line
        (with the line's type and resourceVersion) to ``on_event``. After a failure (410 Gone, a
        dropped connection) wait a moment and list again, since events may have been missed.
        Runs until cancelled."""
        while True:
            try:
                items, version = parse_list(await self._get(path, {"fieldSelector": selector}))
                on_list(items)
                while True:
                    version = await self._watch(path, selector, version, parse_line, on_event)
            except asyncio.CancelledError:
                raise
            except WatchError as exc:
                log.info("watch of %s (%s) ended, listing again: %s", path, selector, exc)
            except Exception as exc:
                log.warning("watch of %s (%s) failed, listing again: %s", path, selector, exc)
            await asyncio.sleep(RETRY_SECONDS)

    async def _watch(
        self,
        path: str,
        selector: str,
        version: str,
        parse_line: Callable[[bytes], tuple[str, str, T | None]],
        on_event: Callable[[T], None],
    ) -> str:
        """One watch request until the server ends it; returns the last resourceVersion seen."""
        query = {
            "watch": "1",
            "fieldSelector": selector,
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
        }
        async with self._session_now().get(
            f"{self.host}{path}?{urlencode(query)}",
            headers=self._headers(),
            proxy=self.configuration.proxy or None,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=WATCH_TIMEOUT_SECONDS + 60),
        ) as resp:
            if resp.status != 200:
                raise WatchError(f"watch: {status_message(resp.status, await resp.read())}")
            buffer = bytearray()
            async for chunk in resp.content.iter_any():
                for line in split_lines(buffer, chunk):
                    kind, seen, state = parse_line(line)
                    if kind == "ERROR":
                        raise WatchError(f"error event: {line[:300]!r}")
                    if state is not None:
                        on_event(state)
                    version = seen or version
        return version

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
