"""Checkpoint-stable values: what memory, keyed state and events may hold.

Values must be JSON-like: None, bool, int, float, str, and lists, tuples and
str-keyed dicts of them. ``check_json_like`` copies a value while checking it,
so later mutation of the caller's object cannot change stored state.
Pydantic models in event fields and inputs are encoded with a type tag
(``{"$model": "module:qualname", "data": {...}}``) so they come back as models
after a restore.
"""

from __future__ import annotations

import importlib
import math
import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel

__all__ = ["MODEL_TAG", "check_json_like", "decode_value", "encode_value"]

_SCALARS = (str, int, float, bool, type(None))
MODEL_TAG = "$model"  # marks a pydantic model in encoded values


def check_json_like(value: Any, path: str) -> Any:
    """A copy of ``value`` if it is JSON-like.

    Raises:
        TypeError: Some part is not JSON-like; the message names its path.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError(f"memory value at {path!r} is {value!r}, which JSON cannot hold")
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        return [check_json_like(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"memory value at {path!r} has a non-str key {k!r}")
            out[k] = check_json_like(v, f"{path}.{k}")
        return out
    raise TypeError(
        f"memory value at {path!r} is a {type(value).__name__}, which is not "
        "checkpoint-stable; store JSON-like values (None, bool, int, float, str, "
        "list, dict with str keys), e.g. model.model_dump(mode='json')"
    )


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


def _import(name: str) -> type:
    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def decode_value(value: Any) -> Any:
    """Inverse of ``encode_value``."""
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if isinstance(value, dict):
        if MODEL_TAG in value and len(value) == 2 and "data" in value:
            return _import(value[MODEL_TAG]).model_validate(value["data"])
        return {k: decode_value(v) for k, v in value.items()}
    return value
