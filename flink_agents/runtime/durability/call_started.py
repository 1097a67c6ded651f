"""The "call started" mark of a durable call that has a reconciler.

Flink Agents 0.3.1's ``durable_execute(func, ..., reconciler=r)``: when a
failover cut the call off after it began and before its outcome was
journaled, the replay does not run ``func`` again; it asks ``r()`` what
became of it, and ``r``'s return value (or the exception it raises) is
journaled as the call's outcome. For that the journal must know the call
began: ``RunJournal`` commits this mark at the call's own position
``(step, ordinal)``, with the call's function id and argument digest,
before the call runs. The call's outcome replaces it (a store's append
replaces an entry at the same position), so a run that was not cut off
keeps no mark. Calls without a reconciler write none: no extra write.

Payload: ``{"started": 1, "t": [start ns, 0]}``. ``1`` is the mark's format
version; an outcome (``codec_exceptions.encode_outcome``: ``{"c": ...}``, or
the earlier ``{"ok": ...}`` / ``{"error": ...}``) never starts with
``{"started":``. Journals written before marks existed hold none and read as
before. The mark only says "this call began": what runs on the replay is the
reconciler the action passes then, never anything read from the mark.
"""

from __future__ import annotations

import json
import time

from flink_agents.stores.journal import JournalEntry

__all__ = ["STARTED_VERSION", "is_started", "started_mark"]

STARTED_VERSION = 1  # format of the mark's payload
_PREFIX = '{"started":'


def started_mark(step: str, ordinal: int, function_id: str, digest: str) -> JournalEntry:
    """The mark of the call at ``(step, ordinal)`` beginning now."""
    payload = json.dumps({"started": STARTED_VERSION, "t": [time.time_ns(), 0]}, separators=(",", ":"))
    return JournalEntry(step, ordinal, function_id, str(digest), payload)


def is_started(entry: JournalEntry) -> bool:
    """Whether ``entry`` is a call's started mark (no outcome journaled yet)."""
    return entry.ordinal >= 0 and entry.payload.startswith(_PREFIX)
