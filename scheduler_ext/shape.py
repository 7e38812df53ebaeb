"""Score shape: a piecewise-linear score of a node's measured utilisation (packing or spreading).

Design: docs/architecture.md#score-shape.

Kubernetes' NodeResourcesFit plugin scores nodes on *requests* with the RequestedToCapacityRatio
strategy: a broken line through (utilisation %, score) points, averaged over resources with
weights. ``--score-shape`` gives the extender the same points and weights, applied to what the
nodes *measure*: a feature's utilisation is the node's expected use (its report), plus its open
reservations, plus the incoming pod's cost, over the node's full level. ``0:0,100:10`` packs
(the busiest feasible node scores highest), ``0:10,100:0`` spreads.

The arithmetic follows kube-scheduler's where it is integer: utilisation is a whole percent
(truncated), the broken line is interpolated in integers with Go's division (truncating toward
zero), and the weighted mean is rounded half away from zero. One deliberate difference: upstream
leaves a resource whose score is 0 out of the mean (both its score and its weight), so a spreading
shape would rank a node full on CPU by its memory alone; here every weighted feature counts.

Pure logic: no I/O, no clock. Neighbours: ``decisions`` (prioritize), ``class_fit`` (the need and
free room per feature a utilisation is computed from), ``cli`` (the flags).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Upstream's bounds (kube-scheduler config validation): shape scores 0..MaxCustomPriorityScore,
# utilisation 0..100, resource weights 1..100.
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILISATION = 100
MIN_WEIGHT, MAX_WEIGHT = 1, 100
# The extender's score range (extenderv1.MaxExtenderPriority).
MAX_EXTENDER_PRIORITY = 10
# Upstream multiplies each point's score by MaxNodeScore / MaxCustomPriorityScore (100 / 10) to put
# it in the framework's 0..100 range. An extender's scores are multiplied by kube-scheduler itself,
# by MaxNodeScore / MaxExtenderPriority (also 100 / 10), so in the extender's units the factor is
# MaxExtenderPriority / MaxCustomPriorityScore = 1: the points' own scores are extender scores, and
# the framework sees 10 × them, as in-tree. Interpolating at upstream's finer 0..100 and dividing
# by 10 would only add a second rounding, since the extender protocol carries integers 0..10.
EXTENDER_SCALE = MAX_EXTENDER_PRIORITY // MAX_CUSTOM_PRIORITY_SCORE
# What the default weights are upstream (cpu=1, memory=1) and here, by the agents' feature names.
DEFAULT_WEIGHTS: Mapping[str, int] = {"cpu": 1, "memory": 1}
# The one feature of a node without per-class data: its pods against avail.
PODS_FEATURE = "pods"
# A utilisation computed in floating point as 74.99999999 is the exact 75 % it stands for.
_PCT_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class ShapePoint:
    utilisation: int  # percent of the node's full level, 0..100
    score: int  # 0..MAX_CUSTOM_PRIORITY_SCORE


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{what}: {text.strip()!r} is not an integer") from None


def parse_shape(text: str) -> tuple[ShapePoint, ...]:
    """``"0:0,100:10"`` -> the points, validated (ValueError naming the bad point).

    >>> parse_shape("0:10, 100:0")
    (ShapePoint(utilisation=0, score=10), ShapePoint(utilisation=100, score=0))
    """
    items = [p for p in text.split(",") if p.strip()]
    points: list[ShapePoint] = []
    for i, item in enumerate(items, 1):
        u, sep, s = item.partition(":")
        if not sep:
            raise ValueError(f"shape point {i} ({item.strip()!r}): write utilisation:score")
        what = f"shape point {i} ({item.strip()})"
        points.append(ShapePoint(_int(u, what), _int(s, what)))
    validate_shape(points)
    return tuple(points)


def validate_shape(points: Sequence[ShapePoint]) -> None:
    """Upstream's rules: at least one point, utilisation 0..100 strictly increasing, score
    0..MaxCustomPriorityScore. Raises ValueError naming the first bad point."""
    if not points:
        raise ValueError("the shape needs at least one utilisation:score point")
    for i, p in enumerate(points, 1):
        at = f"shape point {i} ({p.utilisation}:{p.score})"
        if not 0 <= p.utilisation <= MAX_UTILISATION:
            raise ValueError(f"{at}: utilisation must be in 0..{MAX_UTILISATION}")
        if not 0 <= p.score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise ValueError(f"{at}: score must be in 0..{MAX_CUSTOM_PRIORITY_SCORE}")
        if i > 1 and p.utilisation <= points[i - 2].utilisation:
            raise ValueError(
                f"{at}: utilisation must be greater than the previous point's"
                f" {points[i - 2].utilisation} (strictly increasing)"
            )


def parse_weights(text: str) -> dict[str, int]:
    """``"cpu=3,memory=1"`` -> per-feature weights 1..100 (ValueError naming the bad one).

    >>> parse_weights("cpu=3, memory=1")
    {'cpu': 3, 'memory': 1}
    """
    weights: dict[str, int] = {}
    for item in (p for p in text.split(",") if p.strip()):
        name, sep, w = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"weight {item.strip()!r}: write feature=weight")
        if name in weights:
            raise ValueError(f"weight of {name} given twice")
        weight = _int(w, f"weight of {name}")
        if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
            raise ValueError(f"weight of {name} is {weight}, not in {MIN_WEIGHT}..{MAX_WEIGHT}")
        weights[name] = weight
    if not weights:
        raise ValueError("no feature weights given")
    return weights


def _go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as Go's (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def utilisation_pct(used: float, full: float) -> int:
    """``used`` as a whole percent of ``full``, truncated and clamped to 0..100 (a node with no
    room at all, ``full`` <= 0, is full: upstream scores capacity 0 as 100 %).

    >>> [utilisation_pct(u, f) for u, f in ((3, 8), (0.9, 0.8), (-1, 2), (1, 0))]
    [37, 100, 0, 100]
    """
    if full <= 0 or used >= full:
        return MAX_UTILISATION
    if used <= 0:
        return 0
    return min(math.floor(MAX_UTILISATION * used / full + _PCT_SLACK), MAX_UTILISATION)


@dataclass(frozen=True, slots=True)
class ScoreShape:
    """The configured shape and per-feature weights."""

    points: tuple[ShapePoint, ...]
    weights: Mapping[str, int]

    def __post_init__(self) -> None:
        validate_shape(self.points)

    @property
    def packs(self) -> bool:
        """Whether the shape scores a fuller node higher (its last point above its first)."""
        return self.points[-1].score > self.points[0].score

    @classmethod
    def parse(cls, shape: str, weights: str = "") -> ScoreShape:
        return cls(parse_shape(shape), parse_weights(weights) if weights else DEFAULT_WEIGHTS)

    @property
    def text(self) -> str:
        return ",".join(f"{p.utilisation}:{p.score}" for p in self.points)

    def score_at(self, utilisation: int, scale: int = EXTENDER_SCALE) -> int:
        """The broken line at ``utilisation`` (%): flat before the first point and after the
        last, linear between points, with every point's score times ``scale``.

        >>> pack = ScoreShape.parse("0:0,100:10")
        >>> pack.score_at(75), pack.score_at(37), pack.score_at(37, scale=10)
        (7, 3, 37)
        """
        pts = self.points
        for i, p in enumerate(pts):
            if utilisation <= p.utilisation:
                if i == 0:
                    return p.score * scale
                q = pts[i - 1]
                rise = (p.score - q.score) * scale * (utilisation - q.utilisation)
                return q.score * scale + _go_div(rise, p.utilisation - q.utilisation)
        return pts[-1].score * scale

    def node_score(self, utilisation: Mapping[str, int], scale: int = EXTENDER_SCALE) -> int:
        """The weighted mean of ``score_at`` over the weighted features the node has, rounded
        half away from zero; 0 when it has none. A node without per-class data has one feature
        (``PODS_FEATURE``), scored alone whatever the weights."""
        if set(utilisation) == {PODS_FEATURE}:
            return self.score_at(utilisation[PODS_FEATURE], scale)
        total = weight_sum = 0
        for name, weight in self.weights.items():
            u = utilisation.get(name)
            if u is None:
                continue
            total += self.score_at(u, scale) * weight
            weight_sum += weight
        if weight_sum == 0:
            return 0
        # round(total / weight_sum), halves up, in integers: floor((2·total + w) / (2·w)).
        return (2 * total + weight_sum) // (2 * weight_sum)


def class_utilisation(
    feature_names: Sequence[str],
    full_level: float,
    need: Sequence[float],
    free: Sequence[float],
) -> dict[str, int]:
    """Per feature, the node's utilisation (%) once the pod runs, from a per-class fit: its free
    room ``free`` is the full level minus the node's expected use and its reservations, so the
    level after the pod is full_level − free + need; 100 % is the full level."""
    return {
        name: utilisation_pct(full_level - f + n, full_level)
        for name, n, f in zip(feature_names, need, free, strict=True)
    }


def pods_utilisation(pods: int, avail: float, reserved: int) -> dict[str, int]:
    """A node without per-class data, in pods: it holds ``pods`` and has room for ``avail`` more
    (reservations are still inside avail), so after the pod it uses pods + reserved + 1 of
    pods + avail; full is avail 0, its full level by the agent's definition."""
    return {PODS_FEATURE: utilisation_pct(pods + reserved + 1, pods + avail)}
