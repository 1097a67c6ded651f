"""Process targets for the journal store tests (importable by spawned children)."""

from __future__ import annotations

from typing import Any

from flink_agents.stores import JournalEntry, JournalStore, SQLiteJournalStore


def append_runs(path: str, writer: str, runs: int, start: Any) -> None:
    """Open the SQLite journal at ``path`` in this process and append ``runs``
    one-entry runs under key ``writer``, after ``start`` (an Event) is set."""
    store = SQLiteJournalStore(path)
    store.count_entries()  # open (and maybe create the schema) before the race
    start.wait(30)
    for seq in range(runs):
        store.append("job", writer, seq, [JournalEntry("a@0", 0, "f:g", "", f'"{writer}-{seq}"')])
    store.close()


def append_one(store: JournalStore, key: str) -> None:
    """Append one entry with ``store`` as inherited from a forked parent, then
    close it (which must not close the parent's connection)."""
    store.append("job", key, 0, [JournalEntry("a@0", 0, "f:g", "", '"from child"')])
    store.close()
