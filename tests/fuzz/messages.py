"""Hypothesis strategies for protobuf messages, drawn from the messages' own descriptors.

Every field gets values of its wire type including the extremes a hostile or broken sender could
put there (NaN, infinities, the largest integers, any unicode, enum numbers no version defines,
long repeated fields); :func:`overlaid` mixes a few such fields into a valid message, so the
mutations reach the validation of otherwise sensible reports.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

_F = FieldDescriptor
_INTS = {
    _F.TYPE_UINT32: (0, 2**32 - 1),
    _F.TYPE_UINT64: (0, 2**64 - 1),
    _F.TYPE_INT32: (-(2**31), 2**31 - 1),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1),
    _F.TYPE_ENUM: (-(2**31), 2**31 - 1),
}
doubles = st.one_of(
    st.sampled_from((0.0, -0.0, 1.0, -1.0, 1e308, -1e308, 5e-324, float("nan"))),
    st.sampled_from((float("inf"), float("-inf"))),
    st.floats(),
)


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    if field.type in (_F.TYPE_DOUBLE, _F.TYPE_FLOAT):
        return doubles if field.type == _F.TYPE_DOUBLE else st.floats(width=32)
    if field.type in _INTS:
        low, high = _INTS[field.type]
        return st.one_of(st.sampled_from((low, high, 0, 1)), st.integers(low, high))
    if field.type == _F.TYPE_BOOL:
        return st.booleans()
    if field.type == _F.TYPE_STRING:
        return st.one_of(st.sampled_from(("", "n1", "cpu", "memory")), st.text(max_size=40))
    if field.type == _F.TYPE_BYTES:
        return st.binary(max_size=40)
    raise AssertionError(f"no strategy for {field.full_name}")


def fields_of(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Some of the message's fields with values of their type (nested messages as dicts)."""
    values: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == _F.TYPE_MESSAGE:
            if depth > 2:
                continue
            one: st.SearchStrategy[Any] = fields_of(field.message_type, depth + 1)
        else:
            one = _scalar(field)
        repeated = getattr(field, "is_repeated", None)
        is_repeated = repeated if repeated is not None else field.label == _F.LABEL_REPEATED
        values[field.name] = st.lists(one, max_size=6) if is_repeated else one
    return st.fixed_dictionaries({}, optional=values)


def _fill(message: Message, values: dict[str, Any]) -> Message:
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        if field.type == _F.TYPE_MESSAGE:
            if isinstance(value, list):
                target = getattr(message, name)
                for item in value:
                    _fill(target.add(), item)
            else:
                _fill(getattr(message, name), value)
        elif isinstance(value, list):
            getattr(message, name)[:] = value
        else:
            setattr(message, name, value)
    return message


def messages(cls: type[Message]) -> st.SearchStrategy[Message]:
    """Messages of ``cls`` with any fields set to any values of their types."""
    return fields_of(cls.DESCRIPTOR).map(lambda v: _fill(cls(), v))


def overlaid(valid: st.SearchStrategy[Message]) -> st.SearchStrategy[Message]:
    """A valid message with some of its fields replaced by any values of their types."""

    def overlay(msg: Message) -> st.SearchStrategy[Message]:
        def apply(values: dict[str, Any]) -> Message:
            copy = type(msg)()
            copy.CopyFrom(msg)
            for name in values:
                copy.ClearField(name)
            return _fill(copy, values)

        return fields_of(msg.DESCRIPTOR).map(apply)

    return valid.flatmap(overlay)
