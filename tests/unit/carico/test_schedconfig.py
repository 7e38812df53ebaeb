"""The KubeSchedulerConfiguration generator: the schema kube-scheduler reads, and its refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from carico_app.schedconfig import (
    CARICO_PROFILE,
    DEFAULT_PROFILE,
    ExtenderConfig,
    ManagedResource,
    render,
    scheduler_configuration,
)


def test_extender_entry_uses_kube_scheduler_field_names() -> None:
    ext = ExtenderConfig(
        "http://127.0.0.1:9999/carico",
        weight=3,
        node_cache_capable=True,
        ignorable=True,
        http_timeout_s=2.5,
        managed_resources=(ManagedResource("example.com/pods", ignored_by_scheduler=True),),
    )
    cfg = scheduler_configuration(kubeconfig="/k", extenders=[ext], qps=500, burst=1000)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert cfg["clientConnection"] == {"qps": 500, "burst": 1000, "kubeconfig": "/k"}
    assert [p["schedulerName"] for p in cfg["profiles"]] == [DEFAULT_PROFILE, CARICO_PROFILE]
    assert cfg["extenders"] == [
        {
            "urlPrefix": "http://127.0.0.1:9999/carico",
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "preemptVerb": "preempt",
            "bindVerb": "bind",
            "weight": 3,
            "httpTimeout": "2500ms",
            "nodeCacheCapable": True,
            "ignorable": True,
            "enableHTTPS": False,
            "managedResources": [{"name": "example.com/pods", "ignoredByScheduler": True}],
        }
    ]
    assert json.loads(render(cfg)) == cfg


def test_empty_verbs_are_left_out_and_weight_only_with_prioritize() -> None:
    ext = ExtenderConfig("https://x/", prioritize_verb="", bind_verb="", preempt_verb="")
    entry = scheduler_configuration(extenders=[ext])["extenders"][0]
    assert set(entry) == {
        "urlPrefix",
        "filterVerb",
        "httpTimeout",
        "nodeCacheCapable",
        "ignorable",
        "enableHTTPS",
    }
    assert entry["enableHTTPS"] is True


def test_no_extender_no_kubeconfig() -> None:
    cfg = scheduler_configuration(leader_elect=False)
    assert "extenders" not in cfg and "kubeconfig" not in cfg["clientConnection"]
    assert cfg["leaderElection"] == {"leaderElect": False}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url_prefix": "127.0.0.1:1"}, "http"),
        ({"url_prefix": "http://x", "weight": 0}, "weight"),
        ({"url_prefix": "http://x", "http_timeout_s": 0}, "httpTimeout"),
        (
            {
                "url_prefix": "http://x",
                "managed_resources": (ManagedResource("a/b"), ManagedResource("a/b")),
            },
            "repeat",
        ),
    ],
)
def test_refuses_what_kube_scheduler_would_refuse(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scheduler_configuration(extenders=[ExtenderConfig(**kwargs)])


def test_refuses_two_binders_and_bad_profiles_and_limits() -> None:
    two = [ExtenderConfig("http://a"), ExtenderConfig("http://b")]
    with pytest.raises(ValueError, match="bind"):
        scheduler_configuration(extenders=two)
    with pytest.raises(ValueError, match="profiles"):
        scheduler_configuration(profiles=["a", "a"])
    with pytest.raises(ValueError, match="qps"):
        scheduler_configuration(qps=0)


def test_tls_files_and_lease() -> None:
    ext = ExtenderConfig(
        "https://127.0.0.1:8888/scheduler",
        tls_ca_file="/t/ca.crt",
        tls_cert_file="/t/tls.crt",
        tls_key_file="/t/tls.key",
    )
    cfg = scheduler_configuration(extenders=[ext], lease=("carico-system", "carico-scheduler"))
    assert cfg["extenders"][0]["enableHTTPS"] is True
    assert cfg["extenders"][0]["tlsConfig"] == {
        "caFile": "/t/ca.crt",
        "certFile": "/t/tls.crt",
        "keyFile": "/t/tls.key",
    }
    assert cfg["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceNamespace": "carico-system",
        "resourceName": "carico-scheduler",
    }
    # Without TLS files or a lease, neither key appears (kube-scheduler's defaults apply).
    plain = scheduler_configuration(extenders=[ExtenderConfig("http://127.0.0.1:1/x")])
    assert "tlsConfig" not in plain["extenders"][0]
    assert plain["leaderElection"] == {"leaderElect": True}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url_prefix": "http://127.0.0.1:1/x", "tls_ca_file": "/ca"}, "https urlPrefix"),
        ({"url_prefix": "https://127.0.0.1:1/x", "tls_cert_file": "/c"}, "go together"),
    ],
)
def test_tls_files_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExtenderConfig(**kwargs).to_dict()


def test_lease_needs_namespace_and_name() -> None:
    with pytest.raises(ValueError, match="namespace and a name"):
        scheduler_configuration(lease=("", "carico-scheduler"))
