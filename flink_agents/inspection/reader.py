"""A read-only connection to a journal store's database.

``open_reader(journal)`` takes what ``--journal`` names: a SQLite file path
or a ``postgresql://`` (``postgres://``) DSN (libpq ``key=value`` text
too). Neither can write:

- SQLite is opened with ``mode=ro`` (a URI) and ``PRAGMA query_only``; a
  missing file is an error, not a new database. Each query is its own
  statement-long read transaction, its rows fetched at once: in WAL mode
  (the store's) a reader never blocks a writer; in rollback-journal mode it
  holds the shared lock only while one query runs.
- PostgreSQL runs each query in a ``READ ONLY`` transaction
  (``connection.read_only``), committed once the rows are fetched.

Statements use ``{p}`` for the driver's placeholder, as ``stores._sql``.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, List, Sequence, Tuple
from urllib.parse import quote

__all__ = ["JournalReader", "open_reader"]

_DSN_PREFIXES = ("postgresql://", "postgres://")


def _is_dsn(journal: str) -> bool:
    return journal.startswith(_DSN_PREFIXES) or ("=" in journal and not os.path.exists(journal))


class JournalReader:
    """Queries over one read-only connection.

    Args:
        connection: A DB-API connection (``sqlite3`` or ``psycopg``).
        placeholder: Its parameter placeholder (``?`` or ``%s``).
        description: What it reads, for messages (a path; a DSN without its password).
        kind: ``"sqlite"`` or ``"postgres"`` (PostgreSQL commits its
            read-only transaction after each query).
    """

    def __init__(self, connection: Any, placeholder: str, description: str, kind: str) -> None:
        self._connection = connection
        self._placeholder = placeholder
        self.description = description
        self.kind = kind

    def rows(self, sql: str, params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        """Every row of ``sql`` (``{p}`` placeholders), fetched at once."""
        text = sql.replace("{p}", self._placeholder)
        if self.kind == "sqlite":
            return self._connection.execute(text, tuple(params)).fetchall()
        try:
            with self._connection.cursor() as cursor:
                cursor.execute(text, tuple(params))
                return cursor.fetchall()
        finally:
            self._connection.commit()  # ends the read-only transaction now

    def has_table(self, name: str) -> bool:
        """Whether the database holds table ``name`` (a store writes its
        callbacks table on first use; an older file may lack it)."""
        if self.kind == "sqlite":
            found = self.rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = {p}", (name,))
        else:
            found = [row for row in self.rows("SELECT to_regclass({p})", (name,)) if row[0] is not None]
        return bool(found)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "JournalReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _open_sqlite(path: str) -> JournalReader:
    absolute = os.path.abspath(path)
    if not os.path.isfile(absolute):
        raise ValueError(f"no journal at {absolute}: point --journal at the job's journal.sqlite.path")
    uri = f"file:{quote(absolute)}?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
        connection.execute("PRAGMA query_only = 1")
        connection.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # fails now if unreadable
    except sqlite3.Error as exc:
        raise ValueError(f"cannot read the SQLite journal {absolute}: {exc}") from None
    return JournalReader(connection, "?", absolute, "sqlite")


def _open_postgres(dsn: str) -> JournalReader:
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise ValueError("reading a PostgreSQL journal needs psycopg (pip install 'psycopg[binary]')") from None
    try:
        params = conninfo_to_dict(dsn)
        connection = psycopg.connect(dsn, autocommit=False)
    except (psycopg.Error, ValueError) as exc:
        raise ValueError(f"cannot connect to the PostgreSQL journal: {type(exc).__name__}") from None
    connection.read_only = True
    description = f"postgresql {params.get('host', '')}/{params.get('dbname', '')}"
    return JournalReader(connection, "%s", description, "postgres")


def open_reader(journal: str) -> JournalReader:
    """A read-only reader of ``journal``: a SQLite path or a PostgreSQL DSN.

    Raises:
        ValueError: No such file, or the database cannot be read (the
            message never holds the DSN: it may carry a password).
    """
    return _open_postgres(journal) if _is_dsn(journal) else _open_sqlite(journal)
