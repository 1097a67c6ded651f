"""The cluster journal store: PostgreSQL through psycopg 3.

Layout: the ``journal`` table of ``_sql`` (``BIGINT`` sequence numbers and
ordinals, ``DOUBLE PRECISION`` commit times) with its partial run-end index,
the ``callbacks`` table of ``_sql_callbacks`` (the ``CallbackStore`` port;
``BIGINT`` times, ``BYTEA`` bodies) and a one-row ``journal_schema`` table
holding the schema version (1). All are created on first use (``CREATE
TABLE IF NOT EXISTS`` under an advisory lock, so many workers may start at
once) in the connection's ``search_path``: to keep several journals in one
database, give each DSN its own schema, e.g. ``options=-csearch_path=my_job``.

Each ``append`` and ``prune`` is one transaction; an existing
(step, ordinal) is replaced (``ON CONFLICT ... DO UPDATE``). Each callback
write is one transaction too; a version-1 database created before the
``callbacks`` table existed gets it on the next connection. Each process
connects on first use and shares that connection among its threads under a
lock; after ``os.fork`` the child connects anew and leaves the inherited one
alone (psycopg does not close a connection in a process that did not open it).
A connection that broke is dropped and the next call reconnects; the call that
saw it break raises, since its commit may or may not have happened (appends
are idempotent upserts, so the runtime may simply retry).

``psycopg`` is imported on first connection, so this module imports (and a
store can be built and pickled) without it or a server.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from flink_agents.stores import _sql, _sql_callbacks
from flink_agents.stores._process_connection import ProcessLocalConnection
from flink_agents.stores.callbacks import CallbackRecord, CallbackRef, CallbackStore, CompleteResult
from flink_agents.stores.errors import JournalSchemaError, JournalUnavailableError
from flink_agents.stores.journal import JournalEntry, JournalStore

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

__all__ = ["PostgresJournalStore"]

_SCHEMA_TABLE = "journal_schema"
# pg_advisory_xact_lock key serializing schema creation: "flinkJ" in ASCII.
_SCHEMA_LOCK_ID = 0x666C696E6B4A


class PostgresJournalStore(ProcessLocalConnection, JournalStore, CallbackStore):
    """A ``JournalStore`` on a PostgreSQL database, shared by a cluster's workers.

    It is the job's ``CallbackStore`` too: callbacks live in the same database
    (and schema), so the ingress finds them with the journal's DSN alone.

    Args:
        dsn: A libpq connection string or URI, e.g.
            ``postgresql://user:password@host:5432/db``. Connected lazily, on
            the first read or write of each process.
        clock: Returns the current time in Unix seconds; stamps each append's
            entries (``committed_at``) for ``prune``. Inject a fake in tests.
        connect_timeout_s: How long connecting may take, in seconds, unless
            the DSN sets ``connect_timeout`` itself (libpq rounds up to >= 2).
    """

    def __init__(
        self, dsn: str, clock: Callable[[], float] = time.time, connect_timeout_s: int = 10
    ) -> None:
        super().__init__()
        self._dsn = dsn
        self._clock = clock
        self._connect_timeout_s = int(connect_timeout_s)
        self._lock = threading.Lock()
        self._connection: Optional["psycopg.Connection[Any]"] = None
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"PostgresJournalStore({describe_dsn(self._dsn)})"

    # --- the port ---------------------------------------------------------------

    def load_run(self, journal_id: str, key: str, seq: int) -> Dict[Tuple[str, int], JournalEntry]:
        """Every entry of one record's run, by (step, ordinal); ``{}`` if none.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            JournalSchemaError: The tables are of another schema version.
            psycopg.Error: The read failed.
        """
        with self._session() as connection:
            selected = connection.execute(
                _sql.statement(_sql.SELECT_RUN, "%s"), (journal_id, key, seq)
            ).fetchall()
        return _sql.entries_by_slot(selected)

    def append(self, journal_id: str, key: str, seq: int, entries: List[JournalEntry]) -> None:
        """Write ``entries`` of one run in one transaction; an existing
        (step, ordinal) is replaced. An empty list writes nothing and is not
        counted.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            JournalSchemaError: The tables are of another schema version.
            psycopg.Error: The write failed and was rolled back (e.g. a field
                psycopg cannot adapt); nothing of it is stored. After a broken
                connection the commit's fate is unknown.
        """
        entries = list(entries)
        if not entries:
            return
        with self._session() as connection:
            with connection.transaction():
                rows = _sql.rows(journal_id, key, seq, entries, float(self._clock()))
                with connection.cursor() as cursor:
                    cursor.executemany(_sql.statement(_sql.POSTGRES_UPSERT, "%s"), rows)
            self.writes += 1

    def prune(self, finished_before_s: float) -> int:
        """Delete every entry of runs whose ``RUN_END`` entry was committed
        before ``finished_before_s`` (Unix seconds), in one statement.

        Returns:
            The number of entries deleted.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            psycopg.Error: The delete failed and was rolled back.
        """
        with self._session() as connection:
            with connection.transaction():
                cursor = connection.execute(
                    _sql.statement(_sql.PRUNE, "%s"), (float(finished_before_s),)
                )
                return max(cursor.rowcount, 0)

    def count_entries(self) -> int:
        """How many entries the table holds, over all journals and runs."""
        with self._session() as connection:
            row = connection.execute(_sql.COUNT).fetchone()
        return int(row[0]) if row else 0

    # --- the callback port ----------------------------------------------------------

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
            JournalSchemaError: The tables are of another schema version.
            psycopg.Error: The write failed and was rolled back.
        """
        with self._session() as connection:
            with connection.transaction():
                return _sql_callbacks.register(
                    connection, "%s", ref, callback_id, purpose, created_ms, deadline_ms
                )

    def complete(
        self, callback_id: str, state: str, body: Optional[bytes], now_ms: int, count_late: bool = False
    ) -> CompleteResult:
        """Move a ``PENDING`` callback to ``state`` with ``body``, stamped
        ``now_ms`` (Unix milliseconds), in one transaction whose conditional
        ``UPDATE`` decides a race between processes (the loser waits for the
        winner's row lock, then finds the row no longer pending).

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
            psycopg.Error: The write failed and was rolled back. After a
                broken connection the commit's fate is unknown: read the
                callback back.
        """
        body = _sql_callbacks.checked_body(state, body)
        with self._session() as connection:
            with connection.transaction():
                return _sql_callbacks.complete(
                    connection, "%s", callback_id, state, body, now_ms, count_late
                )

    def get_callback(self, callback_id: str) -> Optional[CallbackRecord]:
        """The callback, or None if unknown.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            psycopg.Error: The read failed.
        """
        with self._session() as connection:
            return _sql_callbacks.get(connection, "%s", callback_id)

    def finished_callbacks(self, callback_ids: Iterable[str]) -> Dict[str, CallbackRecord]:
        """Those of ``callback_ids`` that have left ``PENDING``, by id; unknown
        ids are left out. One ``SELECT`` per 500 ids.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            psycopg.Error: The read failed.
        """
        with self._session() as connection:
            return _sql_callbacks.finished(connection, "%s", callback_ids)

    def close_run(self, journal_id: str, key: str, seq: int, now_ms: int) -> int:
        """Move every ``PENDING`` callback of one record's run (any step) to
        ``CLOSED``, stamped ``now_ms`` (Unix milliseconds), in one transaction.

        Returns:
            How many callbacks it closed.

        Raises:
            JournalUnavailableError: The server cannot be reached.
            psycopg.Error: The write failed and was rolled back.
        """
        with self._session() as connection:
            with connection.transaction():
                return _sql_callbacks.close_run(connection, "%s", journal_id, key, seq, now_ms)

    def prune_callbacks(self, finished_before_s: float) -> int:
        """Delete the callbacks of runs whose ``RUN_END`` was committed before
        ``finished_before_s`` (Unix seconds), nested runs' included, in one
        transaction (see ``CallbackStore.prune_callbacks``).

        Returns:
            How many callbacks it deleted.
        """
        with self._session() as connection:
            with connection.transaction():
                return _sql_callbacks.prune(connection, "%s", finished_before_s)

    # --- connections --------------------------------------------------------------

    @contextmanager
    def _session(self) -> Iterator["psycopg.Connection[Any]"]:
        """This process's connection, held under the store's lock; dropped if
        it broke during the call."""
        self._forget_inherited()
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            connection = self._connection
            try:
                yield connection
            finally:
                if connection.closed:  # broken (server gone) or closed
                    self._connection = None

    def _connect(self) -> "psycopg.Connection[Any]":
        """Connect in autocommit mode (transactions are explicit) and check
        or create the schema.

        Raises:
            ValueError: The DSN cannot be parsed.
            JournalUnavailableError: Naming host, port, database and user.
            JournalSchemaError: The tables are of another schema version.
        """
        import psycopg  # lazily: the package imports without it

        parts = _parse_dsn(self._dsn)
        if self._dsn.strip() and not parts:
            raise ValueError(
                "the PostgreSQL journal DSN is not a libpq connection string or URI "
                "(not shown: it may hold a password)"
            )
        options: Dict[str, Any] = {}
        if "connect_timeout" not in parts:
            options["connect_timeout"] = self._connect_timeout_s
        try:
            connection = psycopg.connect(self._dsn, autocommit=True, **options)
        except psycopg.Error as error:
            message = _without_password(str(error).strip(), self._dsn)
            raise JournalUnavailableError(
                f"cannot connect to the PostgreSQL journal at {describe_dsn(self._dsn)}: {message}"
            ) from None  # the chained error's repr could carry the DSN
        try:
            self._ensure_schema(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _ensure_schema(self, connection: "psycopg.Connection[Any]") -> None:
        """Create the version-1 tables if missing (``callbacks`` too, in a
        database that predates it), or check their version.

        Raises:
            JournalSchemaError: ``journal_schema`` holds another version.
        """
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_ID,))
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS {_SCHEMA_TABLE} (version INTEGER NOT NULL)"
            )
            versions = [row[0] for row in connection.execute(f"SELECT version FROM {_SCHEMA_TABLE}")]
            if not versions:
                connection.execute(
                    f"INSERT INTO {_SCHEMA_TABLE} (version) VALUES (%s)", (_sql.SCHEMA_VERSION,)
                )
            elif versions != [_sql.SCHEMA_VERSION]:
                raise JournalSchemaError(
                    f"the PostgreSQL journal at {describe_dsn(self._dsn)} has schema version(s) "
                    f"{versions} ({_SCHEMA_TABLE} table); this release reads version "
                    f"{_sql.SCHEMA_VERSION}. Point journal.postgres.dsn at another database "
                    "or schema, or migrate this one."
                )
            connection.execute(_sql.create_table("BIGINT", "DOUBLE PRECISION"))
            connection.execute(_sql.CREATE_RUN_END_INDEX)
            for sql in _sql_callbacks.create_statements("BIGINT", "BYTEA"):
                connection.execute(sql)


def describe_dsn(dsn: str) -> str:
    """``host=... port=... dbname=... user=...`` of a DSN, never its password.

    Parts the DSN leaves out (libpq then takes them from ``PG*`` variables or
    its defaults) read ``(default)``.
    """
    parts = _parse_dsn(dsn)
    if not parts and dsn.strip():
        return "<unparsable DSN>"
    return " ".join(
        f"{name}={parts.get(name) or '(default)'}" for name in ("host", "port", "dbname", "user")
    )


def _parse_dsn(dsn: str) -> Dict[str, Any]:
    """The DSN's parameters, or ``{}`` if psycopg is missing or cannot parse it."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return {}
    try:
        return dict(conninfo_to_dict(dsn))
    except Exception:  # psycopg.ProgrammingError: not a DSN
        return {}


def _without_password(text: str, dsn: str) -> str:
    """``text`` with the DSN's password, if any, masked."""
    password = _parse_dsn(dsn).get("password")
    return text.replace(str(password), "***") if password else text
