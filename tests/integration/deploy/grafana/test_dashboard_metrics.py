"""Every metric the shipped Grafana dashboard queries is in the ``/metrics`` output of the running
components: the aggregator, the extender (``--no-kube``) and an agent reading this machine's /proc,
each a real ``carico`` process on 127.0.0.1 talking to the others.

Series that only exist once something happened are made to happen, as in a cluster: a capacity
report, filter/prioritize/bind/preempt calls (one candidate node has never reported, which is a
stale-data decision), a checkpoint write. Repack series are declared from the first scrape.
The labels the queries filter or group by, and those their legends show, must be on those series.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from carico_app.demo import Children, free_port

from .grafana_queries import label_uses, load, metric_names, queries, targets

pytestmark = pytest.mark.slow

HOST = "127.0.0.1"
NODE = "it-node"
# Bounds how long a hang takes to show on a loaded 2-core machine; nothing measures it.
WAIT = 60.0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        text: str = reply.read().decode()
        return text


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def _wait(what: str, check: Callable[[], Any], children: Children) -> Any:
    deadline = time.monotonic() + WAIT
    last: Any = None
    while time.monotonic() < deadline:
        dead = children.exited()
        assert not dead, f"{dead[0].name} exited with {dead[0].proc.returncode}"
        try:
            last = check()
        except (OSError, urllib.error.URLError) as exc:  # not listening yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def _series(text: str) -> dict[str, set[str]]:
    """Sample name -> its label names, in an exposition (a family with no sample does not count)."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


class Stack:
    """The three components as processes; the servers pick free ports and say which."""

    def __init__(self, workdir: Path) -> None:
        self.children = Children()
        self.workdir = workdir
        self.metrics: dict[str, str] = {}
        self.extender = ""

    def start(self) -> None:
        py = [sys.executable, "-m", "carico_app.cli"]
        self._start(
            "aggregator",
            [*py, "aggregator", f"--listen={HOST}:0", f"--ops-listen={HOST}:0"]
            + [f"--checkpoint={self.workdir / 'models.ckpt'}", "--checkpoint-interval=0.5"]
            + ["--log-level=info", "--log-format=json"],
        )
        serving = self._wait_log("aggregator", self._aggregator_ports)
        agg, agg_ops = serving["grpc_port"], serving["ops_port"]
        self._start(
            "extender",
            [*py, "extender", "--no-kube", "--event-loop=asyncio", f"--host={HOST}"]
            + ["--port=0", f"--grpc-host={HOST}", "--grpc-port=0"],
        )
        ext_http, ext_grpc = self._wait_log("extender", self._extender_ports)
        # The agent's metrics port cannot be 0 (that turns them off): a free one, chosen now.
        agent_ops = free_port(HOST)
        self._start(
            "agent",
            [*py, "agent", "--no-kube", f"--node-name={NODE}", f"--aggregator={HOST}:{agg}"]
            + [f"--extender={HOST}:{ext_grpc}", f"--metrics-host={HOST}"]
            + [f"--metrics-port={agent_ops}", "--exchange-interval=0.5"],
        )
        self.metrics = {
            "aggregator": f"http://{HOST}:{agg_ops}/metrics",
            "extender": f"http://{HOST}:{ext_http}/metrics",
            "agent": f"http://{HOST}:{agent_ops}/metrics",
        }
        self.extender = f"http://{HOST}:{ext_http}"

    def _start(self, name: str, argv: list[str]) -> None:
        self.children.start(name, argv, str(self.workdir / f"{name}.log"))

    def _wait_log(self, name: str, parse: Callable[[str], Any]) -> Any:
        log = self.workdir / f"{name}.log"
        return _wait(f"{name} to start serving", lambda: parse(log.read_text()), self.children)

    @staticmethod
    def _aggregator_ports(text: str) -> dict[str, Any] | None:
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a text line, or one still being written
                continue
            if isinstance(entry, dict) and entry.get("msg") == "serving":
                return entry
        return None

    @staticmethod
    def _extender_ports(text: str) -> tuple[int, int] | None:
        found = re.search(r"http://[^:]+:(\d+)/\S* · gRPC CapacityIngest on [^:]+:(\d+)", text)
        return (int(found.group(1)), int(found.group(2))) if found else None

    def scrape(self) -> dict[str, dict[str, set[str]]]:
        return {name: _series(_get(url)) for name, url in self.metrics.items()}

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted(self.workdir.glob("*.log"))
        )


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        s.start()
    except AssertionError as exc:
        s.children.stop()
        raise AssertionError(f"{exc}\n{s.logs()}") from None
    try:
        yield s
    finally:
        s.children.stop()


def _drive_the_extender(base: str) -> None:
    """One pod through every verb, as kube-scheduler would send it."""
    pod = {
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "uid-web-1"},
        "spec": {"schedulerName": "carico-scheduler"},
    }
    args = {"Pod": pod, "Nodes": None, "NodeNames": [NODE, "never-reported"]}
    filtered = _post(f"{base}/scheduler/filter", args)
    assert filtered["Error"] == ""
    scores = _post(f"{base}/scheduler/prioritize", args)
    assert {h["Host"] for h in scores} <= {NODE, "never-reported"}
    victims = {NODE: {"Pods": [], "NumPDBViolations": 0}}
    preempt = {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims}
    assert "NodeNameToMetaVictims" in _post(f"{base}/scheduler/preempt", preempt)
    binding = {"PodName": "web-1", "PodNamespace": "shop", "PodUID": "uid-web-1", "Node": NODE}
    assert "Error" in _post(f"{base}/scheduler/bind", binding)


def test_every_metric_the_dashboard_queries_is_exposed(stack: Stack) -> None:
    try:
        _check_every_metric(stack)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from None


def _check_every_metric(stack: Stack) -> None:
    wanted: dict[str, list[str]] = {}
    for title, expr in queries(load()):
        for name in metric_names(expr):
            wanted.setdefault(name, []).append(title)
    # The agent's first capacity report has reached the extender.
    _wait(
        "the agent's capacity report at the extender",
        lambda: json.loads(_get(f"{stack.extender}/api/v1/nodes")),
        stack.children,
    )
    _drive_the_extender(stack.extender)

    def missing() -> set[str]:
        exposed = set().union(*(set(series) for series in stack.scrape().values()))
        return set(wanted) - exposed

    try:
        _wait("every dashboard metric in /metrics", lambda: not missing(), stack.children)
    except AssertionError as exc:
        gone = {n: wanted[n] for n in sorted(missing())}
        raise AssertionError(f"{exc}; not exposed: {gone}") from None
    # Each family is where the dashboard's rows say it is, not in some other component.
    scraped = stack.scrape()
    for name in wanted:
        component = next(c for c in ("agent", "aggregator", "extender") if name in scraped[c])
        expected = (
            "agent"
            if name.startswith("carico_agent_")
            else "aggregator"
            if name.startswith("carico_aggregator_")
            else "extender"
        )
        assert component == expected, name
    # Every label a query filters or groups by, or its legend shows, is on the series it reads.
    labels: dict[str, set[str]] = {}
    for series in scraped.values():
        for name, names in series.items():
            labels.setdefault(name, set()).update(names)
    for title, expr, legend in targets(load()):
        for metrics, label, how in label_uses(expr, legend):
            assert any(label in labels[m] for m in metrics), (title, how, label, sorted(metrics))
