"""The earlier, untyped value form, kept for two uses only.

- Reading what earlier releases wrote (keyed state of schema version 1,
  journal payloads and step completions without the codec's ``"c"`` mark):
  ``decode_value``.
- A canonical JSON form of keys and call arguments for ids and digests
  (``encode_value``): enums as their values, UUIDs as text, tuples as lists,
  pydantic models tagged ``{"$model": "module:qualname", "data": {...}}``.
  Changing it would change the ids and digests of journals already written.

Everything that is stored and read back goes through the typed codec,
``runtime.durability.codec``.
"""

from __future__ import annotations

import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel

from flink_agents.runtime.durability.codec_classes import Kind, MODEL, resolve_class

__all__ = ["MODEL_TAG", "decode_value", "encode_value"]

_LEGACY_MODEL = Kind("$model", MODEL.what, MODEL.accepts)
_SCALARS = (str, int, float, bool, type(None))
MODEL_TAG = "$model"  # marks a pydantic model in encoded values


def encode_value(value: Any) -> Any:
    """``value`` as JSON, with pydantic models tagged by class; UUIDs and
    enums become their string/value (pydantic fields typed so read them back).

    Raises:
        TypeError: A part has no JSON form.
    """
    if isinstance(value, Enum):
        return encode_value(value.value)
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, BaseModel):
        cls = type(value)
        return {MODEL_TAG: f"{cls.__module__}:{cls.__qualname__}", "data": value.model_dump(mode="json")}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode_value(v) for k, v in value.items()}
    raise TypeError(f"value of type {type(value).__name__} cannot be stored in keyed state")


def decode_value(value: Any) -> Any:
    """Inverse of ``encode_value``."""
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if isinstance(value, dict):
        if MODEL_TAG in value and len(value) == 2 and "data" in value:
            return resolve_class(value[MODEL_TAG], _LEGACY_MODEL).model_validate(value["data"])
        return {k: decode_value(v) for k, v in value.items()}
    return value
