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

import math
import re
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, List, Optional, Type

from flink_agents.stores import _sql
from flink_agents.stores._dialect import Dialect
from flink_agents.stores.errors import JournalSchemaError, JournalStoreError, JournalUnavailableError
from flink_agents.stores.retry import StoreRetry
from flink_agents.stores.sql_store import SQLJournalStore

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

__all__ = ["PostgresDialect", "PostgresJournalStore", "describe_dsn"]

_SCHEMA_TABLE = "journal_schema"
# pg_advisory_xact_lock key serializing schema creation: "flinkJ" in ASCII.
_SCHEMA_LOCK_ID = 0x666C696E6B4A


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
    """

    def __init__(
        self,
        dsn: str,
        clock: Callable[[], float] = time.time,
        connect_timeout_s: int = 10,
        retry: StoreRetry = StoreRetry(),
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(PostgresDialect(dsn, connect_timeout_s), clock, retry=retry, sleep=sleep, monotonic=monotonic)


class PostgresDialect(Dialect):
    """PostgreSQL through psycopg 3, one connection per process.

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

    def transaction(self, connection: "psycopg.Connection[Any]") -> ContextManager[Any]:
        """psycopg's transaction block (``BEGIN`` ... ``COMMIT``/``ROLLBACK``)."""
        return connection.transaction()

    def connect(self) -> "psycopg.Connection[Any]":
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

        Raises:
            ValueError: The DSN cannot be parsed.
            JournalUnavailableError: Naming host, port, database and user,
                and each attempt's failure.
            JournalSchemaError: The tables are of another schema version.
        """
        import psycopg  # lazily: the package imports without it
        from psycopg.conninfo import conninfo_attempts, make_conninfo

        parts = _parse_dsn(self.dsn)
        if self.dsn.strip() and not parts:
            raise ValueError(
                "the PostgreSQL journal DSN is not a libpq connection string or URI "
                "(not shown: it may hold a password)"
            )
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
                connection = psycopg.connect(make_conninfo("", **attempt), autocommit=True)
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
