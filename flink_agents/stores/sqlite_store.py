"""The embedded journal store: one SQLite file beside the job.

``SQLiteJournalStore`` is ``SQLJournalStore`` (every operation, both ports)
over ``SQLiteDialect``, which holds what is SQLite's own: ``?`` placeholders,
``INSERT OR REPLACE``, ``BEGIN IMMEDIATE`` transactions, WAL mode, the busy
timeout, and the schema version in ``PRAGMA user_version``.

Layout: the ``journal`` table of ``_sql`` (one row per entry) plus a partial
index over run-end markers for ``prune``, and the ``callbacks`` table of
``_sql_callbacks`` (the ``CallbackStore`` port); ``PRAGMA user_version`` holds
the schema version (1), and a file of another version is refused with
``JournalSchemaError``. A version-1 file written before ``callbacks`` existed
gets the table when it is opened.

Files: the journal holds prompts, answers and the ids that resolve pending
callbacks, so a missing file is created with mode 0600 (and missing
directories 0700) before SQLite opens it; SQLite gives ``-wal`` and ``-shm``
the main file's mode. A read-only location (the file, or the directory
where it or its ``-wal``/``-shm`` must be created) fails at once with a
``JournalStoreError`` naming the path and saying so.

Concurrency: the file is in WAL mode, so readers never block the writer, and
every write is one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction that waits up
to ``busy_timeout_ms`` for another process's write. Each process opens its own
connection on first use (one per process, shared by its threads under a lock);
after ``os.fork`` the child opens a new one and never touches the inherited
connection, as SQLite requires. The store pickles without its connection, so
it can travel to PyFlink's Python workers.

Failures: a file locked by another writer past ``busy_timeout_ms``, or an
I/O error, is ``JournalUnavailableError`` and retried (``StoreRetry``); a
damaged file is ``JournalCorruptError``. Before every read and write the
store compares the file at ``path`` with the one its connection opened
(``os.stat``: device and inode): a file removed, renamed away or replaced
under the running job fails that call with ``JournalReplacedError`` naming
the path, and every later one, instead of writing on into a file nobody
will read.

Durability: WAL with ``synchronous=FULL`` (the default here) syncs the WAL on
every commit, so a returned ``append`` survives a process crash and a power
loss. ``synchronous="NORMAL"`` syncs only at checkpoints: a commit still
survives a process crash, but the last commits may be lost on power loss or an
OS crash. Measured on the development machine (1,000 appends of 3 entries of
200-byte payloads each, one process, ext4 on a virtio disk; three runs each):

    synchronous=NORMAL  0.04-0.07 ms per append
    synchronous=FULL    0.16-0.43 ms per append (one fsync of the WAL each)

FULL costs a few tenths of a millisecond per commit, far below one model
call (hundreds of milliseconds), so it is the default; pass
``synchronous="NORMAL"`` where a power-loss window is acceptable and every
fsync counts (e.g. slow network disks).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple, Type, Union

from flink_agents._private_files import UnsafePathError, create_private_file, make_private_dirs, unwritable
from flink_agents.stores import _sql, _sql_callbacks
from flink_agents.stores._dialect import SCHEMA_OBJECTS, Dialect
from flink_agents.stores.errors import (
    JournalCorruptError,
    JournalReplacedError,
    JournalSchemaError,
    JournalStoreError,
    JournalUnavailableError,
)
from flink_agents.stores.retry import StoreRetry
from flink_agents.stores.sql_store import SQLJournalStore

__all__ = ["SQLiteDialect", "SQLiteJournalStore"]

log = logging.getLogger(__name__)

_SYNCHRONOUS_MODES = ("FULL", "NORMAL")

# Connections inherited across os.fork. SQLite forbids using them in the child,
# and closing one there could disturb the parent's locks, so the child keeps a
# reference (the garbage collector would close it) and never uses it again.
_INHERITED: List[sqlite3.Connection] = []


class SQLiteJournalStore(SQLJournalStore):
    """A journal and callback store on one SQLite file, shared by the
    processes of one host (see the module docstring).

    Args:
        path: The database file; its parent directory is created if missing.
            Opened lazily, on the first read or write of each process.
        clock: Returns the current time in Unix seconds; stamps each append's
            entries (``committed_at``) for ``prune``. Inject a fake in tests.
        busy_timeout_ms: How long a write waits for another process's write
            before failing with ``sqlite3.OperationalError`` ("database is
            locked"), in milliseconds.
        synchronous: ``"FULL"`` (survives power loss) or ``"NORMAL"`` (survives
            process crashes only); see the module docstring for the cost.
        retry: How long a call rides out a locked file or an I/O error
            (``StoreRetry``; the busy timeout comes first).
        sleep: Waits between retries, in seconds (``time.sleep``; a fake in tests).
        monotonic: Measures the retry deadline, in seconds (``time.monotonic``;
            a fake in tests, advanced by the fake ``sleep``).

    Attributes:
        path: The database file.

    Raises:
        ValueError: ``busy_timeout_ms`` is negative or ``synchronous`` unknown.
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        clock: Callable[[], float] = time.time,
        busy_timeout_ms: int = 30000,
        synchronous: str = "FULL",
        retry: StoreRetry = StoreRetry(),
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        dialect = SQLiteDialect(Path(path), busy_timeout_ms, synchronous)
        super().__init__(dialect, clock, retry=retry, sleep=sleep, monotonic=monotonic)
        self.path = dialect.path


class SQLiteDialect(Dialect):
    """SQLite through the standard library's ``sqlite3``.

    Args:
        path: The database file.
        busy_timeout_ms: How long a statement waits for another connection's
            lock, in milliseconds.
        synchronous: ``"FULL"`` or ``"NORMAL"`` (case-insensitive).

    Raises:
        ValueError: ``busy_timeout_ms`` is negative or ``synchronous`` unknown.
    """

    placeholder = "?"
    upsert = _sql.SQLITE_UPSERT
    integer, real, blob = "INTEGER", "REAL", "BLOB"
    # Without statistics SQLite walks the primary key for the journal-id
    # scan, nested sub-agent journals' rows and all.
    indexed_by = f"INDEXED BY {_sql.RUN_END_INDEX}"

    def __init__(self, path: Path, busy_timeout_ms: int = 30000, synchronous: str = "FULL") -> None:
        if busy_timeout_ms < 0:
            raise ValueError(f"busy_timeout_ms must be >= 0, got {busy_timeout_ms}")
        mode = synchronous.upper()
        if mode not in _SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS_MODES}, got {synchronous!r}")
        self.path = path
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.synchronous = mode

    def describe(self) -> str:
        """The file's path."""
        return str(self.path)

    def set_aside(self, connection: sqlite3.Connection) -> None:
        """Keep the parent's connection unused: closing it here could disturb
        the parent's locks."""
        _INHERITED.append(connection)

    def classify(self, error: BaseException) -> Optional[Type[JournalStoreError]]:
        """By SQLite's primary result code: BUSY, LOCKED, IOERR, FULL,
        CANTOPEN and PROTOCOL are ``JournalUnavailableError``; CORRUPT and
        NOTADB ``JournalCorruptError``; READONLY_DBMOVED (the file was
        renamed or unlinked) ``JournalReplacedError``; any other
        ``sqlite3.Error`` (a value it cannot bind, say) ``JournalStoreError``;
        an ``OSError`` (the directory cannot be created or read)
        ``JournalUnavailableError``."""
        if isinstance(error, OSError):
            return JournalUnavailableError
        if not isinstance(error, sqlite3.Error):
            return None
        code = _error_code(error)
        if code is None:
            return JournalUnavailableError if isinstance(error, sqlite3.OperationalError) else JournalStoreError
        if code == _SQLITE_READONLY_DBMOVED:
            return JournalReplacedError
        if code & 0xFF in _UNAVAILABLE_CODES:
            return JournalUnavailableError
        if code & 0xFF in _CORRUPT_CODES:
            return JournalCorruptError
        return JournalStoreError

    def check(self, connection: sqlite3.Connection) -> None:
        """Raise if the file at ``path`` is no longer the one ``connection``
        opened: removed, renamed away, or replaced by another file. One
        ``os.stat`` (about a microsecond) before every read and write,
        compared by (st_dev, st_ino).

        Raises:
            JournalReplacedError: Naming the path and what changed.
        """
        opened = getattr(connection, "file_id", None)
        if opened is None:
            return
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            raise JournalReplacedError(
                f"the journal file {self.path} was removed while the job had it open; "
                "its journal is gone (restore the file, or restart the job on a new one)"
            ) from None
        if (now.st_dev, now.st_ino) != opened:
            raise JournalReplacedError(
                f"the journal file {self.path} was replaced by another file while the job had it "
                f"open (device/inode {opened[0]}/{opened[1]} is now {now.st_dev}/{now.st_ino}); "
                "writes would go to a file nobody reads"
            )

    @contextmanager
    def transaction(self, connection: sqlite3.Connection) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` (take the write lock now, waiting up to the busy
        timeout) ... ``COMMIT``; roll back on any exception."""
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise

    def connect(self) -> sqlite3.Connection:
        """Open the file in WAL mode and check (or create) its schema; a
        missing file is first created 0600 (module docstring, "Files"), an
        existing one others can read is opened with a warning.

        Raises:
            JournalSchemaError: Another schema version, or not a journal (or
                not an SQLite database at all).
            JournalStoreError: The file cannot be put in WAL mode, the path
                is a directory or a link to nothing, or the location is
                read-only (``_read_only``); no retry can open those.
            sqlite3.Error: The file cannot be opened.
        """
        if self.path.is_dir():
            raise JournalStoreError(f"{self.path} is a directory, not an SQLite journal file; give a file path")
        read_only = _read_only(self.path)
        if read_only is not None:
            raise JournalStoreError(
                f"the journal {self.path} is read-only: {read_only}; point journal.sqlite.path at a file "
                "in a directory this user can write"
            )
        make_private_dirs(self.path.parent)
        try:
            created = create_private_file(self.path)
        except UnsafePathError as error:  # a link to nothing: no retry helps
            raise JournalStoreError(str(error)) from error
        if not created:
            _warn_if_shared(self.path)
        connection = sqlite3.connect(
            str(self.path),
            timeout=self.busy_timeout_ms / 1000.0,
            isolation_level=None,  # autocommit: transactions are explicit
            check_same_thread=False,  # threads share it under the store's lock
            factory=_Connection,
        )
        try:
            connection.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            mode = self._enable_wal(connection)
            if mode.lower() != "wal":
                raise JournalStoreError(
                    f"{self.path}: SQLite refused WAL mode (journal_mode is {mode!r}); "
                    "the journal needs a local file system with shared memory"
                )
            connection.execute(f"PRAGMA synchronous = {self.synchronous}")
            self._ensure_schema(connection)
            opened = os.stat(self.path)
            connection.file_id = (opened.st_dev, opened.st_ino)
        except sqlite3.DatabaseError as error:
            connection.close()
            if _error_code(error) == getattr(sqlite3, "SQLITE_NOTADB", 26):
                raise JournalSchemaError(f"{self.path} is not an SQLite database") from error
            raise
        except BaseException:
            connection.close()
            raise
        return connection

    def _enable_wal(self, connection: sqlite3.Connection) -> str:
        """Switch the file to WAL mode; returns the journal mode now in force.

        The switch needs an exclusive lock, and SQLite reports a clash with
        another process opening the file at the same moment as "busy" at once,
        without waiting, so this retries for up to the busy timeout.

        Raises:
            sqlite3.OperationalError: Still locked after the busy timeout.
        """
        deadline = time.monotonic() + self.busy_timeout_ms / 1000.0
        while True:
            try:
                return str(connection.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as error:
                if not _is_busy(error) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.005)

    def _ensure_schema(self, connection: sqlite3.Connection) -> None:
        """Create the version-1 schema in an empty file, or check the version
        and add what a version-1 file written by an older release lacks (the
        ``callbacks`` table, say).

        Opening an up-to-date file only reads, so it takes no write lock.

        Raises:
            JournalSchemaError: The file has another ``user_version``, or
                tables but no version (not a flink_agents journal).
        """
        if (
            self._check_version(connection)
            and _has_all(connection, SCHEMA_OBJECTS)
            and not _sql_callbacks.add_missing_columns(_columns(connection, _sql_callbacks.TABLE))
        ):
            return
        with self.transaction(connection):  # the write lock: one process creates
            if not self._check_version(connection):
                tables = [
                    name
                    for (name,) in connection.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                    )
                ]
                if tables:
                    raise JournalSchemaError(
                        f"{self.path} is not a flink_agents journal: it has tables {tables} "
                        "but no schema version (PRAGMA user_version = 0)"
                    )
            for statement in self.schema():
                connection.execute(statement)
            for statement in _sql_callbacks.add_missing_columns(_columns(connection, _sql_callbacks.TABLE)):
                connection.execute(statement)  # a callbacks table an older release wrote
            connection.execute(f"PRAGMA user_version = {_sql.SCHEMA_VERSION}")

    def _check_version(self, connection: sqlite3.Connection) -> bool:
        """True if the file is at our schema version, False if it is empty.

        Raises:
            JournalSchemaError: Any other version.
        """
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        if version == _sql.SCHEMA_VERSION:
            return True
        if version == 0:
            return False
        raise JournalSchemaError(
            f"{self.path} holds a journal of schema version {version} (PRAGMA user_version); "
            f"this release reads version {_sql.SCHEMA_VERSION}. Point journal.sqlite.path "
            "at another file, or migrate this one."
        )


class _Connection(sqlite3.Connection):
    """An ``sqlite3.Connection`` that remembers which file it opened:
    ``file_id`` is its (st_dev, st_ino), or None before the open finished."""

    file_id: Optional[Tuple[int, int]] = None


# SQLite primary result codes (sqlite3 exposes them only from Python 3.11;
# _error_code reads them from the message on 3.10).
_UNAVAILABLE_CODES = frozenset({5, 6, 10, 13, 14, 15})  # BUSY LOCKED IOERR FULL CANTOPEN PROTOCOL
_CORRUPT_CODES = frozenset({11, 26})  # CORRUPT NOTADB
_SQLITE_READONLY_DBMOVED = 8 | (4 << 8)


def _read_only(path: Path) -> Optional[str]:
    """Why the journal at ``path`` cannot be written (``unwritable``: root
    included, for a mode without write bits), or None: the file, or the
    directory where it (or SQLite's ``-wal`` and ``-shm``) must be created."""
    sidecars = [Path(f"{path}{suffix}") for suffix in ("-wal", "-shm")]
    if path.exists():
        reason = unwritable(path, "the file")
        if reason is not None or all(sidecar.exists() for sidecar in sidecars):
            return reason
        creates = f"SQLite must create {path.name}-wal and {path.name}-shm there"
    else:
        creates = "the journal file must be created there"
    directory = path.parent
    while not directory.exists() and directory.parent != directory:
        directory = directory.parent  # the nearest directory that exists: the rest are made in it
    reason = unwritable(directory, f"its directory {directory}")
    return None if reason is None else f"{reason} ({creates})"


def _warn_if_shared(path: Path) -> None:
    """Warn when an existing journal file can be read by others: it holds
    prompts, answers and the ids that resolve pending callbacks. Its mode is
    left as it is (it may be shared on purpose)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return
    if mode & 0o077:
        log.warning(
            "the journal %s has mode %04o: other users can read its prompts, answers and callback ids "
            "(run 'chmod 600 %s'; files this release creates are 0600)", path, mode, path,
        )


def _columns(connection: sqlite3.Connection, table: str) -> List[str]:
    """The column names of ``table`` (none if it does not exist; a read)."""
    return [str(row[1]) for row in connection.execute(f"PRAGMA table_info({table})")]


def _has_all(connection: sqlite3.Connection, names: Tuple[str, ...]) -> bool:
    """Whether every table and index in ``names`` exists (a read)."""
    found = connection.execute(
        f"SELECT count(*) FROM sqlite_master WHERE name IN ({', '.join(['?'] * len(names))})",
        names,
    ).fetchone()[0]
    return int(found) == len(names)


def _is_busy(error: sqlite3.OperationalError) -> bool:
    """Whether ``error`` is SQLITE_BUSY or SQLITE_LOCKED (any extended code).

    An ``OperationalError`` whose code is unknown (``_error_code``) counts as
    busy (the callers retry for a bounded time only).
    """
    code = _error_code(error)
    return code is None or code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED


# SQLite's own text for a primary result code (sqlite3_errstr), which begins
# the message of an error Python 3.10's sqlite3 raises without the code.
_CODE_OF_MESSAGE = (
    ("database is locked", 5), ("database table is locked", 6), ("attempt to write a readonly database", 8),
    ("disk I/O error", 10), ("database disk image is malformed", 11), ("database or disk is full", 13),
    ("unable to open database file", 14), ("locking protocol", 15), ("file is not a database", 26),
)


def _error_code(error: sqlite3.Error) -> Optional[int]:
    """SQLite's (extended) result code of ``error``: ``sqlite_errorcode`` from
    Python 3.11; on 3.10 the primary code its message begins with (so no
    extended code, e.g. no SQLITE_READONLY_DBMOVED), or None."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return int(code)
    message = str(error)
    return next((code for text, code in _CODE_OF_MESSAGE if message.startswith(text)), None)
