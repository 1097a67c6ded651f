"""The run's ``InputEvent``, built without pydantic validation.

The runtime makes one ``InputEvent`` per record from a value it already
admitted through the typed codec and an id it derived (``RunIdentity``), so
validating them again only costs: about 3 us a record on the 2-core
machine, a twentieth of a trivial record's run (issue 33). What it builds is
what ``InputEvent(input=value, id=event_id)`` builds: the same field values
in the same order, the same ``model_fields_set`` (so its journaled form, which
records the fields set, is the same), no extra fields, ``type`` filled in as
``Event.model_post_init`` fills it. ``tests/unit/test_input_event.py`` holds
the two equal.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flink_agents.api.events.event import InputEvent

__all__ = ["input_event"]

_FIELDS_SET = frozenset({"input", "id"})
_SET_DICT = object.__setattr__


def input_event(value: Any, event_id: UUID) -> InputEvent:
    """``InputEvent(input=value, id=event_id)``, without its validation.

    Args:
        value: The record's value, as admitted (``runtime.execution.state``).
        event_id: The event's id (``RunIdentity.event_id``).
    """
    event = InputEvent.__new__(InputEvent)
    _SET_DICT(event, "__dict__", {
        "id": event_id, "type": InputEvent.EVENT_TYPE, "attributes": {},
        "upstream_event_id": None, "upstream_action_name": None, "input": value,
    })
    _SET_DICT(event, "__pydantic_fields_set__", set(_FIELDS_SET))
    _SET_DICT(event, "__pydantic_extra__", {})
    _SET_DICT(event, "__pydantic_private__", None)
    return event
