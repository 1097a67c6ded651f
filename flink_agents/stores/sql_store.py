"""The SQL journal store: the journal and callback ports over one ``Dialect``.

Every operation is written here once; a ``Dialect`` (``sqlite_store``,
``postgres_store``) supplies what its database does its own way. Layout: the
``journal`` table of ``_sql`` (one row per entry, with a partial index over
the run-end markers for ``prune``) and the ``callbacks`` table of
``_sql_callbacks``. Each write (``append``, ``prune``, every callback write)
is one transaction; reads run outside one.

Connections: each process connects on its first read or write and shares
that connection among its threads under a lock. PyFlink ships a store to its
Python workers by pickling it, and workers may fork, so a connection never
crosses either: the store pickles without it, and after ``os.fork`` the child
connects anew and hands the inherited connection to ``Dialect.set_aside``. A
connection the dialect reports broken is dropped after the call that saw it
break (that call raises); the next call reconnects.

Errors: ``JournalUnavailableError`` and ``JournalSchemaError`` when
connecting (see ``Dialect.connect``); a failed read or write raises the
driver's own error (``sqlite3.Error``, ``psycopg.Error``) and, for a write,
is rolled back: nothing of it is stored.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import closing, contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from flink_agents.stores import _sql, _sql_callbacks
from flink_agents.stores._dialect import Dialect
from flink_agents.stores.callbacks import CallbackRecord, CallbackRef, CallbackStore, CompleteResult
from flink_agents.stores.journal import JournalEntry, JournalStore

__all__ = ["SQLJournalStore"]


class SQLJournalStore(JournalStore, CallbackStore):
    """A ``JournalStore`` and ``CallbackStore`` on an SQL database.

    Callbacks live beside the journal, so the ingress finds them with the
    journal's location alone.

    Args:
        dialect: The database's SQL and connection handling.
        clock: Returns the current time in Unix seconds; stamps each append's
            entries (``committed_at``) for ``prune``. Inject a fake in tests.
    """

    def __init__(self, dialect: Dialect, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._dialect = dialect
        self._clock = clock
        self._lock = threading.Lock()
        self._connection: Any = None
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._dialect.describe()})"

    # --- the journal port ----------------------------------------------------------

    def load_run(self, journal_id: str, key: str, seq: int) -> Dict[Tuple[str, int], JournalEntry]:
        """Every entry of one record's run, by (step, ordinal); ``{}`` if none.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            JournalSchemaError: The database is not a version-1 journal.
            sqlite3.Error | psycopg.Error: The read failed.
        """
        with self._session() as connection:
            selected = connection.execute(self._sql(_sql.SELECT_RUN), (journal_id, key, seq)).fetchall()
        return _sql.entries_by_slot(selected)

    def append(self, journal_id: str, key: str, seq: int, entries: List[JournalEntry]) -> None:
        """Write ``entries`` of one run in one transaction; an existing
        (step, ordinal) is replaced. An empty list writes nothing and is not
        counted in ``writes``.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            JournalSchemaError: The database is not a version-1 journal.
            sqlite3.Error | psycopg.Error: The write failed and was rolled back
                (e.g. a field the driver cannot bind, or another SQLite writer
                held the file longer than its busy timeout); nothing of it is
                stored. After a broken PostgreSQL connection the commit's fate
                is unknown (appends are idempotent upserts: retry).
        """
        entries = list(entries)
        if not entries:
            return
        with self._session() as connection:
            with self._dialect.transaction(connection):
                rows = _sql.rows(journal_id, key, seq, entries, float(self._clock()))
                with closing(connection.cursor()) as cursor:
                    cursor.executemany(self._sql(self._dialect.upsert), rows)
            self.writes += 1  # under the lock, after the commit

    def prune(self, finished_before_s: float) -> int:
        """Delete every entry of runs whose ``RUN_END`` entry was committed
        before ``finished_before_s`` (Unix seconds), with the entries of the
        sub-agent runs nested under them.

        The work is proportional to what it deletes: runs are deleted
        ``PRUNE_BATCH_RUNS`` at a time, each batch one transaction, and the
        write lock is released between batches. A run and its nested runs go
        in one batch, so a failure midway leaves whole runs deleted or kept.

        Returns:
            The number of entries deleted.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            sqlite3.Error | psycopg.Error: A batch failed and was rolled back
                (the batches before it stay deleted).
        """
        return self._prune(_sql.PRUNE, finished_before_s)

    def count_entries(self) -> int:
        """How many entries the journal holds, over all journals and runs."""
        with self._session() as connection:
            row = connection.execute(_sql.COUNT).fetchone()
        return int(row[0]) if row else 0

    # --- the callback port ---------------------------------------------------------

    def register(
        self, ref: CallbackRef, callback_id: str, purpose: str, created_ms: int, deadline_ms: int
    ) -> CallbackRecord:
        """Store a new ``PENDING`` callback for ``ref`` (times in Unix
        milliseconds), unless ``ref`` has one already; one transaction.

        Returns:
            The callback of ``ref``: the new one, or the one registered before
            (its id, purpose, deadline and state win over the arguments).

        Raises:
            ValueError: ``callback_id`` is registered for another ref (nothing
                was written).
            JournalUnavailableError: The server cannot be reached.
            JournalSchemaError: The database is not a version-1 journal.
            sqlite3.Error | psycopg.Error: The write failed and was rolled back.
        """
        with self._write() as connection:
            return _sql_callbacks.register(
                connection, self._dialect.placeholder, ref, callback_id, purpose, created_ms, deadline_ms
            )

    def complete(
        self, callback_id: str, state: str, body: Optional[bytes], now_ms: int, count_late: bool = False
    ) -> CompleteResult:
        """Move a ``PENDING`` callback to ``state`` with ``body``, stamped
        ``now_ms`` (Unix milliseconds), in one transaction whose conditional
        ``UPDATE`` decides a race between threads and processes (SQLite: the
        loser waits for the write lock; PostgreSQL: for the winner's row lock;
        either then finds the row no longer pending).

        Returns:
            ``ACCEPTED`` with the updated callback; ``FINISHED`` with the
            callback as it was (its state won), after adding one to its
            ``late_completions`` if ``count_late``; ``UNKNOWN`` with None if
            there is no such callback.

        Raises:
            ValueError: ``state`` is not one of ``FINAL_STATES`` (the database
                is not touched).
            TypeError: ``body`` is neither None nor bytes-like.
            JournalUnavailableError: The server cannot be reached.
            sqlite3.Error | psycopg.Error: The write failed and was rolled
                back. After a broken connection the commit's fate is unknown:
                read the callback back.
        """
        body = _sql_callbacks.checked_body(state, body)
        with self._write() as connection:
            return _sql_callbacks.complete(
                connection, self._dialect.placeholder, callback_id, state, body, now_ms, count_late
            )

    def get_callback(self, callback_id: str) -> Optional[CallbackRecord]:
        """The callback, or None if unknown.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            JournalSchemaError: The database is not a version-1 journal.
            sqlite3.Error | psycopg.Error: The read failed.
        """
        with self._session() as connection:
            return _sql_callbacks.get(connection, self._dialect.placeholder, callback_id)

    def finished_callbacks(self, callback_ids: Iterable[str]) -> Dict[str, CallbackRecord]:
        """Those of ``callback_ids`` that have left ``PENDING``, by id; unknown
        ids are left out. One ``SELECT`` per 500 ids.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            JournalSchemaError: The database is not a version-1 journal.
            sqlite3.Error | psycopg.Error: The read failed.
        """
        with self._session() as connection:
            return _sql_callbacks.finished(connection, self._dialect.placeholder, callback_ids)

    def close_run(self, journal_id: str, key: str, seq: int, now_ms: int) -> int:
        """Move every ``PENDING`` callback of one record's run (any step) to
        ``CLOSED``, stamped ``now_ms`` (Unix milliseconds), in one transaction.

        Returns:
            How many callbacks it closed.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            sqlite3.Error | psycopg.Error: The write failed and was rolled back.
        """
        with self._write() as connection:
            return _sql_callbacks.close_run(
                connection, self._dialect.placeholder, journal_id, key, seq, now_ms
            )

    def prune_callbacks(self, finished_before_s: float) -> int:
        """Delete the callbacks of runs whose ``RUN_END`` was committed before
        ``finished_before_s`` (Unix seconds), nested runs' included (see
        ``CallbackStore.prune_callbacks``), in batches as ``prune``.

        Returns:
            How many callbacks it deleted.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            sqlite3.Error | psycopg.Error: A batch failed and was rolled back.
        """
        return self._prune(_sql_callbacks.PRUNE, finished_before_s)

    def _prune(self, delete_run: str, finished_before_s: float) -> int:
        """Page through the runs that ended before the cutoff, in run-end
        order, running ``delete_run`` for each; one transaction per page."""
        deleted, after = 0, _sql.BEFORE_ALL_ENDED
        while True:
            with self._write() as connection:
                ended = connection.execute(
                    self._sql(_sql.SELECT_ENDED), (float(finished_before_s), *after)
                ).fetchall()
                if ended:
                    with closing(connection.cursor()) as cursor:
                        cursor.executemany(
                            self._sql(delete_run),
                            [_sql.run_parameters(journal_id, key, seq) for _, journal_id, key, seq in ended],
                        )
                        deleted += max(cursor.rowcount, 0)
            if len(ended) < _sql.PRUNE_BATCH_RUNS:
                return deleted
            after = tuple(ended[-1])

    # --- connections -----------------------------------------------------------------

    def close(self) -> None:
        """Close this process's connection; a later call opens a new one."""
        self._forget_inherited()
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_connection"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _sql(self, statement: str) -> str:
        return self._dialect.sql(statement)

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """This process's connection, held under the store's lock; dropped if
        the dialect finds it broken after the call."""
        self._forget_inherited()
        with self._lock:
            if self._connection is None:
                self._connection = self._dialect.connect()
            connection = self._connection
            try:
                yield connection
            finally:
                if self._dialect.is_broken(connection):
                    self._connection = None

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """``_session`` inside one write transaction."""
        with self._session() as connection:
            with self._dialect.transaction(connection):
                yield connection

    def _forget_inherited(self) -> None:
        """After ``os.fork``: set the parent's connection aside and take a new
        lock (the parent's may have been held at the fork)."""
        pid = os.getpid()
        if self._pid == pid:
            return
        if self._connection is not None:
            self._dialect.set_aside(self._connection)
        self._connection = None
        self._lock = threading.Lock()
        self._pid = pid
