"""Bindings sent to the API server from the event loop, over kept-alive connections.

Carico binds every pod it admits (docs/architecture.md#reservations), so a binding is on the path
of every pod. Through the official client a binding cost the extender about 2 ms of CPU: a worker
thread, the client's argument validation and models, urllib3, and the GIL handed back and forth
with the event loop. Here the Binding is a few hundred bytes of JSON posted with aiohttp (already
the extender's HTTP server) on the loop itself, with a pool of kept-alive TLS connections; the
official client's ``Configuration`` still supplies the server, the CA, a client certificate and
the bearer token (refreshed by its own hook, as for a projected service-account token).

Neighbours: ``kube`` (the cluster interface that binds through this), ``cluster`` (BindError).
"""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
import msgspec

from scheduler_ext.cluster import BindError

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


class Binder:
    """Posts Bindings with one aiohttp session, made on first use on the running loop."""

    def __init__(self, configuration: Any, connections: int = 16) -> None:
        self.configuration = configuration
        self.connections = connections
        self.host = configuration.host.rstrip("/")
        self._ssl = ssl_context_of(configuration)
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        # The client's own auth settings: its token under whichever key the loader used, after
        # its refresh hook (a rotated service-account token) has run.
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, ssl=self._ssl),
                timeout=aiohttp.ClientTimeout(total=BIND_TIMEOUT_S),
            )
        return self._session

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod, or raise BindError with the API server's own words."""
        what = f"binding {namespace}/{name} to {node} failed"
        url = f"{self.host}/api/v1/namespaces/{namespace}/pods/{name}/binding"
        try:
            async with self._session_now().post(
                url,
                data=binding_body(namespace, name, uid, node),
                headers=self._headers(),
                proxy=self.configuration.proxy or None,
            ) as resp:
                body = await resp.read()
                if resp.status >= 300:
                    raise BindError(f"{what}: {status_message(resp.status, body)}")
        except BindError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise BindError(f"{what}: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
