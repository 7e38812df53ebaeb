"""The KubeSchedulerConfiguration that runs the real kube-scheduler with Carico as its extender.

One definition serves both the shipped deploy manifests and the end-to-end test bed, so what is
tested is what is shipped. The result is a plain dict in the ``kubescheduler.config.k8s.io/v1``
schema; :func:`render` turns it into JSON, which kube-scheduler reads as YAML (JSON is a subset).

Two profiles are defined: ``default-scheduler`` (kube-scheduler's own) and ``carico-scheduler``,
which teams opt into with ``spec.schedulerName``. Extenders are global in kube-scheduler: they are
called for the pods of every profile, so the extender itself passes through pods whose
``schedulerName`` it does not own. Field names and rules follow kube-scheduler's
``config/v1`` types and validation: ``weight`` must be positive when a prioritize verb is set and
has no default, and at most one extender may bind.

No ``NodeResourcesFit`` scoring strategy is configured: packing or spreading for Carico's pods is
the extender's ``--score-shape`` (the points of ``RequestedToCapacityRatio``, applied to measured
load: docs/architecture.md#score-shape), whose 0..10 score kube-scheduler multiplies by 10 and by
the extender's ``weight`` and adds to its own plugins' scores on requests.

Pure: no I/O. Neighbours: ``scheduler_ext`` serves the verbs named here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "kubescheduler.config.k8s.io/v1"
DEFAULT_PROFILE = "default-scheduler"
CARICO_PROFILE = "carico-scheduler"


@dataclass(frozen=True)
class ManagedResource:
    """An extended resource the extender manages; only pods requesting one are sent to it."""

    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class ExtenderConfig:
    """One ``extenders[]`` entry. An empty verb leaves that call out (kube-scheduler skips it)."""

    url_prefix: str
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    bind_verb: str = "bind"
    preempt_verb: str = "preempt"
    weight: int = 1
    node_cache_capable: bool = False
    ignorable: bool = False
    http_timeout_s: float = 5.0
    managed_resources: tuple[ManagedResource, ...] = field(default_factory=tuple)
    # tlsConfig file paths (PEM) for an https urlPrefix: the CA to verify the extender with, and a
    # client certificate and key kube-scheduler presents to it. Empty: left out.
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""

    def validate(self) -> None:
        """Raise ValueError for what kube-scheduler would refuse at start-up."""
        if not self.url_prefix.startswith(("http://", "https://")):
            raise ValueError(f"extender urlPrefix must be an http(s) URL: {self.url_prefix!r}")
        if self.prioritize_verb and self.weight <= 0:
            raise ValueError(f"extender weight must be > 0 with a prioritize verb: {self.weight}")
        if self.http_timeout_s <= 0:
            raise ValueError(f"extender httpTimeout must be > 0: {self.http_timeout_s}")
        names = [r.name for r in self.managed_resources]
        if len(set(names)) != len(names):
            raise ValueError(f"extender managedResources repeat a name: {names}")
        if self._tls_files() and not self.url_prefix.startswith("https://"):
            raise ValueError(f"extender TLS files need an https urlPrefix: {self.url_prefix!r}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("extender tls cert and key files go together")

    def _tls_files(self) -> dict[str, str]:
        files = {
            "caFile": self.tls_ca_file,
            "certFile": self.tls_cert_file,
            "keyFile": self.tls_key_file,
        }
        return {key: path for key, path in files.items() if path}

    def to_dict(self) -> dict[str, Any]:
        self.validate()
        out: dict[str, Any] = {"urlPrefix": self.url_prefix}
        for key, verb in (
            ("filterVerb", self.filter_verb),
            ("prioritizeVerb", self.prioritize_verb),
            ("preemptVerb", self.preempt_verb),
            ("bindVerb", self.bind_verb),
        ):
            if verb:
                out[key] = verb
        if self.prioritize_verb:
            out["weight"] = self.weight
        # Go's time.Duration text form; milliseconds keep sub-second timeouts exact.
        out["httpTimeout"] = f"{round(self.http_timeout_s * 1000)}ms"
        out["nodeCacheCapable"] = self.node_cache_capable
        out["ignorable"] = self.ignorable
        out["enableHTTPS"] = self.url_prefix.startswith("https://")
        if self._tls_files():
            out["tlsConfig"] = self._tls_files()
        if self.managed_resources:
            out["managedResources"] = [
                {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
                for r in self.managed_resources
            ]
        return out


# The pod back-off of Carico's kube-scheduler: 1 s, and at most POD_MAX_BACKOFF_SECONDS
# (kube-scheduler's defaults are 1 and 10). A pod the extender turns away waits for measured room,
# which frees within seconds as pods start and end; kube-scheduler requeues such a pod on every
# cluster event, so its back-off grows with every retry, and at 10 s (or 2 s) it slept through the
# room that freed. The cost: a pending pod is tried about once a second
# (docs/architecture.md#decisions has the measurement).
POD_INITIAL_BACKOFF_SECONDS = 1
POD_MAX_BACKOFF_SECONDS = 1


def scheduler_configuration(
    *,
    kubeconfig: str | None = None,
    extenders: Sequence[ExtenderConfig] = (),
    qps: float = 50.0,
    burst: int = 100,
    leader_elect: bool = True,
    profiles: Sequence[str] = (DEFAULT_PROFILE, CARICO_PROFILE),
    lease: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Build the KubeSchedulerConfiguration.

    ``kubeconfig`` None means in-cluster credentials (the deployed case). ``qps``/``burst`` default
    to kube-scheduler's own defaults; raise them where the API server is not the bottleneck under
    test. ``leader_elect`` should stay on for replicated deployments; ``lease`` (namespace, name)
    names its Lease, which must differ from the cluster's own kube-scheduler lease
    (kube-system/kube-scheduler) so that the two schedulers never take turns at being leader.

    >>> cfg = scheduler_configuration(extenders=[ExtenderConfig("http://127.0.0.1:1/x")])
    >>> [p["schedulerName"] for p in cfg["profiles"]]
    ['default-scheduler', 'carico-scheduler']
    >>> cfg["extenders"][0]["bindVerb"], cfg["extenders"][0]["httpTimeout"]
    ('bind', '5000ms')
    """
    if qps <= 0 or burst <= 0:
        raise ValueError(f"client qps and burst must be positive: qps={qps} burst={burst}")
    if not profiles or len(set(profiles)) != len(profiles):
        raise ValueError(f"scheduler profiles must be non-empty and unique: {list(profiles)}")
    if sum(1 for e in extenders if e.bind_verb) > 1:
        raise ValueError("at most one extender may set a bind verb")
    leader: dict[str, Any] = {"leaderElect": leader_elect}
    if lease is not None:
        namespace, name = lease
        if not namespace or not name:
            raise ValueError(f"the leader-election lease needs a namespace and a name: {lease}")
        leader.update(resourceLock="leases", resourceNamespace=namespace, resourceName=name)
    client: dict[str, Any] = {"qps": qps, "burst": burst}
    if kubeconfig is not None:
        client["kubeconfig"] = kubeconfig
    cfg: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": leader,
        "clientConnection": client,
        "podInitialBackoffSeconds": POD_INITIAL_BACKOFF_SECONDS,
        "podMaxBackoffSeconds": POD_MAX_BACKOFF_SECONDS,
        "profiles": [{"schedulerName": name} for name in profiles],
    }
    if extenders:
        cfg["extenders"] = [e.to_dict() for e in extenders]
    return cfg


def render(cfg: dict[str, Any]) -> str:
    """Serialise a configuration for ``kube-scheduler --config`` (JSON is valid YAML)."""
    return json.dumps(cfg, indent=2, sort_keys=False) + "\n"
