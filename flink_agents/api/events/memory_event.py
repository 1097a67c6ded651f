"""Memory observation events (Flink Agents HEAD's ``memory_event`` module).

When an action finishes, the runtime folds the memory operations it made
into at most one event per memory scope and operation kind, and sends them
with the action's own events (``runtime.execution.memory_events``): they are
journaled with the action's completion, reach the event log, and trigger
actions listening to their types. Which kinds are generated is set by the
``memory.generate-event*`` options (``flink_agents.api.core_options.MemoryEventOptions``).

Shape, as HEAD's: ``attributes = {"key": <the key as text>, "value": {...}}``.
Short-term and sensory ``value`` maps are flat, dot-separated memory paths
to the last value the action wrote or read there (JSON values; ``bytes`` as
base64 text). A long-term update adds ``attributes["cleared_sets"]``.
"""

from __future__ import annotations

import base64
import json
from typing import Any, ClassVar, Dict, List

from flink_agents.api.events.event import Event

__all__ = [
    "LongTermGetEvent",
    "LongTermSearchEvent",
    "LongTermUpdateEvent",
    "MemoryEvent",
    "SensoryReadEvent",
    "SensoryWriteEvent",
    "ShortTermReadEvent",
    "ShortTermWriteEvent",
]


# Default of ``key``/``value``: the event is being read back (pydantic calls a
# custom ``__init__`` with the stored fields), not built by user code.
REBUILT: Any = object()


def observation_attributes(key: Any, value: Any) -> Dict[str, Any]:
    """``{"key": key, "value": value}`` with ``value`` as JSON values.

    Raises:
        TypeError: ``key`` is not a str, or ``value`` not a dict.
        ValueError: ``value`` holds something without a JSON form (NaN, an object).
    """
    if not isinstance(key, str):
        raise TypeError(f"memory observation attribute 'key' must be a str, got a {type(key).__name__}")
    if not isinstance(value, dict):
        raise TypeError(f"memory observation attribute 'value' must be a dict, got a {type(value).__name__}")
    try:
        normalized = json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False, default=_bytes_as_base64))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"memory observation value is not JSON serializable: {exc}") from exc
    return {"key": key, "value": normalized}


def _bytes_as_base64(value: Any) -> Any:
    """Bytes as base64 text (Jackson's ``byte[]`` form, which HEAD mirrors)."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"a {type(value).__name__} is not JSON serializable")


class MemoryEvent(Event):
    """Base of the seven memory observation events; instantiate a subclass,
    which pins ``EVENT_TYPE``."""

    EVENT_TYPE: ClassVar[str] = "_memory_event"

    def __init__(self, *, key: Any = REBUILT, value: Any = REBUILT, **data: Any) -> None:
        """Raises: TypeError: called on ``MemoryEvent`` itself; see ``observation_attributes``."""
        if type(self) is MemoryEvent:
            raise TypeError("MemoryEvent is abstract; instantiate one of its subclasses")
        if key is REBUILT and value is REBUILT and "attributes" in data:
            super().__init__(**data)  # read back (journal, JSON): the attributes as they were
            return
        data.setdefault("type", type(self).EVENT_TYPE)
        super().__init__(attributes=observation_attributes(key, value), **data)

    @classmethod
    def is_memory_type(cls, event_type: str | None) -> bool:
        """Whether ``event_type`` is one of the seven memory operation types."""
        return event_type in _TYPE_TO_CLASS

    @classmethod
    def from_event(cls, event: Event) -> "MemoryEvent":  # type: ignore[override]
        """The typed memory event (the subclass its ``type`` names) standing
        for ``event``: same id and lineage.

        Raises:
            ValueError: ``event.type`` is no memory event type.
        """
        subclass = _TYPE_TO_CLASS.get(event.get_type())
        if subclass is None:
            raise ValueError(f"not a memory event type: {event.get_type()!r}")
        if isinstance(event, subclass):
            return event
        kwargs: Dict[str, Any] = {"key": event.attributes.get("key"), "value": event.attributes.get("value")}
        if subclass is LongTermUpdateEvent:
            kwargs["cleared_sets"] = event.attributes.get("cleared_sets", [])
        return subclass(**kwargs).reconstruct_from(event)

    @property
    def key(self) -> str:
        """The key (as text) of the run whose action made the operations."""
        return self.attributes.get("key")

    @property
    def value(self) -> Dict[str, Any]:
        """The folded operations (see the module docstring)."""
        return self.attributes.get("value")


class ShortTermWriteEvent(MemoryEvent):
    """An action's writes to short-term memory: path -> last value written."""

    EVENT_TYPE: ClassVar[str] = "_short_term_write_event"


class ShortTermReadEvent(MemoryEvent):
    """An action's reads of short-term memory: path -> last value read."""

    EVENT_TYPE: ClassVar[str] = "_short_term_read_event"


class SensoryWriteEvent(MemoryEvent):
    """An action's writes to sensory memory: path -> last value written."""

    EVENT_TYPE: ClassVar[str] = "_sensory_write_event"


class SensoryReadEvent(MemoryEvent):
    """An action's reads of sensory memory: path -> last value read."""

    EVENT_TYPE: ClassVar[str] = "_sensory_read_event"


class LongTermUpdateEvent(MemoryEvent):
    """Long-term memory adds, updates, deletes (``{set: {item: value|None}}``)
    and whole-set clears (``cleared_sets``)."""

    EVENT_TYPE: ClassVar[str] = "_long_term_update_event"

    def __init__(
        self, *, key: Any = REBUILT, value: Any = REBUILT, cleared_sets: List[str] | None = None, **data: Any,
    ) -> None:
        """Raises: TypeError: ``cleared_sets`` is not a list of str."""
        if key is REBUILT and value is REBUILT and "attributes" in data:
            super().__init__(**data)
            return
        if cleared_sets is not None and (
                not isinstance(cleared_sets, list) or not all(isinstance(s, str) for s in cleared_sets)):
            raise TypeError("long-term update 'cleared_sets' must be a list of str")
        super().__init__(key=key, value=value, **data)
        self.attributes["cleared_sets"] = list(cleared_sets or [])

    @property
    def cleared_sets(self) -> List[str]:
        """Memory sets deleted as a whole during the action."""
        return self.attributes.get("cleared_sets", [])


class LongTermGetEvent(MemoryEvent):
    """Long-term memory gets by id: ``{set: {item: value}}``."""

    EVENT_TYPE: ClassVar[str] = "_long_term_get_event"


class LongTermSearchEvent(MemoryEvent):
    """Long-term memory searches: ``{set: {query: [{"id", "value", "score"}, ...]}}``."""

    EVENT_TYPE: ClassVar[str] = "_long_term_search_event"

    @property
    def results(self) -> Dict[str, Dict[str, List[Dict[str, Any]]]]:
        """Memory set -> query -> ordered hits."""
        return self.attributes.get("value")


_TYPE_TO_CLASS: Dict[str, type[MemoryEvent]] = {
    cls.EVENT_TYPE: cls
    for cls in (
        ShortTermWriteEvent, ShortTermReadEvent, SensoryWriteEvent, SensoryReadEvent,
        LongTermUpdateEvent, LongTermGetEvent, LongTermSearchEvent,
    )
}
