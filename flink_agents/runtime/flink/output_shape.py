"""The shape an agent's outputs take downstream of ``to_datastream()``.

Flink Agents 0.3.1 passes every ``OutputEvent`` through JSON on its way out
of the agent operator (the event is serialized with pydantic, its
``output`` read back with ``json.loads``, and ``pyflink.common.Row`` values
rebuilt), so downstream operators receive JSON-like values: a pydantic model
or a dataclass arrives as a dict, a tuple or a set as a list, a
``datetime``/``UUID``/``Decimal`` as a string, an enum as its value, a
non-string dict key as a string, ``inf``/``nan`` as None; a ``Row`` stays a
``Row``. Its own e2e tests rely on it (they ``json.dumps`` each output).

``json_like`` reproduces that conversion; it is the default of the Flink
runner's ``to_datastream()``. ``to_datastream(typed_outputs=True)`` hands
the output objects as the actions built them instead (pickled).
"""

from __future__ import annotations

import json
from typing import Any, Dict

import pydantic_core
from pyflink.common import Row

__all__ = ["OutputShapeError", "json_like"]

_ROW = "Row"


class OutputShapeError(TypeError):
    """An output has a value JSON cannot carry (0.3.1 would refuse it when
    the ``OutputEvent`` is built).

    Attributes:
        key: The key whose run produced the output.
    """

    def __init__(self, key: Any, output: Any, cause: Exception) -> None:
        self.key = key
        shown = repr(output)
        if len(shown) > 200:
            shown = shown[:200] + "..."
        super().__init__(
            f"output of key {key!r} cannot be handed downstream as JSON-like data "
            f"(to_datastream() does by default, as Flink Agents 0.3.1): {cause}; output: {shown}. "
            "Emit JSON-serializable values, or call to_datastream(typed_outputs=True) "
            "to receive the objects as they are"
        )


def _row_as_json(value: Any) -> Dict[str, Any]:
    """pydantic's fallback for values it has no serializer for: a ``Row`` as
    0.3.1 writes it; anything else is refused."""
    if isinstance(value, Row):
        encoded: Dict[str, Any] = {"type": _ROW, "values": list(value._values)}
        if getattr(value, "_fields", None):
            encoded["fields"] = list(value._fields)
        return encoded
    raise TypeError(f"Unable to serialize unknown type: {type(value)}")


def _rebuild_rows(data: Any) -> Any:
    if isinstance(data, dict):
        if data.get("type") == _ROW and "values" in data:
            fields, values = data.get("fields"), [_rebuild_rows(v) for v in data["values"]]
            return Row(**dict(zip(fields, values))) if fields else Row(*values)
        return {k: _rebuild_rows(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_rebuild_rows(v) for v in data]
    return data


def json_like(key: Any, output: Any) -> Any:
    """``output`` as Flink Agents 0.3.1 hands it downstream (module docstring).

    Args:
        key: The key whose run produced ``output`` (named in errors).
        output: ``OutputEvent.output`` as the action built it.

    Returns:
        A JSON-like value: dict, list, str, int, float, bool, None, or ``Row``.

    Raises:
        OutputShapeError: ``output`` holds a value pydantic cannot serialize
            to JSON (an arbitrary object, say); names the key.
    """
    try:
        text = pydantic_core.to_json(output, fallback=_row_as_json, inf_nan_mode="null")
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        raise OutputShapeError(key, output, exc) from None
    return _rebuild_rows(json.loads(text))
