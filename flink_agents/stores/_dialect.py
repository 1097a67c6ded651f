"""What one SQL database does its own way, for ``SQLJournalStore``.

The store writes every statement once, with ``{p}`` where a parameter goes
(``_sql``, ``_sql_callbacks``), and runs it through a ``Dialect``: the
driver's placeholder, the journal upsert, how a write transaction begins and
ends, how a connection is opened (with the schema checked, created or
migrated), which driver errors mean "unreachable" or "not a journal", and
what to do with a connection inherited across ``os.fork``.

A dialect holds only settings (a path, a DSN, timeouts), never a
connection, so it pickles with its store to PyFlink's Python workers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ContextManager, List, Optional, Tuple, Type

import time

from flink_agents.stores import _sql, _sql_callbacks, _sql_controls, _sql_rate_window
from flink_agents.stores.errors import JournalStoreError

__all__ = ["Dialect", "SCHEMA_OBJECTS"]

# The tables and indexes of schema version 1, as ``Dialect.schema`` creates
# them: a database missing one was written by an older release.
SCHEMA_OBJECTS: Tuple[str, ...] = (
    _sql.TABLE, _sql.RUN_END_INDEX, _sql.RUN_INDEX, *_sql_callbacks.SCHEMA_OBJECTS, *_sql_controls.SCHEMA_OBJECTS,
    *_sql_rate_window.SCHEMA_OBJECTS,
)


class Dialect(ABC):
    """One database's SQL and connection handling.

    Attributes:
        placeholder: The driver's parameter marker (``?``, ``%s``).
        upsert: The journal ``INSERT`` that replaces a row whose key exists,
            written with ``{p}`` placeholders (see ``_sql``).
        integer: The column type of sequence numbers, ordinals, times in
            milliseconds and counts (``INTEGER``, ``BIGINT``).
        real: The column type of ``committed_at``, Unix seconds (``REAL``,
            ``DOUBLE PRECISION``).
        blob: The column type of callback bodies (``BLOB``, ``BYTEA``).
        indexed_by: A clause after the table name that makes the journal-id
            scan (``_sql.select_journal_ids``) read the run-end index, for a
            planner that would otherwise walk the primary key; ``""``: none.
    """

    placeholder: str
    upsert: str
    integer: str
    real: str
    blob: str
    indexed_by: str = ""

    def sql(self, statement: str) -> str:
        """``statement`` with each ``{p}`` replaced by ``placeholder``."""
        return _sql.statement(statement, self.placeholder)

    def schema(self) -> List[str]:
        """The statements creating every object of ``SCHEMA_OBJECTS`` with
        this dialect's column types, and dropping what an older release
        created and this one no longer uses. Each is a no-op where it has
        nothing to do, so running them all also brings an older version-1
        database up to date; run them in one write transaction."""
        return [
            _sql.create_table(self.integer, self.real),
            *_sql.DROP_OLD_RUN_END_INDEXES,
            _sql.CREATE_RUN_END_INDEX,
            _sql.CREATE_RUN_INDEX,
            *_sql_callbacks.create_statements(self.integer, self.blob),
            *_sql_controls.create_statements(self.integer),
            *_sql_rate_window.create_statements(self.integer, self.real),
        ]

    @abstractmethod
    def describe(self) -> str:
        """Where the database is, for messages and ``repr``; never a password."""

    @abstractmethod
    def connect(self) -> Any:
        """A new connection in autocommit mode (transactions are explicit via
        ``transaction``), its schema checked and, where missing or older,
        created or migrated.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            JournalSchemaError: The database holds another schema version, or
                is not a flink_agents journal.
        """

    @abstractmethod
    def transaction(self, connection: Any) -> ContextManager[None]:
        """One write transaction on ``connection``: committed when the block
        ends, rolled back if it raises (``KeyboardInterrupt`` included)."""

    @abstractmethod
    def classify(self, error: BaseException) -> Optional[Type[JournalStoreError]]:
        """The store error a driver error stands for, or None if ``error`` is
        not the driver's (the store then lets it through unchanged).

        ``JournalUnavailableError`` (retried, see ``StoreRetry``) for what may
        pass: a lost or refused connection, a lock held past the busy timeout,
        an I/O error; a terminal kind (``JournalReplacedError``,
        ``JournalCorruptError``, ``JournalStoreError``) for the rest.
        """

    def lock_rate_scope(self, connection: Any, scope: str) -> None:
        """Inside a write transaction: hold off every other claim on the
        shared rate window ``scope`` (``stores.rate_window``) until it ends.
        By default a no-op: a dialect whose write transaction already
        excludes every other writer (SQLite's ``BEGIN IMMEDIATE``) needs
        nothing more."""

    def clock_s(self, connection: Any) -> float:
        """The time shared rate windows are stamped with, Unix seconds. By
        default this host's ``time.time()`` (the database is on this host);
        a server dialect reads the server's clock, so hosts agree."""
        return time.time()

    def check(self, connection: Any) -> None:
        """Called before every read and write on ``connection``; raises a
        ``JournalStoreError`` if the connection no longer reaches the store
        it opened (SQLite: the file was removed or replaced). By default a
        no-op."""

    def is_broken(self, connection: Any) -> bool:
        """Whether ``connection`` can no longer be used (the store then drops
        it and the next call connects anew)."""
        return False

    def set_aside(self, connection: Any) -> None:
        """Keep or drop ``connection`` in a forked child, which must never use
        it; by default the child simply forgets it."""
