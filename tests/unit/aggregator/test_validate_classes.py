"""The learned classes a sender reports: each bad one refused with its reason, the count bounded
by what the sender is (a node, a child aggregator), each class one vote."""

import math

import numpy as np
import pytest

from aggregator.validate import (
    MAX_CLASS_CPU,
    MAX_CLASS_MEMORY,
    MAX_FLEET_CLASSES,
    SenderPolicy,
    ValidationError,
    checked_entry,
    validate_local_model,
)
from carico.footprint import MAX_CLASSES_PER_REPORT, ClassFootprint, Footprint
from carico.pods import MAX_CLASS_NAME, Requests
from protos.carico.v1 import capacity_pb2

from .conftest import FEATURES, learned, local_model

GI = 2.0**30
WEB = "shop/Deployment/web"


def _model(rng: np.random.Generator, classes: list[capacity_pb2.ClassFootprint], node: str = "n-1"):  # type: ignore[no-untyped-def]
    return local_model(node, rng.uniform(size=(2, 8)), classes=classes)


def test_a_nodes_learned_classes_become_part_of_its_entry(rng: np.random.Generator) -> None:
    message = _model(rng, [learned(WEB, 0.5, GI, 0.25, 0.5 * GI), learned("ml/Job/a", 4.0, 0.0)])
    entry, _ = validate_local_model(message, FEATURES, 0.0)
    assert entry.classes == (
        ClassFootprint(WEB, Footprint(0.5, GI), "learned", 12, Requests(0.25, 0.5 * GI)),
        ClassFootprint("ml/Job/a", Footprint(4.0, 0.0), "learned", 12, Requests()),
    )
    # What the merger builds from a model a worker checked is the same entry.
    assert checked_entry(message, 0.0) == (entry, FEATURES)
    # A worker only checks: it builds no classes (the merger does).
    assert validate_local_model(message, FEATURES, 0.0, keep_classes=False)[0].classes == ()


def test_a_model_without_classes_has_none(rng: np.random.Generator) -> None:
    assert validate_local_model(_model(rng, []), FEATURES, 0.0)[0].classes == ()


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (learned("", 0.5, GI), "class name '' is invalid"),
        (learned("x" * (MAX_CLASS_NAME + 1), 0.5, GI), "class name 'x+' is invalid"),
        (learned("shop/Deployment/we\nb", 0.5, GI), r"class name .*is invalid"),
        (learned("shop/Deployment/\x00", 0.5, GI), r"class name .*is invalid"),
        (learned(WEB, 0.5, GI, source="fleet"), "source 'fleet' is not 'learned'"),
        (learned(WEB, 0.5, GI, source="default"), "source 'default' is not 'learned'"),
        (learned(WEB, math.nan, GI), "cpu nan is not in"),
        (learned(WEB, math.inf, GI), "cpu inf is not in"),
        (learned(WEB, -0.1, GI), "cpu -0.1 is not in"),
        (learned(WEB, MAX_CLASS_CPU * 1.5, GI), "cpu 15000 is not in \\[0, 10000\\] cores"),
        (learned(WEB, 0.5, math.nan), "memory nan is not in"),
        (learned(WEB, 0.5, -1.0), "memory -1 is not in"),
        (learned(WEB, 0.5, MAX_CLASS_MEMORY * 2), "memory 2e\\+15 is not in \\[0, 1e\\+15\\]"),
        (learned(WEB, 0.5, GI, request_cpu=-1.0), "request cpu -1 is not in"),
        (learned(WEB, 0.5, GI, request_cpu=math.inf), "request cpu inf is not in"),
        (learned(WEB, 0.5, GI, request_memory=math.nan), "request memory nan is not in"),
        (learned(WEB, 0.5, GI, request_memory=1e16), "request memory 1e\\+16 is not in"),
    ],
    ids=[
        "empty name",
        "long name",
        "newline in name",
        "NUL in name",
        "source fleet",
        "source default",
        "NaN cpu",
        "inf cpu",
        "negative cpu",
        "absurd cpu",
        "NaN memory",
        "negative memory",
        "absurd memory",
        "negative request cpu",
        "inf request cpu",
        "NaN request memory",
        "absurd request memory",
    ],
)
def test_every_bad_class_is_refused_with_its_reason(
    rng: np.random.Generator, bad: capacity_pb2.ClassFootprint, expected: str
) -> None:
    message = _model(rng, [learned("ok/Deployment/a", 1.0, GI), bad])
    with pytest.raises(ValidationError, match=expected):
        validate_local_model(message, FEATURES, 0.0)
    with pytest.raises(ValidationError, match=expected):  # a worker refuses it as well
        validate_local_model(message, FEATURES, 0.0, keep_classes=False)


def test_the_bounds_themselves_are_accepted(rng: np.random.Generator) -> None:
    edge = learned("x" * MAX_CLASS_NAME, MAX_CLASS_CPU, MAX_CLASS_MEMORY, MAX_CLASS_CPU, 0.0)
    entry, _ = validate_local_model(_model(rng, [edge, learned("idle", 0.0, 0.0)]), FEATURES, 0.0)
    assert [c.footprint.cpu for c in entry.classes] == [MAX_CLASS_CPU, 0.0]
    # Printable is not ASCII only: a space and non-ASCII letters are fine.
    spaced = learned("bare/requests cpu=0.1/limits memory=1Gi é", 0.1, GI)
    assert (
        validate_local_model(_model(rng, [spaced]), FEATURES, 0.0)[0].classes[0].name.endswith("é")
    )


def test_a_sender_names_each_class_once(rng: np.random.Generator) -> None:
    # Twice the same class would be two votes in the fleet's median of that class.
    twice = [learned(WEB, 0.5, GI), learned("other", 1.0, GI), learned(WEB, 9.0, GI)]
    with pytest.raises(ValidationError, match="class 'shop/Deployment/web' appears more than once"):
        validate_local_model(_model(rng, twice), FEATURES, 0.0)


def _many(n: int) -> list[capacity_pb2.ClassFootprint]:
    return [learned(f"ns/Job/j-{i}", 1.0, GI) for i in range(n)]


def test_a_node_sends_at_most_the_classes_of_one_report(rng: np.random.Generator) -> None:
    entry, _ = validate_local_model(_model(rng, _many(MAX_CLASSES_PER_REPORT)), FEATURES, 0.0)
    assert len(entry.classes) == MAX_CLASSES_PER_REPORT
    too_many = _model(rng, _many(MAX_CLASSES_PER_REPORT + 1))
    with pytest.raises(
        ValidationError, match=f"257 classes: more than {MAX_CLASSES_PER_REPORT} for a node"
    ):
        validate_local_model(too_many, FEATURES, 0.0)


def test_a_child_aggregator_sends_at_most_the_classes_of_a_fleet(rng: np.random.Generator) -> None:
    child = SenderPolicy(frozenset({"agg-b"}))
    message = _model(rng, _many(MAX_FLEET_CLASSES), node="agg-b")
    entry, _ = validate_local_model(message, FEATURES, 0.0, (), child)
    assert len(entry.classes) == MAX_FLEET_CLASSES
    # The same model from a sender that is not a child is a node's, and refused.
    with pytest.raises(ValidationError, match="1024 classes: more than 256 for a node"):
        validate_local_model(message, FEATURES, 0.0)
    message.class_footprints.append(learned("one/more/class", 1.0, GI))
    with pytest.raises(
        ValidationError, match="1025 classes: more than 1024 for a child aggregator"
    ):
        validate_local_model(message, FEATURES, 0.0, (), child)
