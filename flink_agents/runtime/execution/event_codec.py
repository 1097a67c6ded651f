"""Events as JSON, for journaled step completions.

An event is written as ``{"type": "module:qualname", "fields": {...}, "c": 2}``
with its declared and extra fields encoded by the typed codec
(``runtime.durability.codec``: a tuple, an enum or a model in an ``Any`` field keeps its
type), and read back as an instance of the same class with the same field
values, validated against the class as it is now (``codec.rebuild_model``:
a field retyped or added since is converted or defaulted). Its class is
found by name, through the codec's class registry, so an event class defined
in the job's main script reads back on any worker (``runtime.durability.codec_classes``).

Completions written before (no ``"c"``) still read: their fields in the
earlier untyped form, validated by the class.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple
from uuid import UUID

from flink_agents.api.events.event import Event
from flink_agents.runtime.durability.codec import decode, encode, rebuild_model
from flink_agents.runtime.durability.codec_classes import EVENT, class_name, resolve_class
from flink_agents.runtime.durability.values import decode_value as decode_legacy_value

__all__ = ["check_event", "decode_event", "encode_event"]

_CODEC_VERSION = 2


def encode_event(event: Event) -> Dict[str, Any]:
    """``event`` as a JSON-able dict (``fields``: name -> encoded value).

    Raises:
        TypeError: A field value cannot be encoded (the message names the
            event class and the field path), or the class cannot be found by
            name where the journal is read.
    """
    cls = type(event)
    shape = _SHAPES.get(cls)
    if shape is None:
        # Per class, once: pydantic's ``model_fields`` is a property that
        # costs more than encoding a small event's fields.
        shape = _SHAPES[cls] = (tuple(cls.model_fields), class_name(cls, EVENT), f"event {cls.__qualname__}")
    names, type_name, where = shape
    state = event.__dict__
    # One encode for all declared fields: a refused value's path is still
    # "event Class.field.part" (the codec appends ".field" to ``where``).
    fields = encode({name: state[name] for name in names if name in state}, where)
    extra = event.__pydantic_extra__
    if extra:
        for name, value in extra.items():
            fields[name] = encode(value, f"{where}.{name}")
    out: Dict[str, Any] = {"type": type_name, "fields": fields, "c": _CODEC_VERSION}
    fields_set = event.__pydantic_fields_set__
    if fields_set != fields.keys():
        out["set"] = sorted(fields_set)
    return out


# Per event class: (field names, journaled class name, error-path prefix).
_SHAPES: Dict[type, Tuple[Tuple[str, ...], str, str]] = {}


def check_event(event: Event) -> None:
    """Raise what ``encode_event(event)`` would raise, skipping the encoding
    when every field holds a value no encoding can refuse (a str, bool,
    None, UUID, small int, finite float, or an empty dict or list): the
    check ``send_event`` makes on every event, which the action loop then
    encodes anyway when the action returns.

    Raises:
        TypeError: As ``encode_event``.
    """
    state = event.__dict__
    extra = event.__pydantic_extra__
    for values in (state.values(), extra.values() if extra else ()):
        for value in values:
            kind = type(value)
            if kind in _PLAIN or (kind is int and -_SMALL_INT < value < _SMALL_INT) or (
                    kind is float and value - value == 0.0) or ((kind is dict or kind is list) and not value):
                continue
            encode_event(event)
            return


_PLAIN = frozenset({str, bool, type(None), UUID})
_SMALL_INT = 2**63


def decode_event(data: Dict[str, Any]) -> Event:
    """Inverse of ``encode_event``.

    Raises:
        ClassGone: The event class is not here (a ``DecodeError``).
    """
    cls: Any = resolve_class(data["type"], EVENT)
    if data.get("c") == _CODEC_VERSION:
        fields = {name: decode(value) for name, value in data["fields"].items()}
        return rebuild_model(cls, fields, data.get("set"))
    return cls(**{name: decode_legacy_value(v) for name, v in data["fields"].items()})
