"""Workload objects the e2e tests create: one-replica ReplicaSets with given requests.

The repack tests build their fragmented clusters from these (one pod per ReplicaSet, so each pod
has a controller and may be moved); the dry-run and apply suites differ only in the scheduler
name, the node selector and the termination grace period.
"""

from __future__ import annotations

from typing import Any


def replica_set(
    name: str,
    cpu: str,
    memory: str,
    scheduler: str,
    node_selector: dict[str, str],
    grace_seconds: int | None = None,
) -> dict[str, Any]:
    """A one-replica ReplicaSet labelled ``app=<name>`` whose pod requests ``cpu`` and
    ``memory``; ``grace_seconds`` sets the pod's termination grace period when given."""
    labels = {"app": name}
    spec: dict[str, Any] = {"schedulerName": scheduler, "nodeSelector": dict(node_selector)}
    if grace_seconds is not None:
        spec["terminationGracePeriodSeconds"] = grace_seconds
    spec["containers"] = [
        {
            "name": "main",
            "image": "registry.invalid/x:1",
            "resources": {"requests": {"cpu": cpu, "memory": memory}},
        }
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
