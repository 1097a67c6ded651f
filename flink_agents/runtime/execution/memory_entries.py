"""Short-term memory as entries with a lifetime each, as Flink Agents 0.3.1
keeps it.

0.3.1 holds a key's short-term memory in a Flink ``MapState`` (one entry per
memory path), so its state TTL (``short-term-memory.state-ttl.ms``) applies
per path: writing ``event2`` does not keep ``event1`` alive. Both runners do
the same here: the Flink driver keeps one ``MapState`` entry per path, the
local driver one write time per path; both use ``entry_writes`` to find what
a run wrote.

A write of ``a.b`` also rewrites its ancestors' object markers (``a``), so a
parent never expires before a child written after it (``get("a")`` would
miss the child). With the update type ``ON_READ_AND_WRITE`` a callback of
the key renews all of its entries: the runners read the whole memory map
when a key runs (0.3.1 renews only the paths an action reads).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

__all__ = ["entry_text", "entry_writes", "expired_paths"]


def entry_text(value: Any) -> str:
    """One memory entry (an encoded value, or the object marker) as JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def entry_writes(before: Dict[str, str], after: Dict[str, Any]) -> Tuple[Dict[str, str], List[str]]:
    """What changed from ``before`` to ``after``.

    Args:
        before: The stored entries, path -> ``entry_text``.
        after: The memory map now (path -> encoded value).

    Returns:
        ``(written, removed)``: path -> new ``entry_text`` of each path that
        is new or changed, with the ancestors (present in ``after``) of each;
        and the paths no longer in ``after``.
    """
    written: Dict[str, str] = {}
    for path, value in after.items():
        text = entry_text(value)
        if before.get(path) != text:
            written[path] = text
    for path in list(written):
        parts = path.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent in after and parent not in written:
                written[parent] = entry_text(after[parent])
    removed = [path for path in before if path not in after]
    return written, removed


def expired_paths(written_at: Dict[str, float], now: float, ttl_s: float) -> List[str]:
    """The paths whose last write (Unix seconds) is ``ttl_s`` or more ago."""
    return [path for path, at in written_at.items() if now - at >= ttl_s]
