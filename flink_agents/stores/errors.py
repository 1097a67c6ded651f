"""Errors the journal and callback stores raise.

Every failed read or write of a store raises one of these, never a bare
driver error (``sqlite3.Error``, ``psycopg.Error``): the driver's error is the
``__cause__``, and the store's error names what failed (``operation``), on
which run (``run``, where the call has one) and where the store is
(``location``). What a caller must tell apart is the type:

- ``JournalUnavailableError``: the store cannot be reached or is busy (a lost
  connection, a server that does not answer, an SQLite file locked by another
  writer past its busy timeout, an I/O error). Transient: the SQL stores
  retry it with bounded backoff (``StoreRetry``) before raising it.
- ``JournalReplacedError``: the SQLite file was removed or replaced under the
  running job. Terminal: the journal the job wrote is gone.
- ``JournalCorruptError``: the file or its data is damaged. Terminal.
- ``JournalSchemaError``: the store holds another schema version, or
  something that is not a flink_agents journal. Terminal.
- ``JournalStoreError`` itself: any other failure (a value the driver cannot
  bind, a constraint the database refused). Terminal: retrying repeats it.

The runtime turns any of them, raised by a journal write, into its internal
``JournalUnavailable`` (``runtime.errors``) with this error as the cause.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

__all__ = [
    "JournalCorruptError",
    "JournalReplacedError",
    "JournalSchemaError",
    "JournalStoreError",
    "JournalUnavailableError",
    "RunIdentity",
]

# (journal id, key text, record sequence number) of a run, or a callback's id.
RunIdentity = Union[Tuple[str, str, int], str]


class JournalStoreError(Exception):
    """A store's read or write failed (base of the store's own errors).

    Args:
        message: What happened; the store's location and the operation are
            added in front when given.
        operation: The store method that failed (``"append"``, ``"load_run"``,
            ``"prune"``, ``"register"``, ``"complete"``, ...), or None.
        run: The run the call was about, ``(journal id, key, seq)``, or the
            callback id for the callback calls that take one; None for calls
            about no single run (``prune``, ``count_entries``).
        location: Where the store is (a path, ``host=... dbname=...``), never
            a password.

    Attributes:
        operation, run, location: As given.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: Optional[str] = None,
        run: Optional[RunIdentity] = None,
        location: Optional[str] = None,
    ) -> None:
        super().__init__(_describe(message, operation, run, location))
        self.operation = operation
        self.run = run
        self.location = location


class JournalSchemaError(JournalStoreError):
    """The store holds a journal of another schema version, or something that
    is not a flink_agents journal at all. Terminal: the job must be pointed at
    another store or the store migrated."""


class JournalUnavailableError(JournalStoreError, ConnectionError):
    """The store could not be reached (connection lost or refused, server not
    answering within the connect timeout), is locked by another writer past
    its busy timeout, or failed an I/O. The message names where it was looked
    for, never a password. Raised after the store's bounded retries
    (``StoreRetry``) ran out."""


class JournalReplacedError(JournalStoreError):
    """The SQLite journal file was removed, renamed or replaced by another
    file while the store had it open: writes would go to a file nobody will
    read again. Terminal: restore the file or restart the job on a fresh
    journal (a restart re-runs the records whose journal is lost)."""


class JournalCorruptError(JournalStoreError):
    """The journal file or its data is damaged (SQLite reported corruption,
    or the file stopped being a database). Terminal."""


def _describe(
    message: str, operation: Optional[str], run: Optional[RunIdentity], location: Optional[str]
) -> str:
    """``"<operation> of run (journal 'j', key 'k', seq 3) on <location>: <message>"``."""
    if operation is None:
        return message
    subject = operation
    if isinstance(run, tuple):
        journal_id, key, seq = run
        subject += f" of run (journal {journal_id!r}, key {key!r}, seq {seq})"
    elif run is not None:
        subject += f" of callback {run[:6]}..."  # ids are capabilities: never in full
    if location:
        subject += f" on {location}"
    return f"{subject} failed: {message}"
