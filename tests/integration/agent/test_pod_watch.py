"""The pod watch with the real Kubernetes client against a fake API server on loopback."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client

from agent.kube_watch import PodWatcher

from .conftest import wait_for
from .fake_apiserver import FakeApiServer, pod


@pytest.mark.slow  # a real HTTP watch thread; several seconds on a loaded machine
async def test_watch_counts_workload_pods_and_relists_after_410() -> None:
    server = FakeApiServer()
    await server.start()
    server.put(pod("a"))
    server.put(pod("ds", owner="DaemonSet"))
    calls: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def on_pods(count: int, changed: bool) -> None:  # called on the watch thread
        with lock:
            calls.append((count, changed))

    config = client.Configuration(host=f"http://127.0.0.1:{server.port}")
    api = client.CoreV1Api(client.ApiClient(config))
    watcher = PodWatcher(api, "node-a", on_pods)
    watcher.start()
    try:
        await wait_for(lambda: server.watchers == 1)
        assert calls == [(1, True)]  # the initial list: one workload pod, the DaemonSet pod not
        assert server.requests[0]["fieldSelector"] == "spec.nodeName=node-a"
        assert server.requests[1]["resourceVersion"] == "102"  # watches from the list's version

        server.put(pod("b", phase="Pending"))
        server.put(pod("b"))
        await wait_for(lambda: len(calls) == 3)
        assert calls[1:] == [(1, True), (2, True)]  # created, then running: both are churn

        # Events missed while the watch was down (deleted silently), then the watch expires.
        server.delete("a", silent=True)
        server.expire_watches()
        await wait_for(lambda: watcher.relists == 2 and server.watchers == 1)
        await wait_for(lambda: len(calls) == 4)
        assert calls[3] == (1, True)  # the relist found the change
        assert watcher.errors == 0  # a 410 is routine, not an error

        server.put(pod("ds", owner="DaemonSet", phase="Failed"))  # not a workload pod
        server.delete("b")
        await wait_for(lambda: len(calls) == 6)
        assert calls[4:] == [(1, False), (0, True)]
    finally:
        watcher.stop(timeout=0)
        await server.stop()
