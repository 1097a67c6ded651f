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

from flink_agents.api.events.event import Event
from flink_agents.runtime.durability.codec import Deferred, decode, encode, rebuild_model, surely_encode_all
from flink_agents.runtime.durability.codec_classes import EVENT, class_name, resolve_class
from flink_agents.runtime.durability.values import decode_value as decode_legacy_value

__all__ = ["DeferredEvent", "check_event", "decode_event", "encode_event", "encode_sent"]

_CODEC_VERSION = 2


def encode_event(event: Event) -> Dict[str, Any]:
    """``event`` as a JSON-able dict (``fields``: name -> encoded value).

    Raises:
        TypeError: A field value cannot be encoded (the message names the
            event class and the field path), or the class cannot be found by
            name where the journal is read.
    """
    cls = type(event)
    names, type_name, where = _SHAPES.get(cls) or _shape(cls)
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


def _shape(cls: type) -> Tuple[Tuple[str, ...], str, str]:
    """Per class, once: pydantic's ``model_fields`` is a property that
    costs more than encoding a small event's fields.

    Raises:
        TypeError: The class cannot be found by name (``class_name``).
    """
    shape = _SHAPES[cls] = (tuple(cls.model_fields), class_name(cls, EVENT), f"event {cls.__qualname__}")
    return shape


def check_event(event: Event) -> None:
    """Raise what ``encode_event(event)`` would raise, skipping the encoding
    when it certainly succeeds (``codec.surely_encodes`` of every field):
    the check ``send_event`` makes on every event, which the action loop
    then encodes when the action returns, or when first read.

    Raises:
        TypeError: As ``encode_event``.
    """
    if not _surely_encodes(event):
        encode_event(event)


def encode_sent(event: Event) -> Dict[str, Any] | "DeferredEvent":
    """A sent event's encoding as its step completion holds it, when its
    action returned: a ``DeferredEvent`` when encoding it certainly
    succeeds (``codec.surely_encodes`` of every field), else
    ``encode_event(event)`` now (raising here, in the action, if it fails).

    A deferred event is encoded when a listener is about to run on it (the
    action loop asks, so what is journaled is what the listener was given)
    or when the journal writes the completion, whichever comes first; a run
    that writes no journal never encodes an event no action listens to (an
    ``OutputEvent``). Until then only runtime code holds it: its action
    returned, memory holds copies (``MemoryNode``), and the run's outputs
    are held until it finished, so an output is journaled as it is emitted
    (values shared between events an action sent are read when each is
    encoded, as its listener gets them).

    Raises:
        TypeError: As ``encode_event`` (a value refused, or an event class
            that cannot be found by name where the journal is read).
    """
    if type(event) not in _SHAPES:
        _shape(type(event))  # the class must be nameable, whenever it is encoded
    return DeferredEvent(event) if _surely_encodes(event) else encode_event(event)


class DeferredEvent(Deferred):
    """A sent event whose encoding (``encode_event``) waits for a reader
    (``encode_sent``)."""

    __slots__ = ("event",)

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event

    def _encode(self) -> Dict[str, Any]:
        return encode_event(self.event)


def _surely_encodes(event: Event) -> bool:
    """Whether encoding ``event`` certainly succeeds: ``codec.surely_encodes``
    of each field, nested at most ``_PLAIN_DEPTH`` deep."""
    extra = event.__pydantic_extra__
    return surely_encode_all(event.__dict__.values(), _PLAIN_DEPTH) and (
        not extra or surely_encode_all(extra.values(), _PLAIN_DEPTH))


_PLAIN_DEPTH = 32  # deeper data is encoded when sent, as any other


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
