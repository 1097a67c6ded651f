"""Callback capabilities kept out of the event log and the progress stream.

A callback URL (its id and its route's token, ``stores.callbacks``) is the
capability to complete the callback, and for a callback of the previous
release the bare id is too. Anything that writes what a run did somewhere
others read (the event log's files and logger, ``event_log``; the progress
records a follower gets, ``progress``) passes it through ``redact`` first,
at every level. What stays is enough to correlate:

- a callback URL ``.../callbacks/<id>/resolve/<token>?exp=...&sig=...``
  becomes ``.../callbacks/[callback 1a2b3c4d5e6f]/resolve``: the scheme,
  host and route stay, the id becomes its ``fingerprint``, the token and
  any signature go;
- a callback id becomes ``[callback 1a2b3c4d5e6f]``, wherever it is: the
  value of a ``callback_id`` or ``operation_id`` field (also inside JSON
  text, such as a tool message's content), after ``callback`` or
  ``Operation`` in the runtime's own messages, and any id or token of a
  callback this process created or replayed (``remember``; the last
  ``REMEMBERED`` of them);
- the callback's purpose is not a secret and is left as it is.

``fingerprint`` is the first 12 hex digits of the id's SHA-256: it cannot
be turned back into the id, and the shipping-claims job's ``claim_id`` (16
digits of the same digest) starts with it.

Not redacted: the job's outputs (they go downstream as the job made them),
an ``EventListener``'s events (user code in the job's process, like an
action), and the journal store itself (it must hold the capabilities; keep
it private).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from typing import Any, Dict, Optional

__all__ = ["REMEMBERED", "fingerprint", "redact", "redact_text", "remember"]

REMEMBERED = 65_536  # ids and tokens known by value, most recent first
_TOKEN = r"[A-Za-z0-9_-]{16,128}"
_URL = re.compile(rf"/callbacks/(?P<id>{_TOKEN})/(?P<route>resolve|reject)(?:/{_TOKEN})?(?:\?[^\s\"'<>\\]*)?")
_JSON_FIELD = re.compile(rf"(?P<head>\"(?:callback_id|operation_id)\"\s*:\s*\")(?P<id>{_TOKEN})\"")
_NAMED = re.compile(rf"(?P<head>\b(?:[Cc]allback|[Oo]peration) )(?P<id>{_TOKEN})(?![A-Za-z0-9_-])")
_ANY_TOKEN = re.compile(rf"(?<![A-Za-z0-9_-]){_TOKEN}(?![A-Za-z0-9_-])")
_ID_FIELDS = frozenset({"callback_id", "operation_id"})

_lock = threading.Lock()
# id or token -> the id it belongs to.
_known: "OrderedDict[str, str]" = OrderedDict()


def fingerprint(callback_id: str) -> str:
    """A short, non-secret name of ``callback_id``: 12 hex digits of its SHA-256."""
    return hashlib.sha256(callback_id.encode("utf-8")).hexdigest()[:12]


def _label(callback_id: str) -> str:
    return f"[callback {fingerprint(callback_id)}]"


def remember(callback_id: str, *tokens: Optional[str]) -> None:
    """Know ``callback_id`` and its route ``tokens`` by value, so they are
    redacted wherever they appear (thread-safe; bounded by ``REMEMBERED``)."""
    with _lock:
        for value in (callback_id, *tokens):
            if value:
                _known[value] = callback_id
                _known.move_to_end(value)
        while len(_known) > REMEMBERED:
            _known.popitem(last=False)


def _known_value(match: "re.Match[str]") -> str:
    value = match.group(0)
    with _lock:
        owner = _known.get(value)
    return value if owner is None else _label(owner)


def redact_text(text: str) -> str:
    """``text`` with every callback URL and id in it redacted (module docstring)."""
    if len(text) < 16:
        return text
    text = _URL.sub(lambda m: f"/callbacks/{_label(m.group('id'))}/{m.group('route')}", text)
    text = _JSON_FIELD.sub(lambda m: f"{m.group('head')}{_label(m.group('id'))}\"", text)
    text = _NAMED.sub(lambda m: f"{m.group('head')}{_label(m.group('id'))}", text)
    if _known:
        text = _ANY_TOKEN.sub(_known_value, text)
    return text


def redact(value: Any) -> Any:
    """A JSON-like ``value`` with every callback URL and id redacted, as a
    new value (``value`` is not changed); other types are returned as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        redacted: Dict[Any, Any] = {}
        for name, child in value.items():
            if name in _ID_FIELDS and isinstance(child, str) and re.fullmatch(_TOKEN, child):
                redacted[name] = _label(child)
            else:
                redacted[name] = redact(child)
        return redacted
    if isinstance(value, (list, tuple)):
        return [redact(child) for child in value]
    return value
