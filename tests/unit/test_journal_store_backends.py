"""Each journal store's own duties: the in-memory store's fault injection,
SQLite's processes, file and schema checks, PostgreSQL's connection and schema
errors, the factory, and the package's imports."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from flink_agents.stores import (
    InMemoryJournalStore,
    JournalEntry,
    JournalSchemaError,
    JournalUnavailableError,
    PostgresJournalStore,
    SQLiteJournalStore,
    open_journal_store,
)
from tests.support import journal_writers
from tests.support.journal_stores import DSN_ENV, entry, postgres_schema


# --- in-memory: fault injection -----------------------------------------------------


class Crash(Exception):
    pass


def test_memory_crash_before_append_writes_nothing() -> None:
    store = InMemoryJournalStore()

    def crash(entries: List[JournalEntry]) -> None:
        raise Crash(len(entries))

    store.before_append = crash
    with pytest.raises(Crash):
        store.append("job", "k", 0, [entry("a@0", 0)])
    assert store.count_entries() == 0 and store.writes == 0


def test_memory_crash_after_append_keeps_the_write() -> None:
    store = InMemoryJournalStore()
    seen: List[int] = []

    def crash(entries: List[JournalEntry]) -> None:
        seen.append(store.count_entries())  # hooks may read the store
        raise Crash()

    store.after_append = crash
    with pytest.raises(Crash):
        store.append("job", "k", 0, [entry("a@0", 0)])
    assert seen == [1]
    assert store.load_run("job", "k", 0) == {("a@0", 0): entry("a@0", 0)}
    assert store.writes == 1


def test_memory_rejects_what_a_driver_would() -> None:
    store = InMemoryJournalStore()
    with pytest.raises(TypeError, match=r"entries\[0\]\.payload must be str"):
        store.append("job", "k", 0, [JournalEntry("a@0", 0, "", "", 3)])  # type: ignore[arg-type]


# --- SQLite -----------------------------------------------------------------------------


def test_sqlite_processes_append_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    writers = [
        context.Process(target=journal_writers.append_runs, args=(path, name, 200, start))
        for name in ("w0", "w1")
    ]
    for writer in writers:
        writer.start()
    start.set()
    for writer in writers:
        writer.join(60)
    assert [writer.exitcode for writer in writers] == [0, 0]
    store = SQLiteJournalStore(path)
    try:
        assert store.count_entries() == 400
        for name in ("w0", "w1"):
            assert store.load_run("job", name, 199)[("a@0", 0)].payload == f'"{name}-199"'
    finally:
        store.close()


def test_sqlite_file_is_in_wal_mode_in_a_created_directory(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "journal.db"
    store = SQLiteJournalStore(path)
    store.count_entries()
    store.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("PRAGMA user_version").fetchone()[0] == 1


def test_sqlite_refuses_another_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA user_version = 7")
    with pytest.raises(JournalSchemaError, match="schema version 7") as raised:
        SQLiteJournalStore(path).load_run("job", "k", 0)
    assert str(path) in str(raised.value)


def test_sqlite_refuses_a_file_that_is_not_a_journal(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE journal (x)")
    with pytest.raises(JournalSchemaError, match="not a flink_agents journal"):
        SQLiteJournalStore(foreign).count_entries()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"certainly not sqlite" * 100)
    with pytest.raises(JournalSchemaError, match="not an SQLite database"):
        SQLiteJournalStore(garbage).count_entries()


def test_sqlite_rejects_unknown_synchronous_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteJournalStore(tmp_path / "j.db", synchronous="OFF")


# --- PostgreSQL -----------------------------------------------------------------------


def test_postgres_unreachable_names_host_and_database_not_password() -> None:
    store = PostgresJournalStore("postgresql://alice:s3cret-pw@127.0.0.1:1/journal_db")
    with pytest.raises(JournalUnavailableError) as raised:
        store.count_entries()
    message = str(raised.value)
    assert "127.0.0.1" in message and "journal_db" in message
    assert "s3cret-pw" not in message and "s3cret-pw" not in repr(store)


def test_postgres_refuses_another_schema_version() -> None:
    import psycopg

    with postgres_schema() as dsn:
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute("CREATE TABLE journal_schema (version INTEGER NOT NULL)")
            connection.execute("INSERT INTO journal_schema VALUES (7)")
        with pytest.raises(JournalSchemaError, match=r"schema version\(s\) \[7\]"):
            PostgresJournalStore(dsn).count_entries()


# --- factory and package ----------------------------------------------------------------


def test_factory_defaults_to_sqlite_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_journal_store({})
    assert isinstance(store, SQLiteJournalStore)
    assert store.path == tmp_path / "flink_agents_journal.db"
    custom = open_journal_store({"journal.store": "sqlite", "journal.sqlite.path": "x/j.db"})
    assert isinstance(custom, SQLiteJournalStore) and custom.path == tmp_path / "x" / "j.db"


def test_factory_opens_memory_and_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(open_journal_store({"journal.store": " Memory "}), InMemoryJournalStore)
    configured = open_journal_store(
        {"journal.store": "postgres", "journal.postgres.dsn": "postgresql://u@db.example:5432/a"}
    )
    assert isinstance(configured, PostgresJournalStore) and "db.example" in repr(configured)
    monkeypatch.setenv(DSN_ENV, "postgresql://u@from-env.example/b")
    from_env = open_journal_store({"journal.store": "postgres"})
    assert "from-env.example" in repr(from_env)  # built, not connected
    monkeypatch.delenv(DSN_ENV)
    with pytest.raises(ValueError, match=DSN_ENV):
        open_journal_store({"journal.store": "postgres"})


def test_factory_rejects_an_unknown_store() -> None:
    with pytest.raises(ValueError, match="'sqlite', 'memory', 'postgres'"):
        open_journal_store({"journal.store": "redis"})


def test_package_imports_without_psycopg() -> None:
    code = (
        "import sys, flink_agents.stores as s\n"
        "missing = [n for n in s.__all__ if not hasattr(s, n)]\n"
        "assert not missing, missing\n"
        "assert 'psycopg' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
