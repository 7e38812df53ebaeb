"""The generated deploy files: the chart's KubeSchedulerConfiguration comes from carico.schedconfig.

The kustomize base and overlays are rendered by helm; their freshness is checked in the e2e tier
(tests/e2e/test_deploy_manifests.py), where the helm binary is built.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from carico import manifests, schedconfig
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
