"""JSON text from encoders made once, for the runtime's per-record and
per-call texts: ids and digests (canonical: keys sorted, no spaces) and the
compact texts of keyed state and memory entries.

Each function gives exactly the text of the ``json.dumps`` call it names.
``json.dumps`` with any argument set builds a new ``JSONEncoder`` per call,
a measurable part of a record's and a model call's CPU here. The texts are
what journals and state already written hold (digests of canonical text;
memory entries compared as text): they must not change.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json", "canonical_json_utf8", "compact_json", "compact_json_utf8"]

# encode() keeps no state between calls (its circular-reference markers are
# made per call), so one encoder serves every thread.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_CANONICAL_UTF8 = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_COMPACT = json.JSONEncoder(separators=(",", ":"))
_COMPACT_UTF8 = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"))``.

    Raises:
        TypeError: A part is not a JSON type.
        ValueError: A circular reference.
    """
    return _CANONICAL.encode(value)


def canonical_json_utf8(value: Any) -> str:
    """As ``canonical_json``, with ``ensure_ascii=False``."""
    return _CANONICAL_UTF8.encode(value)


def compact_json(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"))`` (same errors)."""
    return _COMPACT.encode(value)


def compact_json_utf8(value: Any) -> str:
    """As ``compact_json``, with ``ensure_ascii=False``."""
    return _COMPACT_UTF8.encode(value)
