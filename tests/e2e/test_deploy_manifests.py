"""The deploy manifests on the real control plane: rendered, applied, authorised and run.

* The committed kustomize base and overlays are what ``make manifests`` makes of the chart now.
* ``kubectl kustomize`` and ``helm template`` give the same objects, field for field: the base and
  the chart with default values, and each overlay and the chart with that overlay's values.
* The API server accepts the base and the chart by server-side apply, and every overlay by a
  server-side dry run.
* RBAC: SubjectAccessReviews for the verbs each component uses, and some it must never have.
* The shipped KubeSchedulerConfiguration, read back from the applied ConfigMap, runs the real
  kube-scheduler as the carico-scheduler ServiceAccount: it takes its Lease in carico-system and
  schedules a pod through the Carico extender (which runs as that ServiceAccount too).

The prometheus-operator and cert-manager CRDs are stand-ins (this API server has neither
operator): each schema types exactly the fields the chart sets, so strict field validation, which
server-side apply uses, still rejects a misspelt or misplaced field.
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from e2e_controlplane import Component, ControlPlane, free_ports, wait_for
from e2e_extender import CapacityFeed, ExtenderProcess
from fake_kubelet import FakeKubelet, PodCounts, PodCountsRecorder

from carico.tls import write_pair
from carico_app import certs, manifests, schedconfig
from carico_app.schedconfig import CARICO_PROFILE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NS = manifests.NAMESPACE
SERVICE_ACCOUNTS = ("carico-agent", "carico-aggregator", "carico-scheduler")
OVERLAYS = tuple(o.name for o in manifests.OVERLAYS)
Objects = dict[manifests.Key, dict[str, Any]]


@dataclass
class Tools:
    kubectl: Path
    helm: Path
    kubeconfig: Path

    def run(self, *argv: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stderr}{done.stdout}"
        return done.stdout

    def kubectl_run(self, *args: str, stdin: str | None = None) -> str:
        return self.run(str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *args, stdin=stdin)

    def kustomize(self, directory: Path) -> Objects:
        return by_key(self.run(str(self.kubectl), "kustomize", str(directory)))

    def helm_template(self, values: tuple[str, ...] = ()) -> str:
        return manifests.render_chart(str(self.helm), REPO)(values)


def by_key(text: str) -> Objects:
    objects = manifests.parse_objects(text)
    keyed = {manifests.object_key(o): o for o in objects}
    assert len(keyed) == len(objects), "two objects share a kind/namespace/name"
    return keyed


@pytest.fixture(scope="module")
def tools(e2e_bin: Path, control_plane: ControlPlane) -> Tools:
    found = Tools(e2e_bin / "kubectl", e2e_bin / "helm", control_plane.kubeconfig)
    for tool in (found.kubectl, found.helm):
        if not tool.exists():
            pytest.fail(f"{tool} is missing: run `make e2e-bin`", pytrace=False)
    return found


def test_committed_manifests_are_fresh(tools: Tools) -> None:
    files = manifests.all_files(manifests.render_chart(str(tools.helm), REPO))
    assert manifests.stale_files(REPO, files) == [], "run `make manifests` and commit the result"
    assert manifests.extra_files(REPO, files) == [], "run `make manifests` and commit the result"


def test_chart_passes_helm_lint(tools: Tools) -> None:
    out = tools.run(str(tools.helm), "lint", "--strict", str(REPO / manifests.CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("policy.stalePolicy=sometimes", "value must be one of 'fail-open', 'fail-closed'"),
        ("policy.repack.mode=yes", "value must be one of 'off', 'dry-run', 'apply'"),
        ("policy.staleAfter=10", "additional properties 'staleAfter' not allowed"),
        ("features={cpu,disk}", "value must be one of"),
        ("agent.reportKeepaliveSeconds=-1", "reportKeepaliveSeconds"),
        ("agent.fullLevel=1.5", "fullLevel"),
    ],
)
def test_chart_refuses_bad_values(tools: Tools, value: str, complaint: str) -> None:
    argv = [str(tools.helm), "template", "carico", str(REPO / manifests.CHART), "--set", value]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert complaint in done.stderr


@pytest.mark.parametrize("overlay", [None, *OVERLAYS])
def test_kustomize_and_helm_render_the_same_objects(tools: Tools, overlay: str | None) -> None:
    if overlay is None:
        kustomized = tools.kustomize(REPO / "deploy")
        charted = by_key(tools.helm_template())
    else:
        values = next(o.values for o in manifests.OVERLAYS if o.name == overlay)
        kustomized = tools.kustomize(REPO / "deploy" / "overlays" / overlay)
        charted = by_key(tools.helm_template(values))
    assert sorted(kustomized) == sorted(charted)
    for key, obj in kustomized.items():
        assert obj == charted[key], key


def _scheduler_config(objects: Objects) -> dict[str, Any]:
    data = objects[("ConfigMap", NS, "carico-scheduler-config")]["data"]
    return dict(json.loads(data["kube-scheduler-config.json"]))


@pytest.mark.parametrize("replace_default", [False, True])
def test_chart_embeds_the_generated_scheduler_configuration(
    tools: Tools, replace_default: bool
) -> None:
    values = ("scheduler.replaceDefaultScheduler=true",) if replace_default else ()
    rendered = _scheduler_config(by_key(tools.helm_template(values)))
    want = manifests.shipped_scheduler_configuration(replace_default=replace_default)
    assert rendered == want


def test_chart_values_reach_the_scheduler_configuration(tools: Tools) -> None:
    """The chart's substitutions give what carico_app.schedconfig builds for the same options."""
    values = (
        "tls.enabled=false",
        "scheduler.extender.port=8899",
        "scheduler.extender.nodeCacheCapable=false",
        "scheduler.extender.ignorable=false",
        "scheduler.leaderElection.enabled=false",
    )
    rendered = _scheduler_config(by_key(tools.helm_template(values)))
    want = schedconfig.scheduler_configuration(
        extenders=[schedconfig.ExtenderConfig("http://127.0.0.1:8899/scheduler")],
        leader_elect=False,
        profiles=(CARICO_PROFILE,),
        lease=(NS, manifests.LEASE_NAME),
    )
    assert rendered == want


def test_agent_values_reach_its_arguments(tools: Tools) -> None:
    # --set gives a float as a string ("0.8"): the schema takes both forms
    values = ("agent.fullLevel=0.8", "agent.reportKeepaliveSeconds=2.5")
    daemonset = by_key(tools.helm_template(values))[("DaemonSet", NS, "carico-agent")]
    (agent,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert {"--full-level=0.8", "--report-keepalive=2.5"} <= set(agent["args"])
    shipped = by_key(tools.helm_template())[("DaemonSet", NS, "carico-agent")]
    (agent,) = shipped["spec"]["template"]["spec"]["containers"]
    assert {"--full-level=0.85", "--report-keepalive=3"} <= set(agent["args"])


def _extender_env(tools: Tools, values: tuple[str, ...]) -> dict[str, str]:
    deployment = by_key(tools.helm_template(values))[("Deployment", NS, "carico-scheduler")]
    (extender,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    return {e["name"]: e.get("value", "") for e in extender["env"]}


def test_the_score_shape_reaches_the_extender_only_when_set(tools: Tools) -> None:
    """policy.scoreShape and scoreWeights become the extender's environment; unset, neither is
    there (the extender spreads on room)."""

    def env(values: tuple[str, ...]) -> dict[str, str]:
        return _extender_env(tools, values)

    unset = env(())
    assert "CARICO_SCORE_SHAPE" not in unset and "CARICO_SCORE_WEIGHTS" not in unset
    shaped = env(("policy.scoreShape=0:0\\,100:10", "policy.scoreWeights=cpu=3\\,memory=1"))
    assert shaped["CARICO_SCORE_SHAPE"] == "0:0,100:10"
    assert shaped["CARICO_SCORE_WEIGHTS"] == "cpu=3,memory=1"


def test_repack_workers_default_to_the_extender_cpu_limit(tools: Tools) -> None:
    """More CP-SAT threads than the container may use would get the whole container throttled,
    the extender's answers to kube-scheduler with it: by default a solve gets the CPU limit's
    worth, rounded up."""

    def workers(*values: str) -> str:
        return _extender_env(tools, values)["CARICO_REPACK_WORKERS"]

    assert workers() == "2"  # the chart's limit
    assert workers("scheduler.extender.resources.limits.cpu=1500m") == "2"
    assert workers("scheduler.extender.resources.limits.cpu=0.5") == "1"
    assert workers("scheduler.extender.resources.limits.cpu=3") == "3"
    assert workers("scheduler.extender.resources.limits.cpu=null") == "0"  # every core
    assert workers("policy.repack.workers=5") == "5"


def test_cert_manager_certificates_name_what_carico_certs_signs(tools: Tools) -> None:
    objects = by_key(tools.helm_template(("certManager.enabled=true",)))
    for leaf in certs.plan(NS):
        secret = certs.secret_name(leaf.component)
        spec = objects[("Certificate", NS, secret)]["spec"]
        assert spec["secretName"] == secret
        assert spec["commonName"] == leaf.common_name
        names = spec.get("dnsNames", []) + spec.get("ipAddresses", [])
        assert sorted(names) == sorted(leaf.hosts), leaf.component
        assert ("server auth" in spec["usages"]) is leaf.server
        assert ("client auth" in spec["usages"]) is leaf.client


# ---- stand-in CRDs ----------------------------------------------------------------------------


def _string() -> dict[str, Any]:
    return {"type": "string"}


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def _strings() -> dict[str, Any]:
    return {"type": "array", "items": _string()}


def _crd(group: str, kind: str, plural: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _object(spec=spec)},
                }
            ],
        },
    }


_LABEL_SELECTOR = _object(
    matchLabels={"type": "object", "additionalProperties": _string()},
)
_ISSUER_REF = _object(name=_string(), kind=_string(), group=_string())
STAND_IN_CRDS = [
    _crd(
        "monitoring.coreos.com",
        "ServiceMonitor",
        "servicemonitors",
        _object(
            selector=_LABEL_SELECTOR,
            namespaceSelector=_object(matchNames=_strings()),
            endpoints={
                "type": "array",
                "items": _object(
                    port=_string(),
                    path=_string(),
                    interval=_string(),
                    honorLabels={"type": "boolean"},
                    scheme=_string(),
                    tlsConfig=_object(
                        serverName=_string(),
                        ca=_object(secret=_object(name=_string(), key=_string())),
                    ),
                ),
            },
        ),
    ),
    _crd(
        "cert-manager.io",
        "Issuer",
        "issuers",
        _object(selfSigned=_object(), ca=_object(secretName=_string())),
    ),
    _crd(
        "cert-manager.io",
        "Certificate",
        "certificates",
        _object(
            isCA={"type": "boolean"},
            commonName=_string(),
            secretName=_string(),
            duration=_string(),
            renewBefore=_string(),
            privateKey=_object(algorithm=_string(), size={"type": "integer"}),
            usages=_strings(),
            dnsNames=_strings(),
            ipAddresses=_strings(),
            issuerRef=_ISSUER_REF,
        ),
    ),
]


# ---- installed ------------------------------------------------------------------------------


def _delete_everything(tools: Tools, core: kubernetes.client.CoreV1Api) -> None:
    # The repack-apply overlay is the base plus its eviction RBAC: deleting it removes all.
    tools.kubectl_run(
        "delete",
        "-k",
        str(REPO / "deploy/overlays/repack-apply"),
        "--ignore-not-found",
        "--wait=false",
    )
    # Pods the controllers made (agents on the fake nodes, the scheduler pod) go at once; the
    # namespace and the volume claim follow.
    core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    wait_for(
        lambda: not core.list_namespace(field_selector=f"metadata.name={NS}").items,
        180,
        f"namespace {NS} gone",
    )


@pytest.fixture(scope="module")
def installed(
    tools: Tools,
    api_client: kubernetes.client.ApiClient,
    fake_kubelet: FakeKubelet,
) -> Iterator[Objects]:
    """The base and then the chart, server-side applied by two field managers.

    Both own every field they set; equal values share ownership, so a second apply without
    conflicts is itself evidence that the chart and the base agree. Everything is deleted again
    at the end so that the agent and scheduler pods on the fake nodes do not outlive the module.
    """
    core = kubernetes.client.CoreV1Api(api_client)
    crds = json.dumps({"apiVersion": "v1", "kind": "List", "items": STAND_IN_CRDS})
    tools.kubectl_run("apply", "--server-side", "-f", "-", stdin=crds)
    names = [f"crd/{c['metadata']['name']}" for c in STAND_IN_CRDS]
    tools.kubectl_run("wait", "--for=condition=Established", "--timeout=120s", *names)
    applied = tools.kubectl_run(
        "apply", "--server-side", "--field-manager=carico-kustomize", "-k", str(REPO / "deploy")
    )
    chart = tools.helm_template()
    tools.kubectl_run(
        "apply", "--server-side", "--field-manager=carico-helm", "-f", "-", stdin=chart
    )
    try:
        assert applied.count("serverside-applied") == len(by_key(chart)), applied
        yield by_key(chart)
    finally:
        _delete_everything(tools, core)


def test_base_and_chart_are_accepted_by_server_side_apply(tools: Tools, installed: Objects) -> None:
    listed = json.loads(
        tools.kubectl_run("get", "-k", str(REPO / "deploy"), "-o", "json", "--show-managed-fields")
    )
    found = {manifests.object_key(o) for o in listed["items"]}
    assert found == set(installed)
    for obj in listed["items"]:
        appliers = {
            entry["manager"]
            for entry in obj["metadata"].get("managedFields", [])
            if entry["operation"] == "Apply"
        }
        # Both applies went through without --force-conflicts, so both own the object's fields.
        assert appliers == {"carico-kustomize", "carico-helm"}, manifests.object_key(obj)


def test_the_controllers_pods_are_admitted(
    api_client: kubernetes.client.ApiClient, installed: Objects
) -> None:
    """Pod admission (pod security at the namespace's level, the priority classes) lets the
    controllers create every pod: an agent per node, the scheduler and the aggregator."""
    apps = kubernetes.client.AppsV1Api(api_client)
    nodes = len(kubernetes.client.CoreV1Api(api_client).list_node().items)

    def created() -> bool:
        agents = apps.read_namespaced_daemon_set_status("carico-agent", NS).status
        counts = [
            apps.read_namespaced_deployment_status(name, NS).status.replicas
            for name in ("carico-scheduler", "carico-aggregator")
        ]
        return agents.current_number_scheduled == nodes and counts == [1, 1]

    wait_for(created, 120, "the agent, scheduler and aggregator pods created")
    pods = kubernetes.client.CoreV1Api(api_client).list_namespaced_pod(NS).items
    agents = [p for p in pods if p.metadata.labels["app.kubernetes.io/component"] == "agent"]
    assert len({p.spec.node_name for p in agents}) == nodes


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_passes_a_server_side_dry_run(
    tools: Tools, installed: Objects, overlay: str
) -> None:
    directory = REPO / "deploy" / "overlays" / overlay
    out = tools.kubectl_run(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",  # the overlay changes fields the base's managers own
        "--field-manager=carico-overlay",
        "-k",
        str(directory),
        "-o",
        "name",
    )
    assert len(out.split()) == len(tools.kustomize(directory)), out


# ---- RBAC -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    account: str
    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def __str__(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        return f"{self.account} {self.verb} {what}{f' {self.name}' if self.name else ''}{where}"


def allowed(api_client: kubernetes.client.ApiClient, access: Access) -> bool:
    """A SubjectAccessReview as the ServiceAccount's token would authenticate."""
    attributes = {
        "verb": access.verb,
        "resource": access.resource,
        "group": access.group,
        "subresource": access.subresource,
        "namespace": access.namespace,
        "name": access.name,
    }
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NS}:{access.account}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{NS}",
                "system:authenticated",
            ],
            "resourceAttributes": {k: v for k, v in attributes.items() if v},
        },
    }
    api = kubernetes.client.AuthorizationV1Api(api_client)
    return bool(api.create_subject_access_review(review).status.allowed)


def _lease_update(name: str) -> Access:
    return Access(
        "carico-scheduler", "update", "leases", group="coordination.k8s.io", namespace=NS, name=name
    )


NEEDED = [
    # The agent's pod watch (every namespace, narrowed by a field selector).
    Access("carico-agent", "list", "pods"),
    Access("carico-agent", "watch", "pods"),
    # The extender: pod watch, nodes and budgets for repack snapshots, bindings, events.
    Access("carico-scheduler", "watch", "pods"),
    Access("carico-scheduler", "list", "nodes"),
    Access("carico-scheduler", "list", "poddisruptionbudgets", group="policy"),
    Access("carico-scheduler", "create", "pods", subresource="binding", namespace="team-a"),
    # ... the annotation that wakes a pod it turned away once there is room.
    Access("carico-scheduler", "patch", "pods", namespace="team-a"),
    Access("carico-scheduler", "create", "events", namespace="team-a"),
    # kube-scheduler: its own lease and the delegated-authentication configuration.
    Access("carico-scheduler", "create", "leases", group="coordination.k8s.io", namespace=NS),
    _lease_update(manifests.LEASE_NAME),
    Access(
        "carico-scheduler",
        "get",
        "configmaps",
        namespace="kube-system",
        name="extension-apiserver-authentication",
    ),
]

FORBIDDEN = [
    Access("carico-agent", "create", "pods", subresource="binding", namespace="team-a"),
    Access("carico-agent", "create", "pods", subresource="eviction", namespace="team-a"),
    Access("carico-agent", "list", "nodes"),
    Access("carico-agent", "delete", "pods", namespace="team-a"),
    Access("carico-aggregator", "list", "pods"),
    Access("carico-aggregator", "get", "configmaps", namespace=NS),
    # Evictions belong to the repack-apply overlay only.
    Access("carico-scheduler", "create", "pods", subresource="eviction", namespace="team-a"),
    # Patching a pod's metadata is all the extender changes of pods: no updates. (Deleting is
    # kube-scheduler's, which shares the ServiceAccount and deletes the pods it preempts.)
    Access("carico-scheduler", "update", "pods", namespace="team-a"),
    _lease_update("someone-else"),
    # Nobody reads secrets, anywhere.
    *(Access(sa, verb, "secrets") for sa in SERVICE_ACCOUNTS for verb in ("get", "list", "watch")),
    *(Access(sa, "get", "secrets", namespace=NS) for sa in SERVICE_ACCOUNTS),
]


def test_rbac_grants_what_each_component_uses_and_nothing_more(
    api_client: kubernetes.client.ApiClient, installed: Objects
) -> None:
    missing = [str(a) for a in NEEDED if not allowed(api_client, a)]
    excess = [str(a) for a in FORBIDDEN if allowed(api_client, a)]
    assert missing == [], "denied but needed"
    assert excess == [], "allowed but must not be"


def test_only_the_repack_apply_overlay_grants_eviction(
    tools: Tools, api_client: kubernetes.client.ApiClient, installed: Objects
) -> None:
    evict = Access("carico-scheduler", "create", "pods", subresource="eviction", namespace="x")
    assert not allowed(api_client, evict)
    tools.kubectl_run(
        "apply",
        "--server-side",
        "--force-conflicts",  # CARICO_REPACK_MODE is owned by the base's managers
        "--field-manager=carico-kustomize",
        "-k",
        str(REPO / "deploy/overlays/repack-apply"),
    )
    try:
        assert allowed(api_client, evict)
        # Evictions were added, nothing else: still no Secrets.
        assert not allowed(api_client, Access("carico-scheduler", "get", "secrets"))
    finally:
        tools.kubectl_run(
            "delete",
            "clusterrolebinding/carico-extender-evict",
            "clusterrole/carico-extender-evict",
        )
        tools.kubectl_run(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=carico-kustomize",
            "-k",
            str(REPO / "deploy"),
        )
    assert not allowed(api_client, evict)


# ---- the shipped KubeSchedulerConfiguration runs the real kube-scheduler --------------------


def _service_account_kubeconfig(tools: Tools, cp: ControlPlane, path: Path) -> Path:
    token = tools.kubectl_run(
        "create", "token", "carico-scheduler", f"--namespace={NS}", "--duration=1h"
    ).strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {"server": cp.server, "certificate-authority": str(cp.certs.ca_crt)},
            }
        ],
        "users": [{"name": "carico-scheduler", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": "carico-scheduler"}}],
        "current-context": "sa",
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


class HttpsExtender(ExtenderProcess):
    """``carico extender`` serving HTTPS with the certificate the chart mounts (from the Secret
    ``carico-extender-tls``), probed and read with that CA."""

    def __init__(self, kubeconfig: Path, log_dir: Path, tls: Path) -> None:
        super().__init__(
            kubeconfig, log_dir, f"--tls-cert={tls}/tls.crt", f"--tls-key={tls}/tls.key"
        )
        self.context = ssl.create_default_context(cafile=str(tls / "ca.crt"))

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"the extender exited:\n{self.log_tail()}")
        return _https_ok(f"{self.base}/readyz", self.context)

    def get(self, path: str) -> Any:
        return json.loads(self.text(path))

    def text(self, path: str) -> str:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=5, context=self.context) as r:
            return str(r.read().decode())


def _extender_secret(directory: Path) -> Path:
    """The files of the carico-extender-tls Secret as `carico certs` issues them."""
    bundle = certs.issue(certs.plan(NS), now=dt.datetime.now(dt.UTC))
    directory.mkdir()
    (directory / "ca.crt").write_bytes(bundle.ca.cert_pem)
    write_pair(bundle.leaves["extender"], directory, "tls")
    return directory


def _lease_holder(coordination: kubernetes.client.CoordinationV1Api, name: str, ns: str) -> str:
    """The Lease's holder; "" while the Lease does not exist yet (kube-scheduler reports ready
    before its leader elector has created it)."""
    try:
        lease = coordination.read_namespaced_lease(name, ns)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return str(lease.spec.holder_identity or "")


def _https_ok(url: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _bind_requests(extender: HttpsExtender) -> float:
    text = extender.text("/metrics")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("carico_extender_requests_total{")
        and 'verb="bind"' in line
        and 'outcome="ok"' in line
    )


def test_shipped_scheduler_configuration_runs_kube_scheduler(
    tools: Tools,
    control_plane: ControlPlane,
    api_client: kubernetes.client.ApiClient,
    installed: Objects,
    pod_counts_hook: PodCountsRecorder,
    namespace: str,
    tmp_path: Path,
) -> None:
    core = kubernetes.client.CoreV1Api(api_client)
    shipped = core.read_namespaced_config_map("carico-scheduler-config", NS)
    cfg = json.loads(shipped.data["kube-scheduler-config.json"])
    kubeconfig = _service_account_kubeconfig(tools, control_plane, tmp_path / "sa.kubeconfig")
    # The extender runs as the same ServiceAccount, so its RBAC is exercised too, and serves
    # HTTPS with the extender certificate, as the chart's sidecar does.
    tls = _extender_secret(tmp_path / "tls")
    extender = HttpsExtender(kubeconfig, tmp_path, tls)
    extender.start()
    feed = CapacityFeed(
        f"127.0.0.1:{extender.grpc_port}",
        [n.metadata.name for n in core.list_node().items],
        pods=lambda node: pod_counts_hook.latest.get(node, PodCounts()).pods,
    )
    feed.set_all(10.0)
    feed.start()
    # What differs from the pod: there, kube-scheduler has in-cluster credentials, the Secret is
    # mounted at /etc/carico/tls and the sidecar listens on 127.0.0.1:8888. Here there is no
    # in-cluster environment, the Secret's files are in a temporary directory and the extender
    # listens on a free port, so exactly those three change; everything else (profiles, verbs,
    # HTTPS with the CA and client certificate, nodeCacheCapable, ignorable, leader election on
    # its Lease in carico-system) is the shipped configuration.
    cfg["clientConnection"]["kubeconfig"] = str(kubeconfig)
    entry = cfg["extenders"][0]
    assert entry["urlPrefix"] == f"https://127.0.0.1:{manifests.EXTENDER_PORT}/scheduler"
    entry["urlPrefix"] = f"{extender.base}/scheduler"
    entry["tlsConfig"] = {
        key: str(tls / Path(path).relative_to(manifests.TLS_DIR))
        for key, path in entry["tlsConfig"].items()
    }
    config_path = tmp_path / "kube-scheduler.json"
    config_path.write_text(json.dumps(cfg))
    (port,) = free_ports(1)
    scheduler = Component(
        "kube-scheduler-shipped",
        [
            str(control_plane.bin_dir / "kube-scheduler"),
            f"--config={config_path}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--tls-cert-file={control_plane.certs.serving_crt}",
            f"--tls-private-key-file={control_plane.certs.serving_key}",
            "--v=2",
        ],
        tmp_path,
    )
    # The session's scheduler also serves carico-scheduler: stop it so the shipped one decides.
    control_plane.stop_scheduler()
    scheduler.start()
    coordination = kubernetes.client.CoordinationV1Api(api_client)
    bed_ca = ssl.create_default_context(cafile=str(control_plane.certs.ca_crt))
    try:
        wait_for(
            lambda: _https_ok(f"https://127.0.0.1:{port}/readyz", bed_ca) or not scheduler.alive(),
            120,
            "the shipped kube-scheduler's /readyz",
        )
        assert scheduler.alive(), scheduler.log_tail()
        wait_for(
            lambda: bool(_lease_holder(coordination, manifests.LEASE_NAME, NS)),
            120,
            f"leader election on {NS}/{manifests.LEASE_NAME}",
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "via-shipped-config"},
            "spec": {
                "schedulerName": CARICO_PROFILE,
                "containers": [{"name": "main", "image": "registry.invalid/x:1"}],
            },
        }
        core.create_namespaced_pod(namespace, pod)

        def running() -> bool:
            status = core.read_namespaced_pod("via-shipped-config", namespace).status
            return status.phase == "Running"

        wait_for(running, 120, "the pod Running")
        node = core.read_namespaced_pod("via-shipped-config", namespace).spec.node_name
        why = extender.get(f"/api/v1/explain?pod={namespace}/via-shipped-config")
        assert node in why["filter"]["passed"], why
        assert _bind_requests(extender) >= 1, "kube-scheduler did not bind through the extender"
    finally:
        scheduler.stop()
        feed.stop()
        extender.stop()
        control_plane.restart_scheduler([])
