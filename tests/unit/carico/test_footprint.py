"""Per-class footprints: learning from pod measurements, the fleet's summary, the priors."""

from __future__ import annotations

import pytest

from carico.footprint import (
    EMPTY_FLEET,
    ClassFootprint,
    FleetSummary,
    Footprint,
    FootprintLearner,
    PodMeasurement,
    fleet_summary,
    resolve,
)
from carico.pods import Requests

MI = 2**20


def test_a_class_is_learned_from_its_pods_and_follows_a_change() -> None:
    learner = FootprintLearner(min_gain=0.2)
    for t in range(10):
        learner.observe(t, [PodMeasurement("a", 1.0 + 0.1 * (-1) ** t, 60 * MI)] * 3)
    learned = learner.learned("a")
    assert learned is not None and learned.source == "learned" and learned.samples == 30
    # the alternating ±0.1 averages out to within a few hundredths (the gain is 0.2 at most)
    assert learned.footprint.cpu == pytest.approx(1.0, abs=0.03)
    for t in range(10, 40):
        learner.observe(t, [PodMeasurement("a", 2.0, 60 * MI)])
    assert learner.learned("a").footprint.cpu == pytest.approx(2.0, rel=0.01)  # type: ignore[union-attr]


def test_a_pod_that_saturates_the_node_alone_is_still_learned() -> None:
    """Two 4-thread pods on a 4-core node: each gets 2 cores, pressure is 1, so every measurement
    is censored. The first one still sets the class (a lower bound is better than nothing), and
    no later censored one can pull it down; an uncensored one can."""
    learner = FootprintLearner()
    learner.observe(0, [PodMeasurement("ml", 4.0, 700 * MI, cpu_censored=True)] * 2)
    learner.observe(1, [PodMeasurement("ml", 2.7, 700 * MI, cpu_censored=True)] * 3)
    learned = learner.learned("ml")
    assert learned is not None and learned.footprint.cpu == 4.0
    learner.observe(2, [PodMeasurement("ml", 4.5, 700 * MI, cpu_censored=True)])
    assert learner.learned("ml").footprint.cpu > 4.0  # type: ignore[union-attr]
    learner.observe(3, [PodMeasurement("ml", 3.0, 700 * MI)] * 20)
    assert learner.learned("ml").footprint.cpu < 4.0  # type: ignore[union-attr]


def test_bad_measurements_are_ignored() -> None:
    learner = FootprintLearner()
    learner.observe(0, [PodMeasurement("a", float("nan"), 1.0), PodMeasurement("a", -1.0, 1.0)])
    assert learner.learned("a") is None


def test_the_number_of_classes_is_bounded_least_recently_seen_first() -> None:
    learner = FootprintLearner(max_classes=3)
    for t, name in enumerate("abcd"):
        learner.observe(t, [PodMeasurement(name, 1.0, 1.0)])
    assert [c.name for c in learner.all_learned()] == ["b", "c", "d"] and learner.dropped == 1
    learner.observe(9, [PodMeasurement("b", 1.0, 1.0)])  # b is seen again: c is now the oldest
    learner.observe(10, [PodMeasurement("e", 1.0, 1.0)])
    assert [c.name for c in learner.all_learned()] == ["d", "b", "e"]
    with pytest.raises(ValueError):
        FootprintLearner(max_classes=0)


def _learned(name: str, cpu: float, mem: float, req: Requests) -> ClassFootprint:
    return ClassFootprint(name, Footprint(cpu, mem), "learned", 10, req)


def test_the_fleet_takes_medians_per_class_and_ratios_over_classes() -> None:
    bpi = [_learned("bpi", c, 60 * MI, Requests(0.1, 0.0)) for c in (0.9, 1.0, 1.2)]
    ml = [_learned("ml", 4.0, 700 * MI, Requests(0.2, 750 * MI))]
    priors = [ClassFootprint("x", Footprint(9, 9), "requests")]  # a prior teaches nothing
    s = fleet_summary([*bpi, *ml, *priors])
    assert set(s.classes) == {"bpi", "ml"} and s.classes["bpi"].cpu == 1.0
    assert s.cpu_ratio == pytest.approx(15.0)  # the median of 10 (bpi) and 20 (ml)
    assert s.memory_ratio == pytest.approx(700 / 750)  # only ml requests memory
    # a class the fleet never measured gets its requests scaled by what the fleet learned
    prior = s.requests_prior(Requests(0.5, 100 * MI))
    assert prior == Footprint(pytest.approx(7.5), pytest.approx(700 / 750 * 100 * MI))
    assert set(fleet_summary([*bpi, *ml], max_classes=1).classes) == {"bpi"}  # most nodes


def test_resolve_prefers_measurements_then_priors_in_order() -> None:
    default = Footprint(0.5, 1e8)
    local = _learned("a", 1.0, 1.0, Requests())
    fleet = FleetSummary.of({"a": Footprint(2.0, 2.0), "b": Footprint(3.0, 3.0)}, cpu_ratio=10.0)
    assert resolve("a", Requests(), local, fleet, default) is local
    assert resolve("a", Requests(), None, fleet, default).source == "fleet"
    assert resolve("c", Requests(cpu=0.1), None, fleet, default).footprint.cpu == 1.0
    assert resolve("c", Requests(), None, fleet, default).source == "typical"
    assert resolve("c", Requests(cpu=0.1), None, EMPTY_FLEET, default).source == "default"
