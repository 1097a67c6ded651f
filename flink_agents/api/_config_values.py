"""Values of configuration options: type conversion and the ``agent:``
section of Flink's YAML file (public names re-exported by
``flink_agents.api.configuration``)."""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any, Dict, Mapping, Type

from flink_agents.api.redaction import redact

__all__ = ["convert_value", "flatten_dict", "load_agent_section", "type_name"]
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def type_name(config_type: Type[Any]) -> str:
    if isinstance(config_type, type) and issubclass(config_type, enum.Enum):
        return f"one of {', '.join(repr(str(m.value)) for m in config_type)}"
    return {int: "an integer", float: "a number", bool: "a boolean", str: "a string", list: "a list",
            dict: "a mapping or a JSON object string"}.get(
        config_type, getattr(config_type, "__name__", str(config_type))
    )


def convert_value(key: str, value: Any, config_type: Type[Any]) -> Any:
    """``value`` converted to ``config_type``, for the option ``key``.

    Accepted: for ``int`` an int, an integral float or a numeric string; for
    ``float`` a number or a numeric string; for ``bool`` a bool, 0/1 or
    ``true``/``false``/``yes``/``no``/``on``/``off`` in any case; for ``str``
    a string or a number; for an ``Enum`` a member, its value or its name
    (any case); for ``list`` a list, a tuple or a string split at ``;`` or
    ``,``; for ``dict`` a mapping or a string holding a JSON object. 0.3.1 calls ``config_type(value)``, which reads ``"false"`` as
    true; this does not.

    Raises:
        ValueError: The value does not convert; the message names ``key``,
            the value and the expected type.
    """
    try:
        return _convert(value, config_type)
    except (TypeError, ValueError, OverflowError):
        shown = redact(value, key)
        raise ValueError(f"configuration {key!r}: expected {type_name(config_type)}, got {shown!r}") from None


def _convert(value: Any, config_type: Type[Any]) -> Any:
    if isinstance(config_type, type) and issubclass(config_type, enum.Enum):
        if isinstance(value, config_type):
            return value
        text = str(value.value if isinstance(value, enum.Enum) else value).strip()
        for member in config_type:
            if text.lower() == str(member.value).lower():
                return member
        for name, member in config_type.__members__.items():
            if text.lower() == name.lower():
                return member
        raise ValueError(value)
    if config_type is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(value)
    if config_type is int:
        if isinstance(value, bool):
            raise TypeError(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            return int(value.strip())
        raise TypeError(value)
    if config_type is float:
        if isinstance(value, bool):
            raise TypeError(value)
        if isinstance(value, (int, float)):
            result = float(value)
        elif isinstance(value, str):
            result = float(value.strip())
        else:
            raise TypeError(value)
        if math.isnan(result):
            raise ValueError(value)
        return result
    if config_type is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, enum.Enum):
            return str(value.value)
        raise TypeError(value)
    if config_type is list:
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, str):
            separator = ";" if ";" in value else ","
            return [part.strip() for part in value.split(separator) if part.strip()]
        raise TypeError(value)
    if config_type is dict:
        if isinstance(value, Mapping):
            return dict(value)
        if isinstance(value, str):
            parsed = json.loads(value)
            if isinstance(parsed, dict):
                return parsed
        raise TypeError(value)
    if isinstance(value, config_type):
        return value
    return config_type(value)


def flatten_dict(data: Mapping[str, Any], parent_key: str = "", sep: str = ".") -> Dict[str, Any]:
    """Nested mappings flattened to one level with joined keys
    (``{"chat": {"async": True}}`` -> ``{"chat.async": True}``), as 0.3.1's
    ``flatten_dict``."""
    items: Dict[str, Any] = {}
    for key, value in data.items():
        joined = f"{parent_key}{sep}{key}" if parent_key else str(key)
        if isinstance(value, Mapping):
            items.update(flatten_dict(value, joined, sep))
        else:
            items[joined] = value
    return items


def load_agent_section(path: str | Path) -> Dict[str, Any]:
    """The ``agent:`` section of a Flink YAML configuration file, flattened.

    Args:
        path: A ``config.yaml`` (or legacy ``flink-conf.yaml``) file.

    Returns:
        Flat keys to values; empty when the file has no ``agent:`` section.
        Both flat keys (``agent: {max-retries: 3}``) and nested ones
        (``agent: {chat: {async: true}}``) work, as in 0.3.1. A top-level
        key written ``agent.max-retries: 3`` (Flink's flat style) is read too.

    Raises:
        FileNotFoundError: No file at ``path``.
        ValueError: The file is not YAML, or ``agent`` is not a mapping
            (the message names the file).
    """
    import yaml

    path = Path(path)
    try:
        with path.open(encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {error}") from None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path}: the top level must be a mapping, not {type(raw).__name__}")
    section = raw.get("agent", {}) or {}
    if not isinstance(section, Mapping):
        raise ValueError(f"{path}: 'agent' must be a mapping of options, not {section!r}")
    values = {key[len("agent."):]: value for key, value in raw.items() if str(key).startswith("agent.")}
    values.update(flatten_dict(section))
    return values
