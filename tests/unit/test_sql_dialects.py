"""``SQLJournalStore`` over its dialects: one transaction per write and none
per read, rollback on failure, broken connections dropped, the schema each
dialect creates (and migrates), what a dialect may show of where it points;
and pruning in batches, on every store.

A recording dialect wraps the real SQLite or PostgreSQL dialect and logs
what the store asks of it, so these tests see the store's calls while every
statement still runs on a real database. The PostgreSQL cases skip without
``FLINK_AGENTS_POSTGRES_DSN``, as in ``test_journal_stores.py``.
"""

from __future__ import annotations

import pickle
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from flink_agents.stores import CallbackRef, JournalEntry, JournalStoreError, SQLJournalStore
from flink_agents.stores import _sql, _sql_callbacks
from flink_agents.stores._dialect import SCHEMA_OBJECTS, Dialect
from flink_agents.stores.postgres_store import PostgresDialect, PostgresJournalStore
from flink_agents.stores.sqlite_store import SQLiteDialect, SQLiteJournalStore
from tests.support.journal_stores import (
    FakeClock,
    MakeStore,
    entry,
    postgres_schema,
    run_end,
    store_factory,
)


class Recording(Dialect):
    """A dialect that logs the store's requests and delegates to ``inner``."""

    def __init__(self, inner: Dialect) -> None:
        self.inner = inner
        self.placeholder, self.upsert = inner.placeholder, inner.upsert
        self.integer, self.real, self.blob = inner.integer, inner.real, inner.blob
        self.log: List[str] = []
        self.broken_once = False

    def describe(self) -> str:
        return self.inner.describe()

    def connect(self) -> Any:
        self.log.append("connect")
        return self.inner.connect()

    def classify(self, error: BaseException) -> Any:
        return self.inner.classify(error)

    def check(self, connection: Any) -> None:
        self.inner.check(connection)

    def is_broken(self, connection: Any) -> bool:
        broken, self.broken_once = self.broken_once, False
        if broken:
            connection.close()
        return broken or self.inner.is_broken(connection)

    @contextmanager
    def transaction(self, connection: Any) -> Iterator[None]:
        self.log.append("begin")
        try:
            with self.inner.transaction(connection):
                yield
        except BaseException:
            self.log.append("rollback")
            raise
        self.log.append("commit")


def driver_error(dialect: Recording) -> type:
    """The driver's own error, which a failed read or write chains from."""
    if isinstance(dialect.inner, SQLiteDialect):
        return sqlite3.Error
    import psycopg

    return psycopg.Error


@pytest.fixture(params=["sqlite", "postgres"])
def dialect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Recording]:
    if request.param == "sqlite":
        yield Recording(SQLiteDialect(tmp_path / "journal.db"))
    else:
        with postgres_schema() as dsn:
            yield Recording(PostgresDialect(dsn))


def test_each_write_is_one_transaction_and_reads_take_none(dialect: Recording) -> None:
    clock = FakeClock(100.0)
    store = SQLJournalStore(dialect, clock=clock)
    try:
        store.append("job", "k", 0, [entry("a@0", 0), entry("a@0", 1)])
        store.load_run("job", "k", 0)
        store.register(CallbackRef("job", "k", 0, "a@0", 0), "cb-1", "p", 1, 2)
        store.get_callback("cb-1")
        store.complete("cb-1", "resolved", b"ok", 3)
        store.finished_callbacks(["cb-1"])
        store.append("job", "k", 0, [run_end()])
        store.close_run("job", "k", 0, 4)
        store.count_entries()
        assert store.prune_callbacks(1e12, "job") == 1 and store.prune(1e12, "job") == 3
        assert dialect.log == ["connect"] + ["begin", "commit"] * 7
        assert store.writes == 2
    finally:
        store.close()


def test_a_failed_write_rolls_back_and_the_connection_stays(dialect: Recording) -> None:
    store = SQLJournalStore(dialect)
    try:
        bad = JournalEntry("a@0", 1, "f:g", "", {"not": "text"})  # type: ignore[arg-type]
        with pytest.raises(JournalStoreError) as raised:
            store.append("job", "k", 0, [entry("a@0", 0), bad])
        assert type(raised.value) is JournalStoreError  # terminal: not retried
        assert isinstance(raised.value.__cause__, driver_error(dialect))
        assert raised.value.operation == "append" and raised.value.run == ("job", "k", 0)
        store.append("job", "k", 0, [entry("a@0", 0)])
        assert dialect.log == ["connect", "begin", "rollback", "begin", "commit"]
        assert store.count_entries() == 1 and store.writes == 1
    finally:
        store.close()


def test_a_broken_connection_is_dropped_and_the_next_call_reconnects(dialect: Recording) -> None:
    store = SQLJournalStore(dialect)
    try:
        store.append("job", "k", 0, [entry("a@0", 0)])
        dialect.broken_once = True  # the connection breaks during this read
        store.count_entries()
        assert store.load_run("job", "k", 0) == {("a@0", 0): entry("a@0", 0)}
        assert dialect.log.count("connect") == 2
    finally:
        store.close()


def test_schema_creates_every_object_once_and_again_is_a_no_op(dialect: Recording) -> None:
    store = SQLJournalStore(dialect)
    try:
        store.count_entries()  # connect: creates the schema
        with dialect.inner.transaction(store._connection):
            for statement in dialect.schema():  # an up-to-date database: nothing happens
                store._connection.execute(statement)
        if isinstance(dialect.inner, SQLiteDialect):
            found = "SELECT name FROM sqlite_master"
        else:
            found = "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        names = {row[0] for row in store._connection.execute(found)}
        assert set(SCHEMA_OBJECTS) <= names
    finally:
        store.close()


def test_every_statement_takes_the_dialects_placeholder() -> None:
    templates = [_sql.SELECT_RUN, _sql.PRUNE, _sql_callbacks.INSERT, _sql_callbacks.ACCEPT,
                 _sql_callbacks.CLOSE_RUN, _sql_callbacks.PRUNE, _sql_callbacks.select_finished(3)]
    for dialect in (SQLiteDialect(Path("j.db")), PostgresDialect("postgresql://u@h/db")):
        for template in templates + [dialect.upsert]:
            sql = dialect.sql(template)
            assert "{p}" not in sql and sql.count(dialect.placeholder) == template.count("{p}")


def test_dialects_pickle_and_show_no_password(tmp_path: Path) -> None:
    dialect = PostgresDialect("postgresql://alice:s3cret-pw@db.example:5432/journal", 3)
    copy = pickle.loads(pickle.dumps(dialect))
    assert (copy.dsn, copy.connect_timeout_s) == (dialect.dsn, 3)
    shown = [dialect.describe(), repr(dialect), repr(PostgresJournalStore(dialect.dsn))]
    assert all("db.example" in text and "s3cret-pw" not in text for text in shown)
    sqlite = SQLiteDialect(tmp_path / "j.db", busy_timeout_ms=5, synchronous="normal")
    assert (sqlite.busy_timeout_ms, sqlite.synchronous) == (5, "NORMAL")
    assert pickle.loads(pickle.dumps(sqlite)).path == tmp_path / "j.db"
    with pytest.raises(ValueError, match="busy_timeout_ms"):
        SQLiteDialect(tmp_path / "j.db", busy_timeout_ms=-1)


# --- pruning in batches ---------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    with store_factory(request.param, tmp_path) as make:
        yield make


def test_prune_in_batches_keeps_whole_runs_and_ties(make_store: MakeStore) -> None:
    """More runs than one batch, all ending at one instant (ties at every
    page boundary), each with a nested sub-agent journal and a callback."""
    clock = FakeClock(100.0)
    store = make_store(clock=clock)
    runs = 2 * _sql.PRUNE_BATCH_RUNS + 7
    for seq in range(runs):
        store.append("job", f"k{seq % 5}", seq, [entry("a@0", 0), run_end()])
        store.append(f"job/call-{seq}", f"k{seq % 5}", seq, [entry("c@0", 0)])
        store.register(CallbackRef(f"job/call-{seq}", f"k{seq % 5}", seq, "w@0", 0), f"cb-{seq}", "p", 1, 2)
    clock.now = 200.0
    store.append("job", "late", 0, [entry("a@0", 0), run_end()])
    store.register(CallbackRef("job", "late", 0, "w@0", 0), "cb-late", "p", 1, 2)
    assert store.prune_callbacks(150.0, "job") == runs
    assert store.prune(150.0, "job") == 3 * runs
    assert store.count_entries() == 2 and store.get_callback("cb-late") is not None
    assert store.get_callback("cb-0") is None and store.load_run("job/call-1", "k1", 1) == {}


def test_each_prune_batch_is_its_own_transaction(dialect: Recording) -> None:
    store = SQLJournalStore(dialect, clock=FakeClock(100.0))
    try:
        for seq in range(_sql.PRUNE_BATCH_RUNS + 1):
            store.append("job", "k", seq, [run_end()])
        dialect.log.clear()
        assert store.prune(150.0, "job") == _sql.PRUNE_BATCH_RUNS + 1
        assert dialect.log == ["begin", "commit"] * 2  # the lock is free in between
    finally:
        store.close()


def test_an_older_sqlite_file_gets_the_prune_indexes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:
        connection.execute(_sql.create_table("INTEGER", "REAL"))
        connection.execute(
            f"CREATE INDEX journal_run_end ON journal (committed_at) WHERE {_sql.RUN_END_PREDICATE}"
        )
        connection.execute("PRAGMA user_version = 1")
    connection.close()
    store = SQLiteJournalStore(path)
    try:
        store.count_entries()
    finally:
        store.close()
    with sqlite3.connect(path) as connection:
        names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    connection.close()
    assert set(SCHEMA_OBJECTS) <= names and "journal_run_end" not in names


def test_prune_pages_past_one_window_of_finished_runs(tmp_path: Path) -> None:
    """More finished runs than one read of the run-end index holds, all
    ending at one instant (a tie across the window boundary): each is
    deleted once, with its nested run, and the run ending later stays."""
    clock = FakeClock(100.0)
    store = SQLiteJournalStore(tmp_path / "journal.db", clock=clock, synchronous="NORMAL")
    runs = _sql.PRUNE_WINDOW_RUNS + 3
    try:
        for seq in range(runs):
            store.append("job", f"k{seq % 7}", seq, [entry("a@0", 0), run_end()])
        store.append("job/call-1", "k1", 1, [entry("c@0", 0)])
        clock.now = 200.0
        store.append("job", "late", 0, [run_end()])
        assert store.prune(150.0, "job") == 2 * runs + 1
        assert store.count_entries() == 1 and store.load_run("job/call-1", "k1", 1) == {}
    finally:
        store.close()
