"""Checkpoints round-trip, are written atomically, and a damaged file never yields bad entries."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import checkpoint, journal
from aggregator.service import AggregatorConfig, AggregatorService
from aggregator.validate import MAX_FLEET_CLASSES, SenderPolicy, validate_local_model

from .conftest import learned, local_model

FEATURES = ("cpu", "memory")


def _entries(make_local, rng, n: int = 5):  # type: ignore[no-untyped-def]
    return [
        validate_local_model(
            make_local(f"n{i}", rng.uniform(size=(2, 6)), sequence=i, costs=(0.1 * (i + 1),)),
            FEATURES,
            100.0 + i,
        )[0]
        for i in range(n)
    ]


def test_round_trip_preserves_every_field(make_local, rng, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    entries = _entries(make_local, rng)
    path = tmp_path / "state" / "aggregator.json"
    checkpoint.write_atomic(path, checkpoint.encode(FEATURES, entries, now=200.0))
    names, loaded, skipped = checkpoint.load(path)
    assert names == FEATURES and loaded == entries and skipped == []
    # Only the checkpoint itself is left: the temporary file was renamed over it.
    assert [p.name for p in path.parent.iterdir()] == ["aggregator.json"]


def test_a_failed_write_keeps_the_previous_checkpoint(make_local, rng, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "aggregator.json"
    good = checkpoint.encode(FEATURES, _entries(make_local, rng), now=1.0)
    checkpoint.write_atomic(path, good)

    with pytest.raises(TypeError):  # the write itself fails half-way
        checkpoint.write_atomic(path, 12345)  # type: ignore[arg-type]
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["aggregator.json"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "not valid JSON"),
        (b'{"format": "carico-aggregator-checkpoint", "vers', "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
        (b"[1, 2, 3]", "not a Carico aggregator checkpoint"),
        (b'{"format": "carico-aggregator-checkpoint", "version": 99, "entries": []}', "version"),
        (b'{"format": "carico-aggregator-checkpoint", "version": 1}', "no entry list"),
    ],
)
def test_corrupt_files_raise_checkpoint_error(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(content)
    with pytest.raises(checkpoint.CheckpointError, match=reason):
        checkpoint.load(path)


def test_missing_file_is_a_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(checkpoint.CheckpointError, match="cannot read"):
        checkpoint.load(tmp_path / "absent.json")


def test_tampered_entries_are_skipped_with_a_reason(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    entries = _entries(make_local, rng, n=6)
    doc = json.loads(checkpoint.encode(FEATURES, entries, now=1.0))
    doc["entries"][0]["u"][0] = 5.0  # not orthonormal
    doc["entries"][1]["sigma"] = [math.inf, 0.0]  # JSON "Infinity"
    doc["entries"][2]["node"] = "Bad_Name"
    doc["entries"][3]["weight"] = "many"
    doc["entries"][4] = "not an object"
    names, loaded, skipped = checkpoint.decode(json.dumps(doc).encode())
    assert names == FEATURES
    assert [e.node for e in loaded] == ["n5"] and loaded[0] == entries[5]
    assert len(skipped) == 5
    for needle in ("orthonormal", "NaN or inf", "DNS-1123", "weight", "not an object"):
        assert any(needle in s for s in skipped), needle


def test_an_empty_aggregator_round_trips(tmp_path: Path) -> None:
    names, loaded, skipped = checkpoint.decode(checkpoint.encode(None, [], now=0.0))
    assert (names, loaded, skipped) == (None, [], [])


def test_entries_with_another_dimension_are_skipped(make_local, rng) -> None:  # type: ignore[no-untyped-def]
    entries = _entries(make_local, rng, n=1)
    doc = json.loads(checkpoint.encode(FEATURES, entries, now=1.0))
    doc["feature_names"] = ["cpu", "memory", "io"]
    _, loaded, skipped = checkpoint.decode(json.dumps(doc).encode())
    assert loaded == [] and "d=2" in skipped[0]


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=40,
)
ENTRY_KEYS = (
    "node",
    "sequence",
    "sent_at",
    "received_at",
    "weight",
    "d",
    "r",
    "u",
    "sigma",
    "classes",
)
VALID = json.loads(
    checkpoint.encode(
        FEATURES,
        [
            validate_local_model(
                local_model(
                    "n1",
                    np.random.default_rng(1).uniform(size=(2, 6)),
                    costs=(0.1,),
                    classes=[learned("shop/Deployment/web", 0.5, 2e9, 0.25, 1e9)],
                ),
                FEATURES,
                100.0,
            )[0]
        ],
        now=1.0,
    )
)["entries"][0]


@settings(max_examples=300, deadline=None)
@given(
    names=JSON_VALUES | st.just(list(FEATURES)),
    entries=st.lists(
        st.dictionaries(st.sampled_from(ENTRY_KEYS), JSON_VALUES, max_size=3).map(
            lambda changes: {**VALID, **changes}
        )
        | JSON_VALUES,
        max_size=4,
    ),
)
def test_a_checkpoint_of_any_shape_loads_or_is_refused_as_such(
    names: object, entries: list
) -> None:  # type: ignore[type-arg]
    """Whatever a damaged or tampered file holds, decode returns valid entries or raises
    CheckpointError: nothing else escapes (10**400 is valid JSON that no float can hold)."""
    doc = {"format": checkpoint.FORMAT, "version": 1, "feature_names": names, "entries": entries}
    try:
        loaded_names, loaded, skipped = checkpoint.decode(json.dumps(doc).encode())
    except checkpoint.CheckpointError:
        return
    assert loaded_names is None or all(isinstance(n, str) for n in loaded_names)
    assert len(loaded) + len(skipped) == (len(entries) if loaded_names is not None else 0)


def test_a_number_no_float_can_hold_skips_its_entry() -> None:
    doc = {
        "format": checkpoint.FORMAT,
        "version": 1,
        "feature_names": list(FEATURES),
        "entries": [{**VALID, "sent_at": 10**400}, VALID],
    }
    names, loaded, skipped = checkpoint.decode(json.dumps(doc).encode())
    assert [e.node for e in loaded] == ["n1"] and len(skipped) == 1
    assert "entry 0: unusable (OverflowError" in skipped[0]


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_nesting_deeper_than_the_parser_allows_is_a_checkpoint_error(depth: int) -> None:
    with pytest.raises(checkpoint.CheckpointError, match="nested too deeply"):
        checkpoint.decode(b"[" * depth + b"]" * depth)


def test_orphan_temporary_files_of_this_checkpoint_only_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "agg.json"
    for name in (".agg.json.x1.tmp", ".agg.json.y2.tmp", ".other.json.z3.tmp", "agg.json.tmp"):
        (tmp_path / name).write_bytes(b"partial")
    assert sorted(checkpoint.remove_orphans(path)) == [".agg.json.x1.tmp", ".agg.json.y2.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.z3.tmp", "agg.json.tmp"]


GI = 2.0**30
WEB = "shop/Deployment/web"


def _with_classes(rng, n: int = 3):  # type: ignore[no-untyped-def]
    return [
        validate_local_model(
            local_model(
                f"n{i}",
                rng.uniform(size=(2, 6)),
                sequence=i,
                classes=[
                    learned(WEB, 0.5 + i, (i + 1) * GI, 0.25, GI),
                    learned(f"ml/Job/{i}", 4.0, 0.0),
                ],
            ),
            FEATURES,
            100.0 + i,
        )[0]
        for i in range(n)
    ]


def test_classes_round_trip(rng, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    entries = _with_classes(rng)
    path = tmp_path / "aggregator.json"
    checkpoint.write_atomic(path, checkpoint.encode(FEATURES, entries, now=200.0))
    names, loaded, skipped = checkpoint.load(path)
    assert loaded == entries and skipped == []
    assert loaded[2].classes[0].footprint.cpu == 2.5 and loaded[2].classes[0].requests.cpu == 0.25


def test_a_checkpoint_written_before_classes_loads_without_them(rng) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(checkpoint.encode(FEATURES, _with_classes(rng, 1), now=1.0))
    del doc["entries"][0]["classes"]
    _, loaded, skipped = checkpoint.decode(json.dumps(doc).encode())
    assert skipped == [] and loaded[0].classes == () and loaded[0].node == "n0"


@pytest.mark.parametrize(
    ("classes", "reason"),
    [
        ("web", "classes are not a list"),
        ([[WEB, 1.0, GI]], "a class is not"),
        ([[7, 1.0, GI, 3, 0.0, 0.0]], "a class is not"),
        ([[WEB, "one", GI, 3, 0.0, 0.0]], "class cpu is not a number"),
        ([[WEB, 1.0, GI, -3, 0.0, 0.0]], "class samples is not a non-negative integer"),
        ([[WEB, math.nan, GI, 3, 0.0, 0.0]], "cpu nan is not in"),
        ([[WEB, 1.0, -GI, 3, 0.0, 0.0]], "memory -1.07374e\\+09 is not in"),
        ([[WEB, 1.0, GI, 3, math.inf, 0.0]], "request cpu inf is not in"),
        ([["", 1.0, GI, 3, 0.0, 0.0]], "class name '' is invalid"),
        ([[WEB, 1.0, GI, 3, 0.0, 0.0], [WEB, 2.0, GI, 3, 0.0, 0.0]], "appears more than once"),
        ([[f"c{i}", 1.0, GI, 3, 0.0, 0.0] for i in range(MAX_FLEET_CLASSES + 1)], "at most 1024"),
    ],
)
def test_a_damaged_class_list_skips_its_entry_and_keeps_the_others(  # type: ignore[no-untyped-def]
    rng, classes: object, reason: str
) -> None:
    entries = _with_classes(rng, 2)
    doc = json.loads(checkpoint.encode(FEATURES, entries, now=1.0))
    doc["entries"][0]["classes"] = classes
    _, loaded, skipped = checkpoint.decode(json.dumps(doc).encode())
    # Exchange would refuse such a model whole, so the entry goes: its node sends it again.
    assert loaded == entries[1:]
    assert len(skipped) == 1 and skipped[0].startswith("entry 0:")
    assert re.search(reason, skipped[0]), skipped


def _service(path: Path, **config) -> AggregatorService:  # type: ignore[no-untyped-def]
    return AggregatorService(
        AggregatorConfig(name="agg", checkpoint_path=path, **config), clock=lambda: 150.0
    )


def test_the_classes_survive_a_restart_through_checkpoint_and_journal(rng, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "agg.json"
    first = _service(path)
    first.restore()  # nothing yet; opens the journal
    for i, cpu in enumerate((1.0, 2.0)):
        message = local_model(f"n{i}", rng.uniform(size=(2, 6)), classes=[learned(WEB, cpu, GI)])
        first.exchange(message)
    assert first.save_checkpoint()
    # Accepted after the checkpoint: only in the journal (written at once without an event
    # loop), as after a kill.
    first.exchange(local_model("n2", rng.uniform(size=(2, 6)), classes=[learned(WEB, 9.0, GI)]))
    assert [p.stat().st_size > 0 for _, p in journal.segments(path)] == [True]

    second = _service(path)
    assert second.restore() == 3
    medians = {c.workload_class: c for c in second.served().priors.class_medians}
    assert medians[WEB].cpu_cores == 2.0 and medians[WEB].source == "fleet"


def test_a_restored_node_entry_with_a_childs_count_of_classes_is_skipped(  # type: ignore[no-untyped-def]
    rng, tmp_path: Path
) -> None:
    path = tmp_path / "agg.json"
    many = [learned(f"ns/Job/{i}", 1.0, GI) for i in range(300)]
    then = SenderPolicy(frozenset({"agg-b", "agg-c"}))
    entries = [
        validate_local_model(
            local_model(node, rng.uniform(size=(2, 6)), classes=many), FEATURES, 140.0, (), then
        )[0]
        for node in ("agg-b", "agg-c")
    ]
    path.write_bytes(checkpoint.encode(FEATURES, entries, now=140.0))
    # agg-c was a child when the file was written; it no longer is, so it is one node again.
    service = _service(path, policy=SenderPolicy(frozenset({"agg-b"})))
    assert service.restore() == 1
    assert [e.node for e in service.store.entries()] == ["agg-b"]
