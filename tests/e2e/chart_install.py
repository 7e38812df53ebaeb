"""Carico installed with ``helm install`` on the real node, as docs/deploying.md tells users to.

:class:`CaricoRelease` creates the namespace ``carico-system`` (pod-security level privileged),
applies the mTLS Secrets ``carico certs --secret yaml`` prints, and runs ``helm install`` of
deploy/helm/carico with the chart's defaults plus real-node-values.yaml (what a node without a
registry, pod network, kube-proxy, cluster DNS or storage provisioner needs) and free ports of this
host. It waits for the agent DaemonSet's pod, the aggregator and the scheduler Deployment (the
kube-scheduler and extender containers) to be Ready, and reads the extender's HTTPS API
(``/api/v1/nodes``) with the CA it issued. :meth:`CaricoRelease.uninstall` removes the release and
the namespace and waits until their pods are gone.

Neighbours: real_node.py (the node and its images), e2e_controlplane.py (the API server, kubectl
and helm binaries from ``make e2e-bin``).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes
from e2e_controlplane import ControlPlane, free_ports, wait_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "carico"
VALUES = Path(__file__).resolve().parent / "real-node-values.yaml"
NAMESPACE = "carico-system"
RELEASE = "carico"
REAL_NODE_LABEL = ("carico.io/real-node", "true")


class CaricoRelease:
    """The chart installed against ``control_plane`` for pods on the real node."""

    def __init__(self, control_plane: ControlPlane, workdir: Path) -> None:
        self.cp = control_plane
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = workdir / "pki"
        (
            self.agent_metrics_port,
            self.aggregator_port,
            self.aggregator_metrics_port,
            self.extender_port,
            self.extender_grpc_port,
            self.kube_scheduler_port,
        ) = free_ports(6)
        self.core = kubernetes.client.CoreV1Api(control_plane.api_client())
        self.apps = kubernetes.client.AppsV1Api(self.core.api_client)

    # ---- tools ------------------------------------------------------------------------------
    def _run(self, *argv: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, check=False, timeout=300
        )
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(argv[:3])} failed: {done.stderr or done.stdout}")
        return done.stdout

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return self._run(
            str(self.cp.bin_dir / "kubectl"),
            f"--kubeconfig={self.cp.kubeconfig}",
            *args,
            stdin=stdin,
        )

    def helm(self, *args: str) -> str:
        return self._run(str(self.cp.bin_dir / "helm"), f"--kubeconfig={self.cp.kubeconfig}", *args)

    # ---- install ----------------------------------------------------------------------------
    def values(self) -> list[str]:
        """The --set overrides on top of real-node-values.yaml: this run's ports and the API
        server's address (the pods use the node's network, so they are the host's ports)."""
        return [
            f"apiServer.host=127.0.0.1,apiServer.port={self.cp.apiserver_port}",
            f"agent.metricsPort={self.agent_metrics_port}",
            f"agent.aggregatorAddress=127.0.0.1:{self.aggregator_port}",
            f"agent.extenderAddress=127.0.0.1:{self.extender_grpc_port}",
            f"aggregator.grpcPort={self.aggregator_port}",
            f"aggregator.metricsPort={self.aggregator_metrics_port}",
            f"scheduler.extender.port={self.extender_port}",
            f"scheduler.extender.grpcPort={self.extender_grpc_port}",
            f"scheduler.kubeScheduler.port={self.kube_scheduler_port}",
        ]

    def install(self, extra: Sequence[str] = ()) -> None:
        self.core.create_namespace(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": NAMESPACE,
                    "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
                },
            }
        )
        secrets = self._run(
            str(Path(sys.executable).parent / "carico"),
            "certs",
            "--secret",
            "yaml",
            "--out",
            str(self.pki),
            # The agents reach the aggregator on 127.0.0.1 (hostNetwork, no cluster DNS); the
            # extender's certificate names 127.0.0.1 already.
            "--extra-san",
            "aggregator=127.0.0.1",
        )
        self.kubectl("apply", "-f", "-", stdin=secrets)
        argv = ["install", RELEASE, str(CHART), f"--namespace={NAMESPACE}", f"--values={VALUES}"]
        for value in [*self.values(), *extra]:
            argv += ["--set", value]
        self.helm(*argv)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Every Carico pod Ready: the agent on the real node, the aggregator, the scheduler."""

        def ready() -> bool:
            ds = self.apps.read_namespaced_daemon_set_status("carico-agent", NAMESPACE).status
            deployments = [
                self.apps.read_namespaced_deployment_status(n, NAMESPACE).status
                for n in ("carico-aggregator", "carico-scheduler")
            ]
            return bool(
                ds.desired_number_scheduled
                and ds.number_ready == ds.desired_number_scheduled
                and all(d.ready_replicas == 1 for d in deployments)
            )

        wait_for(ready, timeout_s, "Carico's pods Ready on the real node", 1.0, self.describe)

    def describe(self) -> str:
        """Each Carico pod's phase and container states (what a failed wait shows)."""
        lines = []
        for pod in self.core.list_namespaced_pod(NAMESPACE).items:
            states = []
            for c in pod.status.container_statuses or []:
                state = c.state.waiting or c.state.terminated
                reason = f"{state.reason}: {(state.message or '')[:300]}" if state else "running"
                states.append(f"{c.name} ready={c.ready} restarts={c.restart_count} {reason}")
            lines.append(
                f"{pod.metadata.name} on {pod.spec.node_name}: {pod.status.phase} {states}"
            )
        return "\n".join(lines) or "(no pods)"

    def pods(self, component: str) -> list[Any]:
        selector = f"app.kubernetes.io/component={component}"
        return list(self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)

    # ---- the extender's API -----------------------------------------------------------------
    def _context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki / "ca.crt"))

    def get(self, path: str, timeout_s: float = 10.0) -> Any:
        return json.loads(self.get_text(path, timeout_s))

    def get_text(self, path: str, timeout_s: float = 10.0) -> str:
        url = f"https://127.0.0.1:{self.extender_port}{path}"
        with urllib.request.urlopen(url, timeout=timeout_s, context=self._context()) as response:
            return str(response.read().decode())

    def nodes(self, timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in self.get("/api/v1/nodes", timeout_s)}

    # ---- uninstall --------------------------------------------------------------------------
    def uninstall(self, timeout_s: float = 180.0) -> None:
        self.helm("uninstall", RELEASE, f"--namespace={NAMESPACE}", "--wait=false")
        self.core.delete_namespace(NAMESPACE)
        self.core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
        wait_for(
            lambda: not self.core.list_namespace(field_selector=f"metadata.name={NAMESPACE}").items,
            timeout_s,
            f"namespace {NAMESPACE} gone",
        )


def log_of(node_logs: Path, pod: Any) -> str:
    """A Carico pod's container output from the node's pod logs (no kubelet API here)."""
    texts = []
    for path in sorted(node_logs.glob(f"{NAMESPACE}_{pod.metadata.name}_*/*/*.log")):
        texts.append(f"== {path.parent.name}\n{path.read_text(errors='replace')[-4000:]}")
    return "\n".join(texts)


__all__ = ["NAMESPACE", "REAL_NODE_LABEL", "CaricoRelease", "log_of"]
