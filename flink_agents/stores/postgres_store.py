"""The cluster journal store: PostgreSQL through psycopg 3.

``PostgresJournalStore`` is ``SQLJournalStore`` (every operation, both ports)
over ``PostgresDialect``, which holds what is PostgreSQL's own: ``%s``
placeholders, ``ON CONFLICT ... DO UPDATE``, psycopg transactions, the
connect timeout, the schema version in a ``journal_schema`` table, and the
translation of a failed connect into ``JournalUnavailableError``.

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
``callbacks`` table existed gets it on the next connection.

Connections: ``PostgresJournalStore`` draws them from one bounded
``psycopg_pool`` pool per worker process and DSN (``_postgres_pool``:
``journal.postgres.pool.min_size``, default 1, and ``max_size``, default 4),
shared by every store of the process, checked each time one is handed out
(a connection a server restart broke is replaced before any call sees it),
released at ``close`` and never used across ``os.fork``. A connection that
breaks during a call makes that call fail with ``JournalUnavailableError``,
which ``StoreRetry`` retries on another connection (appends are idempotent
upserts). Connections carry ``application_name=flink_agents`` unless the DSN
or ``PGAPPNAME`` names one, so ``pg_stat_activity`` shows them. ``SQLJournalStore`` over a
bare ``PostgresDialect`` keeps one connection per store instead.

``psycopg`` is imported on first connection, so this module imports (and a
store can be built and pickled) without it or a server.
"""

from __future__ import annotations

import math
import os
import re
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, Iterator, List, Optional, Tuple, Type

from flink_agents.stores import _sql, _sql_callbacks
from flink_agents.stores._dialect import Dialect
from flink_agents.stores._postgres_pool import POOLS, PoolSize
from flink_agents.stores.errors import JournalSchemaError, JournalStoreError, JournalUnavailableError
from flink_agents.stores.retry import StoreRetry
from flink_agents.stores.sql_store import SQLJournalStore

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

__all__ = ["APPLICATION_NAME", "PoolSize", "PostgresDialect", "PostgresJournalStore", "describe_dsn"]

# pg_stat_activity.application_name of the journal's connections, unless the
# DSN or PGAPPNAME sets one (libpq's fallback_application_name).
APPLICATION_NAME = "flink_agents"

_SCHEMA_TABLE = "journal_schema"
# pg_advisory_xact_lock key serializing schema creation: "flinkJ" in ASCII.
_SCHEMA_LOCK_ID = 0x666C696E6B4A
_RATE_LOCK_CLASS = 0x46415257  # 'FARW': the key space of shared rate window locks


class PostgresJournalStore(SQLJournalStore):
    """A journal and callback store on a PostgreSQL database, shared by a
    cluster's workers (see the module docstring).

    Args:
        dsn: A libpq connection string or URI, e.g.
            ``postgresql://user:password@host:5432/db``. Connected lazily, on
            the first read or write of each process.
        clock: Returns the current time in Unix seconds; stamps each append's
            entries (``committed_at``) for ``prune``. Inject a fake in tests.
        connect_timeout_s: How long connecting may take in all, in seconds,
            unless the DSN sets ``connect_timeout`` itself (see
            ``PostgresDialect.connect``).
        retry: How long a call rides out a lost connection (``StoreRetry``):
            it reconnects with bounded backoff, then raises
            ``JournalUnavailableError``.
        sleep: Waits between retries, in seconds (``time.sleep``; a fake in tests).
        monotonic: Measures the retry deadline, in seconds (``time.monotonic``;
            a fake in tests, advanced by the fake ``sleep``).
        pool: How many connections this process keeps and opens at most to
            this DSN, shared with every other store of the process with the
            same DSN, timeout and sizes (``PoolSize``).
    """

    def __init__(
        self,
        dsn: str,
        clock: Callable[[], float] = time.time,
        connect_timeout_s: int = 10,
        retry: StoreRetry = StoreRetry(),
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        pool: PoolSize = PoolSize(),
    ) -> None:
        super().__init__(PostgresDialect(dsn, connect_timeout_s), clock, retry=retry, sleep=sleep, monotonic=monotonic)
        self.pool_size = pool
        self._pool_key: Optional[Tuple[str, int, int, int]] = None  # held in this process, if any

    def pool_stats(self) -> Dict[str, int]:
        """psycopg_pool's counters of this process's pool for the store
        (``pool_size``, ``pool_available``, ``connections_num``, ...); ``{}``
        before the first read or write."""
        self._forget_inherited()
        key = self._pool_key
        return POOLS.stats(key) if key is not None else {}

    def close(self) -> None:
        """Release this store's hold on the process's pool (the last store to
        let go closes it); a later call takes the pool again."""
        self._forget_inherited()
        with self._lock:
            key, self._pool_key = self._pool_key, None
        if key is not None:
            POOLS.release(key)

    def __getstate__(self) -> Dict[str, Any]:
        state = super().__getstate__()
        state["_pool_key"] = None
        return state

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """A connection of the process's pool for one call, without the
        store's lock: the store's threads run their calls side by side, up
        to the pool's ``max_size`` over the whole process."""
        self._forget_inherited()
        with self._lock:
            if self._pool_key is None:
                dialect = self._dialect
                key = (dialect.dsn, _timeout_s(_parse_dsn(dialect.dsn).get("connect_timeout"),
                                               dialect.connect_timeout_s),
                       self.pool_size.min_size, self.pool_size.max_size)
                self._pool_key = POOLS.acquire(key, dialect.connect, f"flink_agents journal {dialect.describe()}")
            key = self._pool_key
        with POOLS.borrow(key) as connection:
            yield connection

    def _forget_inherited(self) -> None:
        """After ``os.fork``: the parent's pool is not this process's (the
        child's ``POOLS`` forgot it); the next call takes the child's own."""
        if self._pid != os.getpid():
            self._pool_key = None
        super()._forget_inherited()


class PostgresDialect(Dialect):
    """PostgreSQL through psycopg 3: its SQL, errors and connect (used by a
    store directly, or by the process's pool for ``PostgresJournalStore``).

    Args:
        dsn: A libpq connection string or URI.
        connect_timeout_s: Seconds, unless the DSN sets ``connect_timeout``.
    """

    placeholder = "%s"
    upsert = _sql.POSTGRES_UPSERT
    integer, real, blob = "BIGINT", "DOUBLE PRECISION", "BYTEA"

    def __init__(self, dsn: str, connect_timeout_s: int = 10) -> None:
        self.dsn = dsn
        self.connect_timeout_s = int(connect_timeout_s)

    def __repr__(self) -> str:
        return f"PostgresDialect({self.describe()})"

    def describe(self) -> str:
        """``host=... port=... dbname=... user=...``, never the password."""
        return describe_dsn(self.dsn)

    def is_broken(self, connection: "psycopg.Connection[Any]") -> bool:
        """Whether the connection closed (the server went away, say)."""
        return bool(connection.closed)

    def classify(self, error: BaseException) -> Optional[Type[JournalStoreError]]:
        """``psycopg.OperationalError`` (a lost or refused connection, a
        terminated backend, a server shutting down, a deadlock or
        serialization failure) is ``JournalUnavailableError``; any other
        ``psycopg.Error`` ``JournalStoreError``."""
        try:
            import psycopg
        except ImportError:  # pragma: no cover - psycopg is a dependency
            return None
        if isinstance(error, psycopg.OperationalError):
            return JournalUnavailableError
        if isinstance(error, psycopg.Error):
            return JournalStoreError
        return None

    def lock_rate_scope(self, connection: "psycopg.Connection[Any]", scope: str) -> None:
        """A transaction advisory lock on the scope's hash, in a key space
        of its own (the two-key form), released at commit or rollback: claims
        on one scope queue, other scopes' claims (and hash collisions'
        only cost) go on."""
        connection.execute("SELECT pg_advisory_xact_lock(%s::int4, hashtext(%s))", (_RATE_LOCK_CLASS, scope))

    def clock_s(self, connection: "psycopg.Connection[Any]") -> float:
        """The server's clock (``clock_timestamp()``, not the transaction's
        start), so subtasks on hosts whose clocks drift agree."""
        row = connection.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        return float(row[0])

    def transaction(self, connection: "psycopg.Connection[Any]") -> ContextManager[Any]:
        """psycopg's transaction block (``BEGIN`` ... ``COMMIT``/``ROLLBACK``)."""
        return connection.transaction()

    def connect(
        self, open_attempt: Optional[Callable[[str], "psycopg.Connection[Any]"]] = None
    ) -> "psycopg.Connection[Any]":
        """Connect in autocommit mode and check or create the schema.

        The connect timeout (``connect_timeout`` of the DSN, else
        ``connect_timeout_s``) bounds the whole connect. libpq and psycopg
        apply it per attempt, and a DSN makes one attempt per host and per
        address its name resolves to (``localhost`` is often ``::1`` and
        ``127.0.0.1``; a DNS name may have several records), so a server that
        accepts TCP but never answers took the timeout times the attempts
        (40 s for four). Here the attempts (psycopg's own list,
        ``conninfo_attempts``) share one deadline: each gets the time left,
        at least libpq's floor of 2 s, and none starts once it passed. So a
        connect gives up after at most the timeout plus 2 s.

        Args:
            open_attempt: Opens one attempt's connection string in autocommit
                mode (a pool's connection class); default ``psycopg.connect``.

        Raises:
            ValueError: The DSN cannot be parsed.
            JournalUnavailableError: Naming host, port, database and user,
                and each attempt's failure.
            JournalSchemaError: The tables are of another schema version.
        """
        import psycopg  # lazily: the package imports without it
        from psycopg.conninfo import conninfo_attempts, make_conninfo

        open_attempt = open_attempt or (lambda conninfo: psycopg.connect(conninfo, autocommit=True))
        parts = _parse_dsn(self.dsn)
        if self.dsn.strip() and not parts:
            raise ValueError(
                "the PostgreSQL journal DSN is not a libpq connection string or URI "
                "(not shown: it may hold a password)"
            )
        parts.setdefault("fallback_application_name", APPLICATION_NAME)
        timeout_s = _timeout_s(parts.get("connect_timeout"), self.connect_timeout_s)
        deadline = time.monotonic() + timeout_s
        failures: List[str] = []
        connection = None
        try:
            attempts = conninfo_attempts(parts)
        except psycopg.Error as error:  # no host name resolved
            failures.append(str(error).strip())
            attempts = []
        for tried, attempt in enumerate(attempts):
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                failures.append(f"{len(attempts) - tried} more address(es) not tried: "
                                f"the {timeout_s:g} s connect timeout passed")
                break
            attempt["connect_timeout"] = max(2, math.ceil(left_s))
            try:
                connection = open_attempt(make_conninfo("", **attempt))
                break
            except psycopg.Error as error:
                where = attempt.get("hostaddr") or attempt.get("host") or "(default host)"
                failures.append(f"{where}: {str(error).strip()}")
        if connection is None:
            message = _without_password("; ".join(failures), self.dsn)
            raise JournalUnavailableError(
                f"cannot connect to the PostgreSQL journal at {self.describe()}: {message}"
            ) from None  # the chained error's repr could carry the DSN
        try:
            self._ensure_schema(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _ensure_schema(self, connection: "psycopg.Connection[Any]") -> None:
        """Create the version-1 tables if missing (in a database an older
        release wrote, what it lacks), or check their version; one transaction
        under an advisory lock.

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
                    f"the PostgreSQL journal at {self.describe()} has schema version(s) "
                    f"{versions} ({_SCHEMA_TABLE} table); this release reads version "
                    f"{_sql.SCHEMA_VERSION}. Point journal.postgres.dsn at another database "
                    "or schema, or migrate this one."
                )
            for statement in self.schema():
                connection.execute(statement)
            columns = connection.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = %s",
                (_sql_callbacks.TABLE,),
            ).fetchall()
            for statement in _sql_callbacks.add_missing_columns(name for (name,) in columns):
                connection.execute(statement)  # a callbacks table an older release wrote


def _timeout_s(from_dsn: Any, default_s: int) -> int:
    """The connect timeout in seconds: the DSN's ``connect_timeout`` if set,
    else ``default_s``; as libpq, at least 2, and 0 or less means our default
    (psycopg too never waits forever).

    Raises:
        ValueError: The DSN's ``connect_timeout`` is not a number.
    """
    value = default_s if from_dsn in (None, "") else from_dsn
    try:
        seconds = int(float(value))
    except (TypeError, ValueError):
        raise ValueError(f"connect_timeout of the PostgreSQL journal DSN is not a number: {value!r}") from None
    if seconds <= 0:
        seconds = int(default_s) if int(default_s) > 0 else 10
    return max(2, seconds)


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
    """``text`` with the DSN's password, if any, masked where it stands as a
    token of its own (a short password must not mask parts of words: with
    password ``p``, "port" stays "port")."""
    password = _parse_dsn(dsn).get("password")
    if not password:
        return text
    return re.sub(rf"(?<![\w]){re.escape(str(password))}(?![\w])", "***", text)
