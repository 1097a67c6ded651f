"""Tool results as the model sees them: JSON text, one rule for every path.

A tool's value is journaled as itself (the typed codec keeps its type,
``runtime.durability.codec``); only the text a chat model is shown is
derived here, the same for the built-in tool action (``@tool`` functions,
``Tool`` resources) and for the framework integrations that turn values
into JSON data (``integrations.frameworks.pydantic_ai``):

=================================  ============================================
value                              shown as
=================================  ============================================
``str``                            itself (not JSON-quoted)
JSON values (dict, list, numbers)  JSON (``json.dumps``: as before)
``datetime`` / ``date`` / ``time``   ISO 8601 text
``timedelta``                      ISO 8601 duration text (``"PT1H30M"``)
``UUID`` / ``Decimal``             their text
``Enum`` member                    its value
``tuple``                          a list
``set`` / ``frozenset``            a list, sorted by each item's JSON text
                                   (the same text on every run)
``bytes``                          base64 text
dataclass instance, pydantic model  an object, as pydantic dumps it
                                   (serializers and computed fields applied,
                                   aliases not used)
dict key that is not a ``str``      the key's JSON text (``1`` -> ``"1"``)
anything else                      its ``str()``, as a JSON string
=================================  ============================================

Leaves are converted by ``pydantic_core.to_jsonable_python`` (as Pydantic AI
shows tool returns); containers, dataclasses and models are walked here so
that sets nested anywhere are sorted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from pydantic import BaseModel, PydanticSchemaGenerationError, PydanticUndefinedAnnotation, TypeAdapter
from pydantic_core import PydanticSerializationError, to_jsonable_python

__all__ = ["json_data", "text_for_model"]


def json_data(value: Any) -> Any:
    """``value`` as JSON data (the table in the module docstring).

    Args:
        value: Any value (a tool's result, a framework's tool arguments).

    Returns:
        Dicts with str keys, lists, str, int, float, bool, None; equal
        values give equal data (sets sorted).
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {_key_text(key): json_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_data(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_data(item) for item in value), key=_sort_text)
    if isinstance(value, BaseModel):
        return json_data(value.model_dump(warnings=False))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        adapter = _adapter(type(value))
        if adapter is not None:  # as pydantic dumps it: serializers and computed fields applied
            try:
                return json_data(adapter.dump_python(value, warnings=False))
            except PydanticSerializationError:  # a field pydantic cannot dump: walked below
                pass
        return {field.name: json_data(getattr(value, field.name)) for field in dataclasses.fields(value)}
    return to_jsonable_python(value, bytes_mode="base64", timedelta_mode="iso8601", fallback=str)


def text_for_model(value: Any) -> str:
    """The text a chat model is shown of a tool's result ``value``: a str as
    itself, anything else as the JSON text of ``json_data(value)``
    (``json.dumps`` defaults, so results that are JSON already read as they
    always did, and journaled conversations keep their digests)."""
    if isinstance(value, str):
        return value
    return json.dumps(json_data(value))


@functools.lru_cache(maxsize=256)
def _adapter(cls: type) -> TypeAdapter | None:
    """pydantic's adapter of dataclass ``cls``; None when pydantic cannot
    build one (a field of a type it does not know: the fields are walked)."""
    try:
        return TypeAdapter(cls)
    except (PydanticSchemaGenerationError, PydanticUndefinedAnnotation):
        return None


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    data = json_data(key)
    return data if isinstance(data, str) else json.dumps(data)


def _sort_text(item: Any) -> str:
    return json.dumps(item, sort_keys=True)
