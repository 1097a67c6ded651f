"""Events as JSON, for journaled step completions.

An event is written as ``{"type": "module:qualname", "fields": {...}}`` with
field values encoded by ``runtime.values`` (pydantic models inside ``Any``
fields keep their class), and read back as an instance of the same class.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict

from flink_agents.api.events.event import Event
from flink_agents.runtime.values import decode_value, encode_value

__all__ = ["decode_event", "encode_event"]


def encode_event(event: Event) -> Dict[str, Any]:
    """``event`` as a JSON-able dict.

    Raises:
        TypeError: A field value has no JSON form.
    """
    cls = type(event)
    fields = {name: encode_value(getattr(event, name)) for name in cls.model_fields}
    fields.update({name: encode_value(v) for name, v in (event.model_extra or {}).items()})
    return {"type": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}


def decode_event(data: Dict[str, Any]) -> Event:
    """Inverse of ``encode_event``.

    Raises:
        ImportError, AttributeError: The event class cannot be found.
    """
    module, _, qualname = data["type"].partition(":")
    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    return cls(**{name: decode_value(v) for name, v in data["fields"].items()})
