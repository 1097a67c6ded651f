"""The input digest: a run replays only for the record it was journaled for.

A run's journal is keyed by (journal id, key, record sequence number). A job
that keeps its ``job-identifier`` but starts from fresh keyed state numbers
its records from 0 again, so a new record can land on an old record's
journal. The run's first write therefore carries the digest of its record
(``input_digest``: SHA-256 of the record's codec encoding, keys sorted) in
the ``args_digest`` of one of its entries, after that entry's own argument
digest: ``<args digest>|input:<record digest>`` (``stamp``). No extra write,
no extra row. The entry is one written once: a completion or the run end
where the write has one (their column is otherwise empty, and an earlier
release, which checks only calls' digests, still replays the journal), else
the write's first call. ``RunJournal.check_input`` compares before a replay uses anything.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable, List

from flink_agents.runtime.durability import codec
from flink_agents.runtime.durability.json_encoders import canonical_json_utf8
from flink_agents.runtime.errors import NondeterminismError
from flink_agents.stores.journal import COMPLETION, RUN_END, JournalEntry

__all__ = ["INPUT_MARK", "call_digest", "input_digest", "journaled_input", "mismatch", "stamp"]

# Between an entry's own argument digest and the run's input digest.
INPUT_MARK = "|input:"


def input_digest(value: Any) -> str:
    """SHA-256 hex of an input record as keyed state keeps it: its codec
    encoding as canonical JSON (keys sorted), so equal records give equal
    digests in every process and after a restore.

    Raises:
        EncodeError: The codec refuses a part of ``value`` (records are
            admitted through the codec before they run, so a run's never is).
    """
    text = canonical_json_utf8(codec.encode(value, "record"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def call_digest(entry: JournalEntry) -> str:
    """The entry's own argument digest, without a run's input digest."""
    return entry.args_digest.partition(INPUT_MARK)[0]


def journaled_input(entries: Iterable[JournalEntry]) -> str | None:
    """The input digest a run's entries carry, or None (a journal of an
    earlier release, or a sub-agent's nested run)."""
    for entry in entries:
        _, mark, digest = entry.args_digest.partition(INPUT_MARK)
        if mark:
            return digest
    return None


def stamp(entries: List[JournalEntry], digest: str, skip: Callable[[JournalEntry], bool] = lambda _: False) -> bool:
    """Put ``digest`` on one of ``entries`` (a run's first write), in place,
    on an entry written once: the first completion or run end, else the
    first call (never a step's count of failed attempts, which each retry
    writes again, nor an entry ``skip`` names: a call's started mark, which
    its outcome replaces). Returns whether it found one."""
    at = next((n for n, entry in enumerate(entries) if entry.ordinal in (COMPLETION, RUN_END)), None)
    if at is None:
        at = next((n for n, entry in enumerate(entries) if entry.ordinal >= 0 and not skip(entry)), None)
    if at is None:
        at = next((n for n, entry in enumerate(entries) if not skip(entry)), None)
    if at is None:
        return False
    entry = entries[at]  # a new entry (entries are frozen), without dataclasses.replace's field walk
    entries[at] = JournalEntry(entry.step, entry.ordinal, entry.function_id, f"{entry.args_digest}{INPUT_MARK}{digest}",
                               entry.payload)
    return True


def mismatch(key: Any, seq: int, journal_id: str, journaled: str, current: str) -> NondeterminismError:
    """The error of a replay over another record: names the key, the
    record's sequence number and both digests."""
    return NondeterminismError(
        f"record #{seq} of key {key!r} is not the record its journal was written for: the journal "
        f"(journal id {journal_id!r}) holds the run of a record with input digest {journaled}, "
        f"this record's input digest is {current}; a job that keeps its job-identifier must get the "
        "same records in the same order per key, or start on a fresh journal"
    )
