"""Hypothesis strategies: JSON documents drawn from a JSON Schema, and their mutations.

``from_schema`` turns the schemas of the extender's OpenAPI description into documents a
well-behaved client could send; ``mutated_json`` bends such documents the ways a broken or hostile
client would: wrong types, missing and extra fields, huge numbers, NaN and Infinity, deep nesting,
duplicate keys, bytes that are not UTF-8, truncated and oversized bodies. ``mutated_bytes`` does
the byte-level part for any file (kernel output, a kubectl dump).
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import strategies as st

Json = Any
Path = tuple[str | int, ...]

# Strings a real client sends (names the servers know, quantities, policies), mixed with any text.
REALISTIC_STRINGS = (
    "n1",
    "n2",
    "n3",
    "shop",
    "web",
    "100m",
    "1Gi",
    "2",
    "0.5",
    "-1",
    "Always",
    "ReplicaSet",
    "carico-scheduler",
    "",
)
SPECIAL_NUMBERS = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "-0",
    "18446744073709551616",
    "-9223372036854775809",
    "1" * 400,
    "0.1e1",
)
NOT_UTF8 = (b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\x00", b"\x80\x80")

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
any_json = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
strings = st.one_of(st.sampled_from(REALISTIC_STRINGS), st.text(max_size=16))


def from_schema(
    schema: dict[str, Any], components: dict[str, Any], depth: int = 0
) -> st.SearchStrategy[Json]:
    """Documents valid against ``schema`` (the subset of JSON Schema msgspec and openapi emit)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return st.deferred(lambda: from_schema(components[name], components, depth + 1))
    if "anyOf" in schema:
        return st.one_of([from_schema(s, components, depth) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        need = {k: from_schema(v, components, depth + 1) for k, v in props.items() if k in required}
        optional = {
            k: from_schema(v, components, depth + 1) for k, v in props.items() if k not in required
        }
        fixed = st.fixed_dictionaries(need, optional=optional)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and not props:
            values = from_schema(extra, components, depth + 1)
            return st.dictionaries(strings, values, max_size=0 if depth > 4 else 3)
        return fixed
    if kind == "array":
        size = 0 if depth > 4 else 4
        return st.lists(from_schema(schema.get("items", {}), components, depth + 1), max_size=size)
    if kind == "string":
        return strings
    if kind == "integer":
        low = schema.get("minimum", -(2**63))
        return st.integers(min_value=low, max_value=2**63 - 1)
    if kind == "number":
        low = schema.get("exclusiveMinimum")
        return st.floats(
            min_value=low, exclude_min=low is not None, allow_nan=False, allow_infinity=False
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return any_json


# -- structural mutations of a document -------------------------------------------------------


def paths(doc: Json, prefix: Path = ()) -> list[Path]:
    """Every path into ``doc`` (the empty path is the document itself)."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += paths(value, (*prefix, i))
    return found


def _replace(doc: Json, path: Path, change: Any) -> Json:
    """A copy of ``doc`` with the value at ``path`` replaced by ``change(value)`` (a sentinel
    ``_DROP`` removes it)."""
    if not path:
        return change(doc)
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        copy = dict(doc)
        new = _replace(doc[head], rest, change)
        if new is _DROP:
            del copy[head]
        else:
            copy[head] = new
        return copy
    copy_list = list(doc)
    new = _replace(doc[head], rest, change)
    if new is _DROP:
        del copy_list[head]
    else:
        copy_list[head] = new
    return copy_list


_DROP = object()


def _wrong_type(value: Json) -> st.SearchStrategy[Json]:
    return any_json.filter(lambda v: type(v) is not type(value))


def _nested(depth: int) -> Json:
    # A placeholder that ``encode`` spells as ``depth`` nested arrays: json.dumps itself would
    # stop at Python's recursion limit.
    return f"\x00nest{depth}\x00"


_NEST = re.compile(rb'"\\u0000nest(\d+)\\u0000"')


@st.composite
def mutated_doc(draw: st.DrawFn, base: st.SearchStrategy[Json]) -> Json:
    """``base`` with one structural change: a value of the wrong type, a field removed, a field
    added, a huge or deeply nested value."""
    doc = draw(base)
    path = draw(st.sampled_from(paths(doc)))
    how = draw(st.sampled_from(("wrong_type", "drop", "extra", "huge", "nest")))
    if how == "wrong_type":
        new = draw(_wrong_type(_value_at(doc, path)))
        return _replace(doc, path, lambda _: new)
    if how == "drop":
        return doc if not path else _replace(doc, path, lambda _: _DROP)
    if how == "extra":
        key, value = draw(strings), draw(any_json)

        def add(v: Json) -> Json:
            if isinstance(v, dict):
                return {**v, key: value}
            if isinstance(v, list):
                return [*v, value]
            return v

        return _replace(doc, path, add)
    if how == "huge":
        huge = draw(st.sampled_from((2**64, -(2**63) - 1, 10**30, 1e308, "x" * 5000)))
        return _replace(doc, path, lambda _: huge)
    depth = draw(st.sampled_from((64, 400, 5000)))
    return _replace(doc, path, lambda _: _nested(depth))


def _value_at(doc: Json, path: Path) -> Json:
    for part in path:
        doc = doc[part]
    return doc


# -- byte-level mutations -----------------------------------------------------------------------

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes, oversize: int = 0) -> bytes:
    """``data`` with one byte-level change: truncated, a slice cut or repeated, bytes that are not
    UTF-8 inserted, a number replaced by a special one, or (``oversize`` > 0) padded past it."""
    hows = ["truncate", "cut", "repeat", "insert", "not_utf8", "number", "flip"]
    if oversize:
        hows.append("oversize")
    how = draw(st.sampled_from(hows))
    n = len(data)
    at = draw(st.integers(0, n))
    if how == "truncate":
        return data[:at]
    if how == "cut":
        end = draw(st.integers(at, n))
        return data[:at] + data[end:]
    if how == "repeat":
        end = draw(st.integers(at, min(n, at + 64)))
        return data[:end] + data[at:end] * draw(st.integers(1, 50)) + data[end:]
    if how == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if how == "not_utf8":
        return data[:at] + draw(st.sampled_from(NOT_UTF8)) + data[at:]
    if how == "number":
        numbers = list(_NUMBER.finditer(data))
        if not numbers:
            return data + draw(st.sampled_from(SPECIAL_NUMBERS)).encode()
        match = draw(st.sampled_from(numbers))
        special = draw(st.sampled_from(SPECIAL_NUMBERS)).encode()
        return data[: match.start()] + special + data[match.end() :]
    if how == "flip":
        if not n:
            return b"\x00"
        i = min(at, n - 1)
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    return data + b" " * (oversize + 1 - n) if n <= oversize else data


def encode(doc: Json) -> bytes:
    # allow_nan: a float can only be NaN or infinite here on purpose (the tokens are not JSON).
    raw = json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    return _NEST.sub(lambda m: b"[" * int(m[1]) + b"1" + b"]" * int(m[1]), raw)


@st.composite
def duplicate_keys(draw: st.DrawFn, base: st.SearchStrategy[Json]) -> bytes:
    """An object body whose first key appears twice, with two different values."""
    doc = draw(base)
    if not isinstance(doc, dict) or not doc:
        return encode(doc)
    key = next(iter(doc))
    other = draw(any_json)
    return b"{" + encode(key) + b":" + encode(other) + b"," + encode(doc)[1:]


def mutated_json(base: st.SearchStrategy[Json], oversize: int) -> st.SearchStrategy[bytes]:
    """Bodies made from ``base``: as is, structurally mutated, with duplicate keys, or mutated
    byte by byte (truncated, not UTF-8, special numbers, oversized)."""
    return st.one_of(
        base.map(encode),
        mutated_doc(base).map(encode),
        duplicate_keys(base),
        base.map(encode).flatmap(lambda b: mutated_bytes(b, oversize)),
    )
