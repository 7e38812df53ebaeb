"""Saving and restoring the aggregator's entries, so a restart does not send the fleet back to a
cold start.

The file is JSON (small: a few hundred bytes per node), written atomically — a temporary file in
the same directory, fsync, rename over the old one, fsync of the directory — so a crash mid-write
leaves the previous checkpoint intact. Loading re-validates every entry with the same checks as
``Exchange``: a damaged or tampered file can cost the saved state, never poison the model. A file
that cannot be read or parsed raises :class:`CheckpointError`, whatever its shape (nesting past
the parser's recursion limit, numbers no float can hold, ...), which the caller logs and ignores;
an entry that cannot be used is skipped with a reason — a damaged list of classes too, as
``Exchange`` would refuse the whole model (its node sends it again within seconds). An entry
without the list (a checkpoint of an older version) has no classes. A kill during a write leaves
the temporary file behind: :func:`remove_orphans` deletes those at start.

What the checkpoint has not saved yet is in the ``journal`` beside it
(docs/architecture.md#failure-behaviour).

Neighbours: ``store`` holds the entries, ``service`` decides when to save and load, ``journal``
keeps what came in since.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from aggregator.validate import (
    MAX_FLEET_CLASSES,
    NodeEntry,
    ValidationError,
    check_class,
    check_costs,
    check_distinct,
    check_factor,
    check_feature_names,
    check_node_name,
    check_timestamp,
    check_weight,
    class_footprint,
)
from carico.footprint import ClassFootprint

FORMAT = "carico-aggregator-checkpoint"
FORMAT_VERSION = 1


class CheckpointError(Exception):
    """The checkpoint file is missing, unreadable or malformed."""


def encode(feature_names: tuple[str, ...] | None, entries: list[NodeEntry], now: float) -> bytes:
    doc = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "written_at": now,
        "feature_names": list(feature_names) if feature_names is not None else None,
        "entries": [
            {
                "node": e.node,
                "sequence": e.sequence,
                "sent_at": e.sent_at,
                "received_at": e.received_at,
                "weight": e.weight,
                "d": e.d,
                "r": e.r,
                "u": list(e.u),
                "sigma": list(e.sigma),
                "per_pod_costs": list(e.per_pod_costs),
                # [name, cpu, memory, samples, request cpu, request memory] per class
                "classes": [
                    [
                        c.name,
                        c.footprint.cpu,
                        c.footprint.memory,
                        c.samples,
                        c.requests.cpu,
                        c.requests.memory,
                    ]
                    for c in e.classes
                ],
            }
            for e in entries
        ],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}."


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see either the old or the new file."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def remove_orphans(path: Path) -> list[str]:
    """Delete the temporary files a write of ``path`` left when it was killed; their names."""
    removed = []
    for orphan in path.parent.glob(f"{_tmp_prefix(path)}*.tmp"):
        try:
            orphan.unlink()
        except OSError:
            continue
        removed.append(orphan.name)
    return removed


def _float(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{what} is not a number")
    return float(value)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{what} is not a non-negative integer")
    return value


def _floats(value: Any, what: str) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise ValidationError(f"{what} is not a list")
    return tuple(_float(v, what) for v in value)


def _classes(value: Any) -> tuple[ClassFootprint, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_FLEET_CLASSES:
        raise ValidationError(f"classes are not a list of at most {MAX_FLEET_CLASSES}")
    result = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 6 and isinstance(item[0], str)):
            raise ValidationError("a class is not [name, cpu, memory, samples, requests]")
        name = item[0]
        cpu, memory = _float(item[1], "class cpu"), _float(item[2], "class memory")
        samples = _int(item[3], "class samples")
        request_cpu = _float(item[4], "class request cpu")
        request_memory = _float(item[5], "class request memory")
        check_class(name, "learned", cpu, memory, request_cpu, request_memory)
        result.append(class_footprint(name, cpu, memory, samples, request_cpu, request_memory))
    check_distinct([c.name for c in result])
    return tuple(result)


def _entry(raw: Any, feature_count: int) -> NodeEntry:
    if not isinstance(raw, dict):
        raise ValidationError("entry is not an object")
    node = raw.get("node")
    if not isinstance(node, str):
        raise ValidationError("entry has no node name")
    check_node_name(node)
    d, r = _int(raw.get("d"), "d"), _int(raw.get("r"), "r")
    if d != feature_count:
        raise ValidationError(f"entry {node} has d={d}, the feature set has {feature_count}")
    u, sigma = _floats(raw.get("u"), "u"), _floats(raw.get("sigma"), "sigma")
    check_factor(d, r, u, sigma)
    sent_at = _float(raw.get("sent_at"), "sent_at")
    received_at = _float(raw.get("received_at"), "received_at")
    check_timestamp(sent_at)
    check_timestamp(received_at)
    weight = check_weight(_int(raw.get("weight"), "weight"))
    costs = check_costs(_floats(raw.get("per_pod_costs"), "per_pod_costs"), weight)
    return NodeEntry(
        node=node,
        sequence=_int(raw.get("sequence"), "sequence"),
        sent_at=sent_at,
        received_at=received_at,
        weight=weight,
        d=d,
        r=r,
        u=u,
        sigma=sigma,
        per_pod_costs=costs,
        classes=_classes(raw.get("classes")),
    )


def decode(data: bytes) -> tuple[tuple[str, ...] | None, list[NodeEntry], list[str]]:
    """Parse a checkpoint: (feature names, valid entries, one message per entry skipped)."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"not valid JSON: {exc}") from exc
    except RecursionError:
        raise CheckpointError("not valid JSON: nested too deeply") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError("not a Carico aggregator checkpoint")
    if doc.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"unsupported checkpoint version {doc.get('version')!r}")
    raw_names, raw_entries = doc.get("feature_names"), doc.get("entries")
    if not isinstance(raw_entries, list):
        raise CheckpointError("checkpoint has no entry list")
    if raw_names is None:
        return None, [], []
    if not isinstance(raw_names, list) or not all(isinstance(n, str) for n in raw_names):
        raise CheckpointError("checkpoint feature names are not a list of strings")
    try:
        names = check_feature_names(raw_names, len(raw_names))
    except ValidationError as exc:
        raise CheckpointError(str(exc)) from exc
    entries: list[NodeEntry] = []
    skipped: list[str] = []
    for index, raw in enumerate(raw_entries):
        try:
            entries.append(_entry(raw, len(names)))
        except ValidationError as exc:
            skipped.append(f"entry {index}: {exc}")
        except (ValueError, TypeError, OverflowError) as exc:  # 10**400 is JSON, no float
            skipped.append(f"entry {index}: unusable ({type(exc).__name__}: {str(exc)[:100]})")
    return names, entries, skipped


def load(path: Path) -> tuple[tuple[str, ...] | None, list[NodeEntry], list[str]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror}") from exc
    return decode(data)
