"""Filling ``{name}`` placeholders in prompt text, as Flink Agents 0.3.1 does.

A placeholder is ``{`` text without braces ``}``. A placeholder with a value
is replaced by ``str(value)``; one without is left exactly as written, so
JSON examples in a prompt (``{"score": 1}``) and slots meant for a later
step survive. ``str.format`` would raise ``KeyError`` on both.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Tuple

__all__ = ["SafeFormatter", "format_string"]

# The placeholder form of Flink Agents 0.3.1: any brace-free text in braces.
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")

# Template -> its parts, literal text and placeholder names alternating
# (``_PLACEHOLDER.split``: [text, name, text, ..., text]). A prompt is filled
# once per model call: scanning a long system prompt took about 30 us a call.
_PARTS: Dict[str, Tuple[str, ...]] = {}
_PARTS_KEPT = 1024  # templates kept; a job's prompts are few (cleared when full)
_PART_CACHED_CHARS = 65536  # longer texts are scanned each time, not kept


def _parts(template: str) -> Tuple[str, ...]:
    parts = _PARTS.get(template)
    if parts is None:
        parts = tuple(_PLACEHOLDER.split(template))
        if len(template) <= _PART_CACHED_CHARS:
            if len(_PARTS) >= _PARTS_KEPT:
                _PARTS.clear()
            _PARTS[template] = parts
    return parts


def _fill(template: str, values: Mapping[str, Any]) -> str:
    parts = _parts(template)
    if len(parts) == 1 or not values:
        return template  # nothing to fill: the text as written
    filled = list(parts)
    changed = False
    for index in range(1, len(parts), 2):
        name = parts[index]
        if name in values:
            filled[index] = str(values[name])
            changed = True
        else:
            filled[index] = "{" + name + "}"
    return "".join(filled) if changed else template


class SafeFormatter:
    """Fills placeholders from a mapping, leaving unknown ones as written.

    Args:
        kwargs: Placeholder name -> value; values are inserted with ``str``.
            None means no values (every placeholder stays).

    Example:
        >>> SafeFormatter({"name": "Ada"}).format("Hi {name}, {unknown}")
        'Hi Ada, {unknown}'
    """

    def __init__(self, kwargs: Mapping[str, Any] | None = None) -> None:
        self.kwargs = dict(kwargs or {})

    def format(self, text: str) -> str:
        """``text`` with each known placeholder replaced.

        Raises:
            TypeError: ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise TypeError(f"SafeFormatter.format needs text as a str, got {type(text).__name__}")
        return _fill(text, self.kwargs)


def format_string(_template: str, **kwargs: Any) -> str:
    """``_template`` with its placeholders filled from ``kwargs``; unknown
    placeholders are left as written (``SafeFormatter``).

    Raises:
        TypeError: ``_template`` is not a str.
    """
    if not isinstance(_template, str):
        raise TypeError(f"SafeFormatter.format needs text as a str, got {type(_template).__name__}")
    return _fill(_template, kwargs)
