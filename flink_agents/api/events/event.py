"""Events: what actions react to and send.

Events are pydantic models; anything that crosses a process or a checkpoint is
serialized by the runtime's typed codec. Every event class has an
``EVENT_TYPE`` string that ``@action`` may name instead of the class; a
subclass that does not set one gets ``"<module>.<qualname>"``.

Two ways of writing an event work, as in Flink Agents 0.3.1:

* declared fields on a subclass (``class Order(Event): order_id: str``);
* a *unified* event, no subclass needed: ``Event(type="my_event",
  attributes={"field1": "test"})``, read back with ``event.get_attr("field1")``.
  Actions listening to ``"my_event"`` receive it: the runtime routes an event
  by its ``type`` (``get_type()``), which defaults to the class's
  ``EVENT_TYPE``.

Serialized (``model_dump``, ``model_dump_json``) in 0.3.1's form, which its
Java side reads too: ``{"id": ..., "type": ..., "attributes": {...}}``, the
declared fields and extra attributes inside ``attributes`` (a field this
runtime adds to a 0.3.1 event is left out while it has its default, see
``JSON_OMIT_DEFAULT``). Validating such a dict (``model_validate``,
``from_json``) moves the attributes that name declared fields back into
them. Pass ``context={EVENT_FIELDS_FLAT: True}`` to get the fields beside
``id`` and ``type`` instead (the event log's records).

``pyflink.common.Row`` values may travel in events (inputs, outputs, any
field or attribute): ``model_dump_json`` writes a Row as 0.3.1 does,
``{"type": "Row", "values": [...], "fields": [...]}``, and ``from_json``
reads it back as a Row. This module imports PyFlink only when it meets such
a value.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from typing import Any, ClassVar, Dict, Optional, TypeVar
from uuid import UUID, SafeUUID

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SerializationInfo, SerializerFunctionWrapHandler
from pydantic import model_serializer, model_validator

__all__ = ["EVENT_FIELDS_FLAT", "Event", "InputEvent", "OutputEvent", "row_to_json", "rows_from_json"]

#: Serialization context key: with ``context={EVENT_FIELDS_FLAT: True}`` an
#: event's fields are written beside ``id`` and ``type``, not in ``attributes``.
EVENT_FIELDS_FLAT = "flink_agents.event_fields_flat"

_MISSING = object()

E = TypeVar("E", bound="Event")

# Fields every event has; ``get_attr``/``set_attr`` address the data beside them.
_BASE_FIELDS = frozenset({"id", "type", "attributes", "upstream_event_id", "upstream_action_name"})
# Lineage fields and the names their JSON form uses (Flink Agents HEAD's wire names).
_LINEAGE_ALIASES = (("upstream_event_id", "upstreamEventId"), ("upstream_action_name", "upstreamActionName"))


def _unsent_event_id() -> UUID:
    """A random version-4 UUID from ``random`` rather than ``os.urandom``: the
    id of an event never sent needs to be unique, not unpredictable, and the
    system call (which releases the GIL) cost more than the rest of
    constructing a small event. ``random`` reseeds in a forked child.
    Built as ``UUID(int=..., version=4)`` builds it (RFC 9562 section 5.4:
    version 4, variant 10), without its argument checks."""
    made = object.__new__(UUID)
    _UUID_INT.__set__(made, (random.getrandbits(128) & _V4_CLEAR) | _V4_SET)
    _UUID_SAFE.__set__(made, _SAFE_UNKNOWN)
    return made


_UUID_INT = UUID.__dict__["int"]  # the slots UUID.__init__ fills
_UUID_SAFE = UUID.__dict__["is_safe"]
_SAFE_UNKNOWN = SafeUUID.unknown  # read once: an enum member read through its class is a descriptor call
_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_V4_SET = (4 << 76) | (0x8000 << 48)


def _row_class() -> Any:
    """``pyflink.common.Row`` if PyFlink is loaded in this process, else None
    (then no value can be a Row)."""
    module = sys.modules.get("pyflink.common.types")
    return getattr(module, "Row", None)


def row_to_json(value: Any) -> Dict[str, Any]:
    """A ``pyflink.common.Row`` as the JSON form Flink Agents 0.3.1 writes:
    ``{"type": "Row", "values": [...], "fields": [...]}`` (``fields`` only
    for a Row with field names), plus ``"row_kind"`` (the ``RowKind`` name)
    when the kind is not ``INSERT``, which 0.3.1 drops.

    Raises:
        TypeError: ``value`` is not a Row.
    """
    row_cls = _row_class()
    if row_cls is None or not isinstance(value, row_cls):
        raise TypeError(f"expected a pyflink.common.Row, got a {type(value).__name__}")
    out: Dict[str, Any] = {"type": "Row", "values": list(value._values)}
    fields = getattr(value, "_fields", None)
    if fields:
        out["fields"] = list(fields)
    kind = value.get_row_kind()
    if kind.name != "INSERT":
        out["row_kind"] = kind.name
    return out


def rows_from_json(data: Any) -> Any:
    """``data`` with every ``{"type": "Row", "values": [...]}`` dict (at any
    depth in dicts and lists) turned back into a ``pyflink.common.Row``, as
    0.3.1's ``Event.from_json`` does; field names and a ``row_kind`` are
    restored when present.

    Raises:
        ImportError: ``data`` holds a Row and PyFlink is not installed.
    """
    if isinstance(data, list):
        return [rows_from_json(item) for item in data]
    if not isinstance(data, dict):
        return data
    if data.get("type") == "Row" and isinstance(data.get("values"), list):
        from pyflink.common import Row, RowKind

        values = [rows_from_json(v) for v in data["values"]]
        row = Row(*values)
        if data.get("fields"):
            row.set_field_names(list(data["fields"]))
        if data.get("row_kind"):
            row.set_row_kind(RowKind[data["row_kind"]])
        return row
    return {key: rows_from_json(value) for key, value in data.items()}


def _json_fallback(value: Any) -> Any:
    """pydantic's ``fallback`` for values it cannot serialize: Rows as
    ``row_to_json``; anything else is refused with a ``TypeError``."""
    row_cls = _row_class()
    if row_cls is not None and isinstance(value, row_cls):
        return row_to_json(value)
    raise TypeError(f"cannot serialize a {type(value).__module__}.{type(value).__qualname__} as JSON")


class Event(BaseModel):
    """Base class of all events.

    Attributes:
        id: Identifier of the event. The runtime replaces it when the event is
            sent with one derived from (key, record sequence, send ordinal), so a
            replay re-derives the same ids; the default is only for events that
            are never sent (0.3.1 derives it from the content instead; call
            ``validate_and_set_id`` for that).
        type: The type the event is routed by: actions listening to this
            string receive it. Defaults to the class's ``EVENT_TYPE`` for a
            subclass; required for ``Event`` itself (a ``ValidationError``
            without it, as in 0.3.1).
        attributes: Data of a unified event (0.3.1's ``attributes`` map),
            read and written with ``get_attr``/``set_attr``.
        upstream_event_id: Lineage (Flink Agents HEAD): the id of the event
            whose action sent this one; None for an ``InputEvent`` and an
            event never sent. Set by the runtime when an action sends the
            event (a value the caller gave is overwritten) and journaled with
            it, so a replay reads the same lineage back.
        upstream_action_name: Lineage: the name of the action that sent this
            event (``agent_run_begin_action`` for an ``AgentRunBeginEvent``);
            None where ``upstream_event_id`` is None.

    Extra attributes are allowed (as in Flink Agents 0.3). Field values,
    declared, extra and in ``attributes``, must be values the runtime can
    journal: JSON values and the types its codec carries (tuples, sets,
    bytes, datetimes, enums, pydantic models, dataclasses, ``pyflink.common.Row``,
    ...; see ``docs/guarantees.md``). They are checked when the event is sent
    (``RunnerContext.send_event``), by the codec that journals it, so a
    refused value fails the sending action (under its error strategy) with a
    ``TypeError`` naming the action, key, record and field path, e.g.
    ``event OutputEvent.output.items[2] is a builtins.function``. 0.3.1
    checks JSON serializability when the event is built instead; here an
    event may carry values JSON lacks (a tuple, a set) and keep their types.
    It is journaled as it is when the sending action returns.
    """

    model_config = ConfigDict(extra="allow")

    EVENT_TYPE: ClassVar[str] = "_event"

    id: UUID = Field(default_factory=_unsent_event_id)
    type: Optional[str] = None
    attributes: Dict[str, Any] = Field(default_factory=dict)
    upstream_event_id: Optional[UUID] = Field(
        default=None, validation_alias=AliasChoices("upstream_event_id", "upstreamEventId"),
    )
    upstream_action_name: Optional[str] = Field(
        default=None, validation_alias=AliasChoices("upstream_action_name", "upstreamActionName"),
    )

    # Field name -> the attribute name 0.3.1 writes it under (a field kept
    # here in another form, e.g. ChatRequestEvent's output schema).
    JSON_RENAMES: ClassVar[Dict[str, str]] = {}
    # Fields this runtime adds to a 0.3.1 event: left out of the JSON form
    # while they have their default, so 0.3.1 readers see 0.3.1's shape.
    JSON_OMIT_DEFAULT: ClassVar[frozenset] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _fields_from_attributes(cls, data: Any) -> Any:
        """0.3.1's form in: entries of ``attributes`` that name a declared
        field (or its ``JSON_RENAMES`` name) become that field, unless the
        field is also given directly. (``model_validate`` does it first too:
        a subclass with its own ``__init__`` gets the data as arguments
        before this validator runs.)"""
        if not isinstance(data, dict):
            return data
        if cls is Event and not data.get("type"):
            # As 0.3.1: an event of the base class is routed by its type alone.
            raise ValueError('an Event needs a type: Event(type="my_event", attributes={...})')
        attributes = data.get("attributes")
        if not attributes or not isinstance(attributes, dict) or len(cls.model_fields) == len(_BASE_FIELDS):
            return data
        fields = cls.model_fields
        renamed = {v: k for k, v in cls.JSON_RENAMES.items()}
        lifted: Dict[str, Any] = {}
        for key in attributes:
            name = renamed.get(key, key)
            if name in fields and name not in _BASE_FIELDS and name not in data:
                lifted[name] = key
        if not lifted:
            return data
        data = dict(data)
        rest = dict(attributes)
        for name, key in lifted.items():
            data[name] = rest.pop(key)
        data["attributes"] = rest
        return data

    @classmethod
    def model_validate(cls: type[E], obj: Any, **kwargs: Any) -> E:  # type: ignore[override]
        """pydantic's ``model_validate``, reading 0.3.1's form too (see
        ``_fields_from_attributes``)."""
        return super().model_validate(cls._fields_from_attributes(obj), **kwargs)

    @classmethod
    def model_validate_json(cls: type[E], json_data: str | bytes, **kwargs: Any) -> E:  # type: ignore[override]
        """pydantic's ``model_validate_json``, reading 0.3.1's form too."""
        return cls.model_validate(json.loads(json_data), **kwargs)

    @model_serializer(mode="wrap")
    def _as_031(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """0.3.1's form out (see the module docstring)."""
        data = handler(self)
        if not isinstance(data, dict):
            return data
        # Lineage goes beside id and type under Flink Agents HEAD's names,
        # and only when set: an event without lineage serializes as in 0.3.1.
        lineage: Dict[str, Any] = {}
        for name, alias in _LINEAGE_ALIASES:
            value = data.pop(name, None)
            if value is not None:
                lineage[alias] = value
        context = info.context
        if context and context.get(EVENT_FIELDS_FLAT):
            data.update(lineage)
            return data
        out: Dict[str, Any] = {}
        for key in ("id", "type"):
            value = data.pop(key, _MISSING)
            if value is not _MISSING:
                out[key] = value
        out.update(lineage)
        attributes = data.pop("attributes", _MISSING)
        cls = type(self)
        for name in cls.JSON_OMIT_DEFAULT:
            if name in data and getattr(self, name) == cls.model_fields[name].get_default(call_default_factory=True):
                del data[name]
        renames = cls.JSON_RENAMES
        merged = {renames.get(k, k): v for k, v in data.items()} if renames else data
        if attributes is not _MISSING:
            merged.update(attributes)
            out["attributes"] = merged
        elif merged:
            out["attributes"] = merged
        return out

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "EVENT_TYPE" not in cls.__dict__:
            cls.EVENT_TYPE = f"{cls.__module__}.{cls.__qualname__}"

    def model_post_init(self, context: Any, /) -> None:
        """Fill ``type`` with the class's ``EVENT_TYPE`` when not given (also
        for events read back from journals written before ``type`` existed)."""
        if self.type is None:
            self.__dict__["type"] = type(self).EVENT_TYPE

    def get_type(self) -> str:
        """The type string this event is routed by (``type``)."""
        return self.type if self.type is not None else type(self).EVENT_TYPE

    def get_attr(self, name: str) -> Any:
        """The value of attribute ``name``, or None if the event has none.

        Looked up as 0.3.1 does, in ``attributes`` first; then, for events
        with declared fields, the field or extra attribute of that name (so
        ``InputEvent(input=x).get_attr("input")`` is ``x``).

        Raises:
            TypeError: ``name`` is not a str.
        """
        if not isinstance(name, str):
            raise TypeError(f"get_attr: name must be a str, got a {type(name).__name__}")
        if name in self.attributes:
            return self.attributes[name]
        if name not in _BASE_FIELDS:
            if name in type(self).model_fields:
                return getattr(self, name)
            extra = self.__pydantic_extra__
            if extra and name in extra:
                return extra[name]
        return None

    def set_attr(self, name: str, value: Any) -> None:
        """Set attribute ``name`` to ``value``.

        A declared field or an existing extra attribute of that name is
        assigned (not validated again); any other name goes into
        ``attributes``, as in 0.3.1. The value is checked when the event is
        sent (see the class docstring).

        Raises:
            TypeError: ``name`` is not a str.
        """
        if not isinstance(name, str):
            raise TypeError(f"set_attr: name must be a str, got a {type(name).__name__}")
        if name not in _BASE_FIELDS and name not in self.attributes:
            extra = self.__pydantic_extra__
            if name in type(self).model_fields or (extra and name in extra):
                setattr(self, name, value)
                return
        self.attributes[name] = value

    def model_dump_json(self, **kwargs: Any) -> str:
        """The event as JSON text (pydantic's ``model_dump_json``), with
        ``pyflink.common.Row`` values written as 0.3.1 writes them
        (``row_to_json``) unless the caller passes its own ``fallback``.

        Raises:
            pydantic_core.PydanticSerializationError: A value has no JSON form.
        """
        kwargs.setdefault("fallback", _json_fallback)
        return super().model_dump_json(**kwargs)

    def validate_and_set_id(self) -> "Event":
        """Check that the event has a JSON form and set ``id`` from its
        content, as Flink Agents 0.3.1 does when it builds an event: a
        version-3 UUID from the MD5 of the JSON without ``id`` (equal
        content, equal id). The runtime does not call it: a sent event gets
        its id from (key, record, send ordinal) instead, which stays unique
        when two equal events are sent.

        Returns:
            The event itself.

        Raises:
            pydantic_core.PydanticSerializationError: A value has no JSON form.
        """
        content = self.model_dump_json(exclude={"id"})
        self.id = UUID(bytes=hashlib.md5(content.encode()).digest(), version=3)
        return self

    def reconstruct_from(self: E, source: Event) -> E:
        """A copy of this event standing for the same occurrence as
        ``source``: its ``id`` and lineage (``upstream_event_id``,
        ``upstream_action_name``), as Flink Agents HEAD's
        ``Event.reconstruct_from``; custom ``from_event`` factories end with
        ``return result.reconstruct_from(event)``."""
        return self.model_copy(update={
            "id": source.id,
            "upstream_event_id": source.upstream_event_id,
            "upstream_action_name": source.upstream_action_name,
        })

    @classmethod
    def from_event(cls: type[E], event: Event) -> E:
        """Return ``event`` as an instance of ``cls``.

        An instance of ``cls`` is returned as it is. Otherwise its declared
        and extra fields, with entries of its ``attributes`` that name fields
        of ``cls``, are validated as a ``cls`` (so a unified
        ``Event(type=..., attributes={"input": x})`` reads as an
        ``InputEvent``); the result keeps ``event.id`` and lineage and has
        ``cls``'s type.

        Args:
            event: Any event whose fields (declared, extra or in
                ``attributes``) fit ``cls``.

        Raises:
            pydantic.ValidationError: The fields do not fit ``cls``.
        """
        if isinstance(event, cls):
            return event
        data = {k: v for k, v in event.__dict__.items() if k not in _BASE_FIELDS}
        data.update(event.__pydantic_extra__ or {})
        attributes = dict(event.attributes)
        for name in cls.model_fields:
            if name not in _BASE_FIELDS and name in attributes and name not in data:
                data[name] = attributes.pop(name)
        data.update(
            id=event.id, attributes=attributes,
            upstream_event_id=event.upstream_event_id, upstream_action_name=event.upstream_action_name,
        )
        if cls is not Event and cls.EVENT_TYPE != Event.EVENT_TYPE:
            data["type"] = cls.EVENT_TYPE
        else:
            data["type"] = event.get_type()
        return cls.model_validate(data)

    @classmethod
    def from_json(cls: type[E], json_str: str | bytes) -> E:
        """An event of class ``cls`` from JSON text (``model_dump_json``'s
        output, or 0.3.1's), with ``pyflink.common.Row`` values rebuilt
        (``rows_from_json``) in its fields and attributes.

        Args:
            json_str: A JSON object with a non-empty ``"type"``.

        Raises:
            ValueError: The text is not a JSON object, or has no non-empty
                ``type`` (as 0.3.1).
            pydantic.ValidationError: The fields do not fit ``cls``.
        """
        data = json.loads(json_str)
        if not isinstance(data, dict):
            raise ValueError(f"Event JSON must be an object, got {type(data).__name__}")
        if not data.get("type"):
            raise ValueError("Event JSON must contain a non-empty 'type' field.")
        rebuilt = {k: (v if k in ("id", "type") else rows_from_json(v)) for k, v in data.items()}
        return cls.model_validate(rebuilt)


class InputEvent(Event):
    """Sent by the runtime for each input record; ``input`` is the record's value.

    Built as in 0.3.1 (``InputEvent(value)`` or ``InputEvent(input=value)``).
    """

    EVENT_TYPE: ClassVar[str] = "_input_event"

    input: Any

    def __init__(self, input: Any, **data: Any) -> None:
        super().__init__(input=input, **data)


class OutputEvent(Event):
    """Sent by an action to emit ``output`` downstream of the agent.

    Built as in 0.3.1 (``OutputEvent(value)`` or ``OutputEvent(output=value)``).
    """

    EVENT_TYPE: ClassVar[str] = "_output_event"

    output: Any

    def __init__(self, output: Any, **data: Any) -> None:
        super().__init__(output=output, **data)
