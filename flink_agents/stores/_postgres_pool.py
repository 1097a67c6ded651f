"""The PostgreSQL journal's connections: one bounded ``psycopg_pool`` pool
per worker process and connection settings, shared by every store using them.

Why a pool: a PyFlink worker process runs several operator instances (the
subtasks of its slots), each with its own store and up to four store threads
(``runtime.scheduling.executors``) plus the run threads that read. One
connection per store serialized them; one connection per thread would open
dozens per process. Here every store of a process with the same DSN and
settings draws from one ``psycopg_pool.ConnectionPool`` of at most
``PoolSize.max_size`` connections (default 4), keeping ``min_size``
(default 1) open while idle, so a job opens at most ``max_size`` connections
per Python worker process, whatever its parallelism.

What the pool is told:

- ``check=ConnectionPool.check_connection``: a connection is tried (an
  empty statement) each time it is handed out; one that a server restart or
  ``pg_terminate_backend`` broke is discarded and another taken or opened, so
  the caller never sees the break.
- Connections are opened by ``PostgresDialect.connect`` (its whole-connect
  deadline, the schema check, ``autocommit``) through ``connection_class``.
- ``reconnect_timeout=0``: a connect that fails is not retried in the
  background for minutes. Its error is recorded; every caller that was
  already waiting when that connect began raises it
  (``JournalUnavailableError`` naming the server, or
  ``JournalSchemaError``), and the store's ``StoreRetry`` decides whether
  to try again, as with a single connection. The next caller makes the pool
  grow, and so connect, again. A caller that runs out of time raises the
  last connect failure seen while it waited, if any, rather than a bare
  timeout.

Lifetimes: a pool is created on the first read or write of the first store
that needs it, released by each store's ``close`` (the engine closes its
store when the operator closes) and closed when the last store lets go, or
at process exit. After ``os.fork`` the child forgets every pool of its
parent without closing it (its sockets are the parent's: psycopg does not
close a connection in a process that did not open it) and creates its own.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from flink_agents.api.configuration import readable
from flink_agents.api.core_options import RuntimeOptions
from flink_agents.stores.errors import JournalUnavailableError

if TYPE_CHECKING:  # pragma: no cover
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PoolSize", "POOLS", "ProcessPools"]

# A caller waiting for a connection looks for a recorded connect failure this often.
_POLL_S = 0.05


@dataclass(frozen=True)
class PoolSize:
    """How many connections one worker process keeps to one journal.

    Attributes:
        min_size: Connections kept open while idle (>= 0).
        max_size: Connections open at most (>= 1 and >= ``min_size``).

    Raises:
        ValueError: A size out of range.
    """

    min_size: int = 1
    max_size: int = 4

    def __post_init__(self) -> None:
        for name in ("min_size", "max_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"PoolSize.{name} must be an integer >= 0, got {value!r}")
        if self.max_size < max(1, self.min_size):
            raise ValueError(
                f"journal.postgres.pool.max_size ({self.max_size}) must be >= 1 and >= "
                f"journal.postgres.pool.min_size ({self.min_size})"
            )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "PoolSize":
        """The sizes the ``journal.postgres.pool.*`` keys of ``config`` give;
        missing keys take the defaults.

        Raises:
            ValueError: A value is not an integer, or out of range (naming the key).
        """
        options = readable(config)
        values = {}
        for option in (RuntimeOptions.JOURNAL_POSTGRES_POOL_MIN_SIZE, RuntimeOptions.JOURNAL_POSTGRES_POOL_MAX_SIZE):
            value = options.get_optional(option)  # ValueError naming the key
            if value is not None:
                values[option.key.rsplit(".", 1)[1]] = value
        return cls(**values)


class _ConnectFailures:
    """The last connect failure of one pool, with when that connect began.

    A caller raises only a failure of a connect that began after it started
    waiting: one begun before (a background grow that a terminated backend
    or a restart cut short) says nothing about the server now, and the
    caller's own wait makes the pool connect again (``borrow``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (when the connect began, when it failed, its error)
        self._last: Optional[Tuple[float, float, BaseException]] = None

    def record(self, error: BaseException, began: float) -> None:
        """Note ``error`` of a connect that began at ``began`` (``time.monotonic``)."""
        with self._lock:
            self._last = (began, time.monotonic(), error)

    def since(self, started: float) -> Optional[BaseException]:
        """The failure of a connect begun at or after ``started``
        (``time.monotonic``), if any."""
        with self._lock:
            last = self._last
        return last[2] if last is not None and last[0] >= started else None

    def seen_since(self, started: float) -> Optional[BaseException]:
        """The failure of any connect that failed at or after ``started``, if any."""
        with self._lock:
            last = self._last
        return last[2] if last is not None and last[1] >= started else None


@dataclass
class _Entry:
    pool: "ConnectionPool[Any]"
    failures: _ConnectFailures
    users: int = 0


# (dsn, connect timeout in seconds, min size, max size)
_Key = Tuple[str, int, int, int]


class ProcessPools:
    """This process's pools, one per (DSN, connect timeout, sizes), counted
    by the stores holding them (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._entries: Dict[_Key, _Entry] = {}
        self._inherited: List[_Entry] = []  # a parent's, never used nor closed here

    def acquire(self, key: _Key, connect: Callable[[Any], "psycopg.Connection[Any]"], name: str) -> _Key:
        """Hold the pool of ``key``, creating it (opened, not yet connected:
        the first ``borrow`` connects) if this process has none.

        Args:
            key: (DSN, connect timeout in seconds, min size, max size).
            connect: Opens one connection, each attempt through the callable it
                is given (``PostgresDialect.connect``).
            name: The pool's name in psycopg_pool's logs; never a password.

        Returns:
            ``key``, to ``borrow`` with and ``release``.
        """
        with self._here():
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _open_pool(key, connect, name)
            entry.users += 1
        return key

    def release(self, key: _Key) -> None:
        """Let go of the pool of ``key``; the last holder closes it."""
        with self._here():
            entry = self._entries.get(key)
            if entry is None:
                return
            entry.users -= 1
            if entry.users > 0:
                return
            del self._entries[key]
        entry.pool.close(timeout=1.0)

    @contextmanager
    def borrow(self, key: _Key) -> Iterator["psycopg.Connection[Any]"]:
        """A connection of the pool of ``key`` (healthy when handed out),
        returned to the pool afterwards; a broken one is replaced by the pool.

        Raises:
            JournalUnavailableError: No connection within the connect timeout
                plus 3 s (all ``max_size`` busy, or a connect that hangs), or
                the error of a connect that failed while waiting (naming the
                server).
            JournalSchemaError: A connect found another schema version.
            ValueError: The DSN cannot be parsed.
        """
        from psycopg_pool import PoolTimeout

        with self._here():
            entry = self._entries[key]
        started = time.monotonic()
        # A connect in flight ends within its timeout plus libpq's 2 s floor
        # (PostgresDialect.connect): wait for it, and a second more.
        wait_s = key[1] + 3
        deadline = started + wait_s
        while True:
            left_s = deadline - time.monotonic()
            try:
                connection = entry.pool.getconn(timeout=max(min(_POLL_S, left_s), 0.001))
                break
            except PoolTimeout:
                failure = entry.failures.since(started)
                if failure is not None:
                    raise _copy(failure) from None
                if left_s <= _POLL_S:
                    seen = entry.failures.seen_since(started)
                    if seen is not None:  # the server's own words beat a bare timeout
                        raise _copy(seen) from None
                    raise JournalUnavailableError(
                        f"no connection of the PostgreSQL journal pool {entry.pool.name!r} came free "
                        f"within {wait_s} s (journal.postgres.pool.max_size = {key[3]})"
                    ) from None
        try:
            yield connection
        finally:
            entry.pool.putconn(connection)

    def stats(self, key: _Key) -> Dict[str, int]:
        """psycopg_pool's counters of the pool of ``key`` (``pool_size``: open
        or opening, ``pool_available``: idle, ``connections_num``: opened so far)."""
        with self._here():
            entry = self._entries[key]
        return dict(entry.pool.get_stats())

    def close_all(self) -> None:
        """Close every pool this process opened (at exit)."""
        with self._here():
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            entry.pool.close(timeout=1.0)

    def after_fork(self) -> None:
        """In a forked child: set the parent's pools aside, take a new lock."""
        self._inherited.extend(self._entries.values())
        self._entries = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @contextmanager
    def _here(self) -> Iterator[None]:
        if self._pid != os.getpid():  # forked by code that bypassed os.register_at_fork
            self.after_fork()
        with self._lock:
            yield


def _open_pool(key: _Key, connect: Callable[[Any], Any], name: str) -> _Entry:
    """A psycopg_pool pool of ``key``'s sizes whose connections ``connect`` opens."""
    import psycopg
    from psycopg_pool import ConnectionPool

    failures = _ConnectFailures()

    class JournalConnection(psycopg.Connection):  # type: ignore[type-arg]
        """What the pool opens: ``connect`` with its deadline and schema check."""

        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:  # type: ignore[override]
            began = time.monotonic()
            try:
                return connect(cls._attempt)
            except Exception as error:
                failures.record(error, began)
                raise

        @classmethod
        def _attempt(cls, conninfo: str) -> Any:
            return super().connect(conninfo, autocommit=True)

    pool: "ConnectionPool[Any]" = ConnectionPool(
        "",  # unused: JournalConnection.connect knows the DSN
        connection_class=JournalConnection,
        min_size=key[2],
        max_size=key[3],
        open=True,
        check=ConnectionPool.check_connection,
        name=name,
        timeout=float(key[1]),
        reconnect_timeout=0.0,
        num_workers=2,
    )
    return _Entry(pool, failures)


def _copy(error: BaseException) -> BaseException:
    """A fresh error like ``error`` (one recorded failure may be raised in
    several threads at once)."""
    try:
        return type(error)(str(error))
    except Exception:  # an error type whose constructor takes more
        return JournalUnavailableError(str(error))


POOLS = ProcessPools()
os.register_at_fork(after_in_child=POOLS.after_fork)
atexit.register(POOLS.close_all)
