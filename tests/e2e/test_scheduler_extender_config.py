"""kube-scheduler accepts and uses the extender entry that carico_app.schedconfig generates.

The extender here is a fake (a recording HTTP server in this file that passes every node): it
exists only to show the real kube-scheduler calling the verbs the generated configuration names,
in both nodeCacheCapable modes, before the Carico extender takes its place in the e2e suite.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes
import pytest
from e2e_controlplane import ControlPlane, wait_for
from fake_kubelet import FakeKubelet

from carico_app.schedconfig import CARICO_PROFILE, ExtenderConfig

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class FakeExtender:
    """Records each call as (verb, pod name, sent Nodes?, sent NodeNames?); binds as asked."""

    def __init__(self, core: kubernetes.client.CoreV1Api) -> None:
        self.calls: list[tuple[str, str, bool, bool]] = []
        self.core = core
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                verb = self.path.rsplit("/", 1)[-1]
                reply = outer.handle(verb, body)
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/fake"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, verb: str, body: dict[str, Any]) -> Any:
        if verb in ("filter", "prioritize"):
            pod = body["Pod"]["metadata"]["name"]
            nodes, names = body["Nodes"], body["NodeNames"]
            self.calls.append((verb, pod, nodes is not None, names is not None))
            candidates = (
                names if names is not None else [n["metadata"]["name"] for n in nodes["items"]]
            )
            if verb == "filter":
                if names is not None:
                    return {"NodeNames": candidates, "FailedNodes": {}, "Error": ""}
                return {"Nodes": nodes, "FailedNodes": {}, "Error": ""}
            return [{"Host": n, "Score": 0} for n in candidates]
        if verb == "bind":
            self.calls.append((verb, body["PodName"], False, False))
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": body["PodName"], "uid": body["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": body["Node"]},
            }
            try:
                self.core.create_namespaced_pod_binding(
                    body["PodName"], body["PodNamespace"], binding, _preload_content=False
                )
            except kubernetes.client.ApiException as exc:
                return {"Error": f"binding failed: {exc.status}"}
            return {"Error": ""}
        self.calls.append((verb, "", False, False))
        return {"NodeNameToMetaVictims": {}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_extender(api_client: kubernetes.client.ApiClient) -> Iterator[FakeExtender]:
    ext = FakeExtender(kubernetes.client.CoreV1Api(api_client))
    yield ext
    ext.close()


def _pod(name: str, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.invalid/x:1"}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize("node_cache_capable", [False, True])
def test_scheduler_calls_the_configured_extender(
    control_plane: ControlPlane,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
    fake_extender: FakeExtender,
    namespace: str,
    node_cache_capable: bool,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    control_plane.restart_scheduler(
        [ExtenderConfig(fake_extender.url, node_cache_capable=node_cache_capable)]
    )
    try:
        core.create_namespaced_pod(namespace, _pod("via-extender", CARICO_PROFILE))
        core.create_namespaced_pod(namespace, _pod("default-profile", None))
        for name in ("via-extender", "default-profile"):
            wait_for(
                lambda n=name: core.read_namespaced_pod(n, namespace).status.phase == "Running",
                60,
                f"{name} Running",
            )
    finally:
        control_plane.restart_scheduler([])  # the session's scheduler goes back to no extender
    calls = fake_extender.calls
    for pod in ("via-extender", "default-profile"):
        verbs = {verb for verb, name, _, _ in calls if name == pod}
        # Three feasible nodes, so prioritize runs too; the extender binds every pod it sees.
        # Extenders are global in kube-scheduler: the default profile's pod goes through it too.
        assert verbs == {"filter", "prioritize", "bind"}, (pod, calls)
    sent = {(nodes, names) for verb, _, nodes, names in calls if verb in ("filter", "prioritize")}
    # nodeCacheCapable decides the request shape: names only, or full Node objects only.
    assert sent == ({(False, True)} if node_cache_capable else {(True, False)})
