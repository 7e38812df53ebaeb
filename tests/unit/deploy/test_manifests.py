"""The generated deploy files: the chart's KubeSchedulerConfiguration comes from
carico_app.schedconfig.

The kustomize base and overlays are rendered by helm; their freshness is checked in the e2e tier
(tests/e2e/test_deploy_manifests.py), where the helm binary is built.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from carico.cliargs import env_name
from carico_app import certs, manifests, schedconfig
from carico_app.cli import COMMANDS
from scheduler_ext.http_server import DEFAULT_PREFIX

REPO = Path(__file__).resolve().parents[3]


def test_committed_scheduler_configuration_is_fresh() -> None:
    stale = manifests.stale_files(REPO, manifests.scheduler_files())
    assert stale == [], "run `make manifests` and commit the result"


def test_shipped_configuration_matches_the_chart_defaults() -> None:
    cfg = manifests.shipped_scheduler_configuration()
    values = yaml.safe_load((REPO / manifests.CHART / "values.yaml").read_text())
    ext = cfg["extenders"][0]
    assert ext["urlPrefix"] == (
        f"https://127.0.0.1:{values['scheduler']['extender']['port']}{DEFAULT_PREFIX}"
    )
    assert ext["nodeCacheCapable"] is values["scheduler"]["extender"]["nodeCacheCapable"]
    assert ext["ignorable"] is values["scheduler"]["extender"]["ignorable"]
    assert ext["enableHTTPS"] is values["tls"]["enabled"]
    assert cfg["leaderElection"]["leaderElect"] is values["scheduler"]["leaderElection"]["enabled"]
    # Beside the cluster's own scheduler only the opt-in profile; both when Carico replaces it.
    assert [p["schedulerName"] for p in cfg["profiles"]] == [schedconfig.CARICO_PROFILE]
    both = manifests.shipped_scheduler_configuration(replace_default=True)
    assert [p["schedulerName"] for p in both["profiles"]] == [
        schedconfig.DEFAULT_PROFILE,
        schedconfig.CARICO_PROFILE,
    ]


def test_stale_files_reports_missing_and_changed(tmp_path: Path) -> None:
    files = manifests.scheduler_files()
    assert sorted(manifests.stale_files(tmp_path, files)) == sorted(files)
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert manifests.stale_files(tmp_path, files) == []
    first = next(iter(files))
    (tmp_path / first).write_text(json.dumps({"edited": True}))
    assert manifests.stale_files(tmp_path, files) == [first]


def test_overlays_become_resources_and_patches() -> None:
    base = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n}\ndata: {k: '1'}\n"
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: n}\n"
    )
    changed = base.replace("k: '1'", "k: '2'")
    added = base + "---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x, namespace: n}\n"
    rendered = {o.name: base for o in manifests.OVERLAYS}
    rendered["repack-apply"] = changed
    rendered["cert-manager"] = added
    files = manifests.kustomize_files(base, rendered)
    overlays = Path("deploy/overlays")
    kust = yaml.safe_load(files[overlays / "repack-apply" / "kustomization.yaml"])
    assert kust["resources"] == ["../../base"]
    assert kust["patches"] == [{"path": "configmap-a.yaml"}]
    assert yaml.safe_load(files[overlays / "repack-apply" / "configmap-a.yaml"])["data"] == {
        "k": "2"
    }
    kust = yaml.safe_load(files[overlays / "cert-manager" / "kustomization.yaml"])
    assert kust["resources"] == ["../../base", "resources.yaml"]
    assert "patches" not in kust
    added_objects = manifests.parse_objects(files[overlays / "cert-manager" / "resources.yaml"])
    assert [manifests.object_key(o) for o in added_objects] == [("ServiceAccount", "n", "x")]


def test_the_scheduler_image_is_the_pinned_kubernetes_release() -> None:
    values = yaml.safe_load((REPO / manifests.CHART / "values.yaml").read_text())
    go_mod = (REPO / "tests/e2e/gobuild/kube/go.mod").read_text()
    pinned = [line.split()[-1] for line in go_mod.splitlines() if "k8s.io/kubernetes v" in line]
    assert values["scheduler"]["kubeScheduler"]["image"]["tag"] == pinned[0]


def _carico_containers() -> list[tuple[str, dict[str, Any]]]:
    base = manifests.parse_objects((REPO / "deploy/base/carico.yaml").read_text())
    found = []
    for obj in base:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            if container["image"].startswith("carico:"):
                found.append((f"{obj['metadata']['name']}/{container['name']}", container))
    return found


def test_the_base_runs_every_carico_component() -> None:
    commands = sorted(c["args"][0] for _, c in _carico_containers())
    assert commands == ["agent", "aggregator", "extender"]


@pytest.mark.parametrize(("where", "container"), _carico_containers(), ids=lambda v: str(v)[:40])
def test_container_flags_and_environment_are_the_components_own(
    where: str, container: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every flag parses with the component's real parser, every CARICO_* value with its type."""
    command, *flags = container["args"]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser(prog=f"carico {command}")
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    # argparse exits on an unknown flag or a value its type refuses; the CARICO_* values are
    # parsed with the flag's type while the parser is built (above).
    parsed = parser.parse_args(flags)
    known = {env_name(a.option_strings[0]) for a in parser._actions if a.option_strings}
    assert set(env) - known - {"NODE_NAME"} == set(), where
    if command == "agent":
        assert parsed.proc_root == "/host/proc"
        assert {"NODE_NAME"} <= {e["name"] for e in container["env"]}


def test_tls_files_come_from_the_component_secrets() -> None:
    """Each TLS path a container uses lies under a mount of its component's carico-*-tls Secret
    (the names `carico certs` writes), including the paths in the scheduler configuration."""
    base = {
        manifests.object_key(o): o
        for o in manifests.parse_objects((REPO / "deploy/base/carico.yaml").read_text())
    }
    ns = manifests.NAMESPACE
    config = json.loads(
        base[("ConfigMap", ns, "carico-scheduler-config")]["data"]["kube-scheduler-config.json"]
    )
    expected = {
        ("DaemonSet", "carico-agent"): "agent",
        ("Deployment", "carico-aggregator"): "aggregator",
        ("Deployment", "carico-scheduler"): "extender",
    }
    checked = 0
    for (kind, name), component in expected.items():
        pod = base[(kind, ns, name)]["spec"]["template"]["spec"]
        secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        for container in pod["containers"]:
            words = container.get("args", []) + container.get("command", [])
            paths = [w.split("=", 1)[1] for w in words if "=" + manifests.TLS_DIR in w]
            if container["name"] == "kube-scheduler":
                paths += config["extenders"][0]["tlsConfig"].values()
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            for path in paths:
                volume = mounts[str(Path(path).parent)]
                assert secrets[volume] == certs.secret_name(component), (name, path)
                checked += 1
    # agent 3, aggregator 3, extender 5 (HTTPS 2, gRPC 3), kube-scheduler 3 (its tlsConfig)
    assert checked == 3 + 3 + 5 + 3
