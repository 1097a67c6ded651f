"""Short-term memory as entries with a lifetime each, as Flink Agents 0.3.1
keeps it.

0.3.1 holds a key's short-term memory in a Flink ``MapState`` (one entry per
memory path), so its state TTL (``short-term-memory.state-ttl.ms``) applies
per path: writing ``event2`` does not keep ``event1`` alive. Both runners do
the same here: the Flink driver keeps one ``MapState`` entry per path, the
local driver one write time per path, and the runner (``KeyRunner``), which
runs a key's queued records one after another without reading keyed state
in between, applies the TTL before each record (``MemoryLifetimes``); all
use ``entry_writes`` to find what a run wrote.

A write of ``a.b`` also rewrites its ancestors' object markers (``a``), so a
parent never expires before a child written after it (``get("a")`` would
miss the child). With the update type ``ON_READ_AND_WRITE`` a callback of
the key renews all of its entries: the runners read the whole memory map
when a key runs (0.3.1 renews only the paths an action reads).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, List, Tuple

from flink_agents.runtime.durability.json_encoders import compact_json_utf8

__all__ = ["MemoryLifetimes", "entry_text", "entry_writes", "expired_paths"]


def entry_text(value: Any) -> str:
    """One memory entry (an encoded value, or the object marker) as JSON."""
    return compact_json_utf8(value)


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


class MemoryLifetimes:
    """The TTL of one key's memory entries across the key's runs in the
    runner (``KeyRunner``), which runs a key's queued records one after
    another on its own copy of the memory, without reading keyed state in
    between: a path not written (or, with ``renewed_on_read``, read) for
    ``ttl_s`` is gone when the next record starts, as 0.3.1's per-entry state
    TTL has it.

    A path the runner has not seen written (the memory it started from, read
    from keyed state, where the host's TTL applied) counts from when it was
    first seen. Writes and reads count when the record finishes.

    Args:
        ttl_s: The entries' time to live, seconds (> 0).
        renewed_on_read: Whether a read renews an entry (``ON_READ_AND_WRITE``);
            else only writes do.
        clock: Seconds, monotonic; injectable for tests.
    """

    def __init__(self, ttl_s: float, renewed_on_read: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.renewed_on_read = renewed_on_read
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: Dict[str, str] = {}
        self._written_at: Dict[str, float] = {}

    def start(self, memory: Dict[str, Any]) -> Dict[str, Any]:
        """The memory a record starts with: ``memory`` without its expired
        entries (the same object if none expired)."""
        now = self._clock()
        for path in memory:
            if path not in self._written_at:
                self._written_at[path] = now
                self._entries[path] = entry_text(memory[path])
        expired = set(expired_paths(self._written_at, now, self._ttl_s))
        for path in expired:
            del self._written_at[path]
            self._entries.pop(path, None)
        if not expired.intersection(memory):
            return memory
        return {path: value for path, value in memory.items() if path not in expired}

    def finish(self, memory: Dict[str, Any], reads: Iterable[str] = ()) -> None:
        """Note what the record wrote (``memory``: its memory after it ran)
        and, with ``renewed_on_read``, what it read (``reads``: paths)."""
        written, removed = entry_writes(self._entries, memory)
        now = self._clock()
        for path, text in written.items():
            self._entries[path], self._written_at[path] = text, now
        for path in removed:
            self._entries.pop(path, None)
            self._written_at.pop(path, None)
        if self.renewed_on_read:
            for path in reads:
                if path in self._written_at:
                    self._written_at[path] = now
