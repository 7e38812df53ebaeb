"""The array-based per-class summary is the core's ``fleet_summary`` of the senders' classes in
order of arrival (with the requests of each class's latest sender), through every kind of
change: new senders, new footprints, other classes, senders leaving, ties at the class limit."""

import random

import pytest

from aggregator.classes import ClassVotes
from carico.footprint import EMPTY_FLEET, ClassFootprint, Footprint, fleet_summary
from carico.pods import Requests


def _reference(
    held: dict[str, tuple[ClassFootprint, ...]], max_classes: int
) -> tuple[object, dict[str, Requests]]:
    fleet = fleet_summary((c for classes in held.values() for c in classes), max_classes)
    requests = {}
    for classes in held.values():  # in order of arrival: the latest sender's requests win
        for c in classes:
            if c.name in fleet.classes:
                requests[c.name] = c.requests
    return fleet, requests


def _classes(rng: random.Random, names: list[str]) -> tuple[ClassFootprint, ...]:
    picked = rng.sample(names, rng.randint(0, min(6, len(names))))
    return tuple(
        ClassFootprint(
            name,
            # Few distinct values, so that ties and even counts (means of two) are common.
            Footprint(
                rng.choice([0.0, 0.25, 0.5, 1.0, 3.0, rng.uniform(0, 8)]), rng.uniform(0, 1e10)
            ),
            "learned",
            rng.randint(0, 50),
            Requests(rng.choice([0.0, 0.1, 0.5]), rng.choice([0.0, 2.0**28, 2.0**30])),
        )
        for name in picked
    )


@pytest.mark.parametrize("max_classes", [1, 3, 8, 1024])
def test_the_summary_is_fleet_summary_through_every_kind_of_change(max_classes: int) -> None:
    rng = random.Random(max_classes)
    names = [f"ns/Deployment/d{i}" for i in range(12)]
    votes = ClassVotes()
    held: dict[str, tuple[ClassFootprint, ...]] = {}  # in order of arrival, as the store keeps
    for step in range(600):
        sender = f"n{rng.randint(0, 30)}"
        if rng.random() < 0.15:
            held.pop(sender, None)
            votes.remove(sender)
        else:
            classes = _classes(rng, names)
            if rng.random() < 0.5 and sender in held:  # the same classes, new footprints
                classes = tuple(
                    ClassFootprint(
                        c.name,
                        Footprint(rng.uniform(0, 4), c.footprint.memory),
                        "learned",
                        1,
                        c.requests,
                    )
                    for c in held[sender]
                )
            held.pop(sender, None)
            held[sender] = classes
            votes.update(sender, classes)
        if step % 7 == 0:
            fleet, requests = votes.summary(held, max_classes)
            expected, expected_requests = _reference(held, max_classes)
            assert fleet == expected, step
            assert requests == expected_requests, step
            assert len(votes) == len({c.name for classes in held.values() for c in classes})


def test_no_classes_is_the_empty_summary() -> None:
    votes = ClassVotes()
    votes.update("a", ())
    assert votes.summary(["a", "b"], 1024) == (EMPTY_FLEET, {})
    one = (ClassFootprint("x", Footprint(1.0, 2.0), "learned"),)
    votes.update("a", one)
    votes.remove("a")
    assert votes.summary(["a"], 1024) == (EMPTY_FLEET, {}) and len(votes) == 0


def test_ids_of_classes_no_sender_holds_are_reused() -> None:
    # Senders naming ever new classes must not make the tables grow without bound.
    votes = ClassVotes()
    for i in range(1000):
        votes.update(
            "hostile",
            tuple(ClassFootprint(f"c{i}-{k}", Footprint(1, 1), "learned") for k in range(4)),
        )
    assert len(votes) == 4 and len(votes._names) <= 8
    fleet, _ = votes.summary(["hostile"], 1024)
    assert set(fleet.classes) == {f"c999-{k}" for k in range(4)}


def test_an_update_says_whether_anything_changed() -> None:
    def one(cpu: float, name: str = "x") -> tuple[ClassFootprint, ...]:
        return (ClassFootprint(name, Footprint(cpu, 2.0), "learned", 3, Requests(0.5, 0.0)),)

    votes = ClassVotes()
    assert not votes.update("a", ())  # nothing before, nothing now
    assert votes.update("a", one(1.0))
    assert not votes.update("a", one(1.0))  # equal classes in new objects
    assert votes.update("a", one(1.5))
    assert votes.update("a", one(1.5, "y"))
    assert votes.remove("a") and not votes.remove("a")
