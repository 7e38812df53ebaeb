"""Schedulers by name: ``default``, ``default:<cpu>m[/<mem>Mi]``, ``carico``, ``carico:p=<cost>``.

Turns what the command line names into a scheduler object: kube-scheduler's emulation
(``scheduler.KubeScheduler``) or the ``carico`` scheduler (``carico_wiring.CaricoScheduler``, that
emulation with the real extender code attached). Kept apart from both so that neither imports the
other. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from carico_app.simulate.params import MI, ModelParams
from carico_app.simulate.scheduler import KubeScheduler, Scheduler


@dataclass(frozen=True)
class SchedulerSpec:
    """A scheduler as named on the command line: ``default``, ``default:500m``,
    ``default:200m/750Mi`` (requests applied to every job's pods), ``carico`` or ``carico:p=1``
    (the agents started with ``--prior-per-pod-cost 1``)."""

    kind: str
    cpu_m: int | None = None
    mem: int | None = None
    # carico only: the agents' --prior-per-pod-cost (None: the agent's shipped default).
    prior_per_pod_cost: float | None = None

    @property
    def label(self) -> str:
        if self.kind == "carico" and self.prior_per_pod_cost is not None:
            return f"carico:p={self.prior_per_pod_cost:g}"
        if self.kind != "default" or self.cpu_m is None:
            return self.kind
        s = f"default:{self.cpu_m}m"
        if self.mem is not None:
            s += f"/{self.mem // MI}Mi"
        return s


_SPEC = re.compile(r"^(default|carico)(?::(\d+)m(?:/(\d+)(Mi|Gi))?)?$")
_CARICO_PRIOR = re.compile(r"^carico:p=(\d+(?:\.\d+)?)$")


def parse_spec(text: str) -> SchedulerSpec:
    prior = _CARICO_PRIOR.match(text.strip())
    if prior:
        cost = float(prior.group(1))
        if not cost > 0:
            raise ValueError(f"scheduler {text!r}: the per-pod cost prior must be positive")
        return SchedulerSpec("carico", prior_per_pod_cost=cost)
    m = _SPEC.match(text.strip())
    if not m:
        raise ValueError(
            f"scheduler {text!r}: expected default, default:<cpu>m, "
            "default:<cpu>m/<mem>Mi, carico or carico:p=<per-pod cost prior>"
        )
    kind, cpu, mem, unit = m.groups()
    if kind == "carico" and cpu is not None:
        raise ValueError("the carico scheduler ignores requests; write just 'carico'")
    mem_b = None if mem is None else int(mem) * (MI if unit == "Mi" else 1024 * MI)
    return SchedulerSpec(kind, None if cpu is None else int(cpu), mem_b)


def make_scheduler(
    spec: SchedulerSpec, params: ModelParams, n_nodes: int, rng: np.random.Generator
) -> Scheduler:
    if spec.kind == "default":
        return KubeScheduler(spec.label, params, n_nodes, rng)
    # Imported here: the wiring loads the agent, aggregator and extender code, which the
    # default-scheduler rows do not need.
    from carico_app.simulate.carico_wiring import CaricoScheduler

    return CaricoScheduler(params, n_nodes, rng, prior_per_pod_cost=spec.prior_per_pod_cost)
