"""Checkpoints round-trip, are written atomically, and a damaged file never yields bad entries."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import checkpoint
from aggregator.validate import validate_local_model

from .conftest import local_model

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
ENTRY_KEYS = ("node", "sequence", "sent_at", "received_at", "weight", "d", "r", "u", "sigma")
VALID = json.loads(
    checkpoint.encode(
        FEATURES,
        [
            validate_local_model(
                local_model("n1", np.random.default_rng(1).uniform(size=(2, 6)), costs=(0.1,)),
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
