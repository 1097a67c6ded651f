"""Store failures name themselves (issue 14, part 5): the store's own error
types carrying the operation, the run and where the store is, chained from
the driver's error; and a PostgreSQL server that accepts TCP but never
answers fails the connect within the documented timeout, however many
addresses the DSN makes psycopg try."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Iterator

import pytest

from flink_agents.stores import (
    JournalCorruptError,
    JournalUnavailableError,
    PostgresJournalStore,
    SQLiteJournalStore,
    StoreRetry,
)
from tests.support.journal_stores import entry

NO_RETRY = StoreRetry(timeout_s=0)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts TCP connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def test_postgres_connect_timeout_bounds_the_whole_connect_not_each_address(silent_port: int) -> None:
    # Three attempts (libpq makes one per host and per resolved address):
    # psycopg gives each the full timeout, 3 x 2 s; the store shares one deadline.
    hosts = ",".join(["127.0.0.1"] * 3)
    ports = ",".join([str(silent_port)] * 3)
    store = PostgresJournalStore(
        f"host={hosts} port={ports} dbname=db user=u password=pw-not-shown", connect_timeout_s=2, retry=NO_RETRY
    )
    started = time.monotonic()
    with pytest.raises(JournalUnavailableError) as raised:
        store.load_run("job", "k", 4)
    elapsed = time.monotonic() - started
    assert elapsed < 4.5, f"connect took {elapsed:.1f} s for a 2 s timeout"
    message = str(raised.value)
    assert "timeout" in message and "not tried" in message
    assert "pw-not-shown" not in message
    assert raised.value.operation == "load_run" and raised.value.run == ("job", "k", 4)


def test_postgres_unreachable_names_the_operation_and_run() -> None:
    store = PostgresJournalStore("postgresql://u@127.0.0.1:1/journal_db", retry=NO_RETRY)
    with pytest.raises(JournalUnavailableError) as raised:
        store.append("job", "k", 9, [entry("a@0", 0)])
    assert raised.value.operation == "append" and raised.value.run == ("job", "k", 9)
    assert str(raised.value).startswith("append of run (journal 'job', key 'k', seq 9) failed:")
    assert "127.0.0.1" in str(raised.value) and "journal_db" in str(raised.value)


def test_a_damaged_sqlite_file_is_a_corrupt_journal_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    store = SQLiteJournalStore(path, retry=NO_RETRY)
    store.append("job", "k", 0, [entry("a@0", n) for n in range(200)])
    store.close()  # the last connection to close checkpoints the WAL into the file
    assert path.stat().st_size > 8192
    with open(path, "r+b") as damaged:  # overwrite every page after the first
        damaged.seek(4096)
        damaged.write(b"\xff" * (path.stat().st_size - 4096))
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(JournalCorruptError) as raised:
        SQLiteJournalStore(path, retry=NO_RETRY).load_run("job", "k", 0)
    assert raised.value.operation == "load_run" and str(path) in str(raised.value)


def test_a_short_password_is_masked_as_a_token_without_mangling_the_message():
    from flink_agents.stores.postgres_store import _without_password

    text = "connection to server at 127.0.0.1 port 9 failed: p is wrong; is the server accepting connections?"

    assert _without_password(text, "postgresql://u:p@127.0.0.1:9/db") == (
        "connection to server at 127.0.0.1 port 9 failed: *** is wrong; is the server accepting connections?"
    )
    assert "s3cr3t!" not in _without_password("auth as u/s3cr3t! failed", "postgresql://u:s3cr3t!@h/db")


def test_a_journal_path_that_is_a_directory_fails_at_once_not_after_retries(tmp_path):
    import time

    from flink_agents.stores.errors import JournalStoreError, JournalUnavailableError
    from flink_agents.stores.factory import open_journal_store

    directory = tmp_path / "journal.db"
    directory.mkdir()
    started = time.monotonic()

    with pytest.raises(JournalStoreError, match="is a directory") as failure:
        store = open_journal_store({"journal.store": "sqlite", "journal.sqlite.path": str(directory)})
        store.load_run("job", '"k"', 0)

    assert not isinstance(failure.value, JournalUnavailableError)  # terminal: no retries
    assert time.monotonic() - started < 2
