"""Schedulers by name: ``default``, ``default:<cpu>m[/<mem>Mi]``, ``carico``, ``carico:<options>``.

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
from scheduler_ext.shape import ScoreShape


@dataclass(frozen=True)
class SchedulerSpec:
    """A scheduler as named on the command line: ``default``, ``default:500m``,
    ``default:200m/750Mi`` (requests applied to every job's pods), ``carico``, or ``carico:`` with
    agent options, comma-separated: ``p=<cost>`` (``--prior-per-pod-cost``) and ``level=<L>``
    (``--full-level``), ``shape=`` (``--score-shape``, points joined by ``+``) and ``weight=`` (the
    extender's weight in the scheduler configuration), e.g. ``carico:level=0.9``."""

    kind: str
    cpu_m: int | None = None
    mem: int | None = None
    # carico only: the agents' --prior-per-pod-cost and --full-level (None: shipped defaults).
    prior_per_pod_cost: float | None = None
    full_level: float | None = None
    score_shape: str | None = None  # carico only: --score-shape, comma-separated points
    weight: int | None = None  # carico only: the extender's weight (None: the shipped 1)

    @property
    def label(self) -> str:
        if self.kind == "carico":
            options = []
            if self.prior_per_pod_cost is not None:
                options.append(f"p={self.prior_per_pod_cost:g}")
            if self.full_level is not None:
                options.append(f"level={self.full_level:g}")
            if self.score_shape is not None:
                options.append("shape=" + self.score_shape.replace(",", "+"))
            if self.weight is not None:
                options.append(f"weight={self.weight}")
            return "carico" + (":" + ",".join(options) if options else "")
        if self.kind != "default" or self.cpu_m is None:
            return self.kind
        s = f"default:{self.cpu_m}m"
        if self.mem is not None:
            s += f"/{self.mem // MI}Mi"
        return s


_SPEC = re.compile(r"^(default|carico)(?::(\d+)m(?:/(\d+)(Mi|Gi))?)?$")
_CARICO_OPTION = re.compile(r"^(p|level|weight)=(\d+(?:\.\d+)?)$")


def _carico(text: str, options: str) -> SchedulerSpec:
    found: dict[str, float] = {}
    shape: str | None = None
    for part in options.split(","):
        key, _, value = part.strip().partition("=")
        if key == "shape" and shape is None:
            try:
                shape = ScoreShape.parse(value.replace("+", ",")).text
            except ValueError as exc:
                raise ValueError(f"scheduler {text!r}: {exc}") from None
            continue
        m = _CARICO_OPTION.match(part.strip())
        if m is None or m.group(1) in found:
            raise ValueError(
                f"scheduler {text!r}: carico options are p=<per-pod cost prior>,"
                " level=<full level>, shape=<utilisation:score+...> and weight=<extender"
                " weight>, each at most once"
            )
        found[m.group(1)] = float(m.group(2))
    if "p" in found and not found["p"] > 0:
        raise ValueError(f"scheduler {text!r}: the per-pod cost prior must be positive")
    if "level" in found and not 0 < found["level"] <= 1:
        raise ValueError(f"scheduler {text!r}: the full level must be in (0, 1]")
    if "weight" in found and not (found["weight"].is_integer() and found["weight"] >= 1):
        raise ValueError(f"scheduler {text!r}: the extender weight must be an integer >= 1")
    return SchedulerSpec(
        "carico",
        prior_per_pod_cost=found.get("p"),
        full_level=found.get("level"),
        score_shape=shape,
        weight=int(found["weight"]) if "weight" in found else None,
    )


def parse_spec(text: str) -> SchedulerSpec:
    if text.strip().startswith("carico:") and "=" in text:
        return _carico(text, text.strip().removeprefix("carico:"))
    m = _SPEC.match(text.strip())
    if not m:
        raise ValueError(
            f"scheduler {text!r}: expected default, default:<cpu>m, "
            "default:<cpu>m/<mem>Mi, carico or carico:p=<cost>,level=<L>,shape=<u:s+u:s...>"
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

    return CaricoScheduler(
        params,
        n_nodes,
        rng,
        prior_per_pod_cost=spec.prior_per_pod_cost,
        full_level=spec.full_level,
        score_shape=ScoreShape.parse(spec.score_shape) if spec.score_shape else None,
        label=spec.label,
        weight=spec.weight,
    )
