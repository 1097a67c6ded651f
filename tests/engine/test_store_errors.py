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
    JournalStoreError,
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


# A read-only journal location (issue 27, section 4). Root writes through
# permission bits, so "read-only" cannot rest on os.access alone: the store
# counts a file or directory with no write bit for anyone as read-only for
# every user, root included, and asks os.access for the rest (another
# user's file, a read-only mount). A 0555 directory and a 0444 file are
# therefore read-only as root and as any other user alike.
@pytest.mark.parametrize("where", ["directory", "subdirectory", "file", "directory-of-a-file-without-wal"])
def test_a_read_only_journal_location_fails_at_once_naming_the_path(tmp_path: Path, where: str) -> None:
    import time

    from flink_agents.stores.errors import JournalStoreError, JournalUnavailableError

    locked = tmp_path / "locked"
    locked.mkdir()
    path = locked / ("more/journal.db" if where == "subdirectory" else "journal.db")
    if where in ("file", "directory-of-a-file-without-wal"):
        existing = SQLiteJournalStore(path)
        existing.count_entries()
        existing.close()  # a journal that exists, its -wal and -shm gone with the last connection
        assert sorted(p.name for p in locked.iterdir()) == ["journal.db"]
    if where == "file":
        path.chmod(0o444)
    else:
        locked.chmod(0o555)
    started = time.monotonic()
    try:
        with pytest.raises(JournalStoreError) as failure:
            SQLiteJournalStore(path, retry=StoreRetry(timeout_s=5)).load_run("job", "k", 0)
    finally:
        locked.chmod(0o755)
        path.chmod(0o644) if path.exists() else None

    message = str(failure.value)
    assert not isinstance(failure.value, JournalUnavailableError)  # terminal: no retries
    assert time.monotonic() - started < 2
    assert f"the journal {path} is read-only:" in message
    if where == "file":
        assert "the file has mode 0444 (no write permission for anyone)" in message
    else:
        assert f"its directory {locked} has mode 0555" in message
    if where == "directory-of-a-file-without-wal":
        assert "SQLite must create journal.db-wal and journal.db-shm there" in message
    assert "unable to open database file" not in message


def test_a_read_only_journal_fails_the_local_job_with_the_path(tmp_path: Path) -> None:
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment
    from tests.engine.test_private_files import EchoAgent

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    env = AgentsExecutionEnvironment.get_execution_environment(
        **{"journal.store": "sqlite", "journal.sqlite.path": str(locked / "j.db")}
    )
    env.from_list([{"key": "k", "value": 1}]).apply(EchoAgent()).to_list()
    try:
        with pytest.raises(JournalStoreError, match=r"is read-only") as failure:
            env.execute()
    finally:
        locked.chmod(0o755)
    chain, error = [], failure.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__
    assert any(f"the journal {locked / 'j.db'} is read-only" in text for text in chain), chain
