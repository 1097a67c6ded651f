"""Filling ``{name}`` placeholders in prompt text, as Flink Agents 0.3.1 does.

A placeholder is ``{`` text without braces ``}``. A placeholder with a value
is replaced by ``str(value)``; one without is left exactly as written, so
JSON examples in a prompt (``{"score": 1}``) and slots meant for a later
step survive. ``str.format`` would raise ``KeyError`` on both.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["SafeFormatter", "format_string"]

# The placeholder form of Flink Agents 0.3.1: any brace-free text in braces.
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


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
        return _PLACEHOLDER.sub(self._replace, text)

    def _replace(self, match: "re.Match[str]") -> str:
        name = match.group(1)
        if name in self.kwargs:
            return str(self.kwargs[name])
        return match.group(0)


def format_string(_template: str, **kwargs: Any) -> str:
    """``_template`` with its placeholders filled from ``kwargs``; unknown
    placeholders are left as written (``SafeFormatter``).

    Raises:
        TypeError: ``_template`` is not a str.
    """
    return SafeFormatter(kwargs).format(_template)
