"""What an eviction through the Eviction API can come to, as the plan executor sees it.

The cluster interfaces (``cluster.InMemoryCluster``, ``kube.KubeCluster``) return an
:class:`EvictionReply`; ``executor`` decides from its outcome whether a step went ahead, must
wait for a disruption budget, or aborts the plan (docs/architecture.md#repack-execution).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Evicted(enum.Enum):
    EVICTED = "evicted"  # the API accepted the eviction (the pod is being deleted)
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget (or the API's rate limit) said not now
    GONE = "gone"  # 404, or the uid precondition failed: the pod is not the one planned
    FAILED = "failed"  # anything else (forbidden, connection errors)


@dataclass(frozen=True)
class EvictionReply:
    outcome: Evicted
    message: str = ""
