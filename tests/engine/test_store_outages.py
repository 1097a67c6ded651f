"""Transient store outages are ridden out, lasting ones fail cleanly, and a
journal file removed or replaced under a running job fails it with an error
naming the file (issue 14, part 6).

PostgreSQL outages are simulated without touching the shared server: the
store's backend is terminated from another connection, or the store talks
through a ``CuttableProxy`` the test cuts for about a second. The PostgreSQL
cases skip without ``FLINK_AGENTS_POSTGRES_DSN``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed, JournalUnavailable
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores import (
    ACCEPTED,
    RESOLVED,
    CallbackRef,
    JournalReplacedError,
    JournalUnavailableError,
    PostgresJournalStore,
    SQLiteJournalStore,
    SQLJournalStore,
    StoreRetry,
)
from flink_agents.stores.sqlite_store import SQLiteDialect
from tests.support.cuttable_proxy import CuttableProxy
from tests.support.journal_stores import FakeTime, entry, postgres_schema
from tests.support import host_runs

CALLS: Counter = Counter()


def _chain(error: BaseException) -> List[BaseException]:
    found: List[BaseException] = []
    while error is not None and error not in found:
        found.append(error)
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return found


# --- PostgreSQL: a lost connection ------------------------------------------------------


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    with postgres_schema() as dsn:
        yield dsn


def _terminate(dsn: str, application_name: str) -> None:
    """Terminate every backend of ``application_name`` and wait until those
    are gone (the store's pool may open new ones meanwhile)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        killed = {row[0] for row in admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        )}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the backends exit asynchronously
        with psycopg.connect(dsn, autocommit=True) as admin:
            if not killed & {row[0] for row in admin.execute("SELECT pid FROM pg_stat_activity")}:
                return
        time.sleep(0.01)


def test_postgres_append_reconnects_after_its_backend_was_terminated(pg_dsn: str) -> None:
    """The pool's check finds the terminated connection when handing it out
    and opens another: the append never sees the break (no retry)."""
    import psycopg

    name = f"fa_outage_{os.getpid()}_{time.monotonic_ns()}"
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, application_name=name)
    fake = FakeTime()
    store = PostgresJournalStore(dsn, sleep=fake.sleep, monotonic=fake.monotonic)
    try:
        store.append("job", "k", 0, [entry("a@0", 0)])
        opened = store.pool_stats()["connections_num"]
        _terminate(pg_dsn, name)
        store.append("job", "k", 0, [entry("a@0", 1)])  # was: psycopg.OperationalError
        assert set(store.load_run("job", "k", 0)) == {("a@0", 0), ("a@0", 1)}
        assert store.writes == 2
        assert fake.slept == []  # replaced before use, not retried
        assert store.pool_stats()["connections_num"] > opened
    finally:
        store.close()


def test_postgres_outage_past_the_retry_bound_fails_cleanly(pg_dsn: str) -> None:
    import psycopg

    proxy = CuttableProxy(("127.0.0.1", int(psycopg.conninfo.conninfo_to_dict(pg_dsn).get("port") or 5432)))
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=str(proxy.port))
    fake = FakeTime()
    store = PostgresJournalStore(
        dsn, retry=StoreRetry(timeout_s=2.0, initial_backoff_s=0.1, max_backoff_s=0.4, jitter=False),
        sleep=fake.sleep, monotonic=fake.monotonic,
    )
    try:
        store.append("job", "k", 3, [entry("a@0", 0)])
        proxy.cut()  # and never restored
        with pytest.raises(JournalUnavailableError) as raised:
            store.append("job", "k", 3, [entry("a@0", 1)])
        error = raised.value
        assert error.operation == "append" and error.run == ("job", "k", 3)
        assert "append of run (journal 'job', key 'k', seq 3)" in str(error)
        assert f"port={proxy.port}" in str(error)  # where it looked
        assert fake.slept == [0.1, 0.2, 0.4, 0.4, 0.4, 0.4]  # doubling, capped, 1.9 s <= 2 s
        assert any("gave up after 7 attempts" in note for note in error.__notes__)
        assert store.writes == 1
    finally:
        proxy.cut()
        store.close()


def test_a_one_second_postgres_outage_is_ridden_out_by_a_running_record(pg_dsn: str) -> None:
    """The record's second durable call commits the first one's result while
    the network is cut for a second: the store reconnects and the record
    finishes, each call having run once."""
    import psycopg

    proxy = CuttableProxy(("127.0.0.1", int(psycopg.conninfo.conninfo_to_dict(pg_dsn).get("port") or 5432)))
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=str(proxy.port))
    store = PostgresJournalStore(dsn)

    def first(text: str) -> str:
        CALLS["first"] += 1
        proxy.cut()
        threading.Timer(1.0, proxy.restore).start()
        return text.upper()

    def second(text: str) -> str:
        CALLS["second"] += 1
        return text + "!"

    def act(event: InputEvent, ctx: Any) -> None:
        shouted = ctx.durable_execute(first, event.input)
        ctx.send_event(OutputEvent(output=ctx.durable_execute(second, shouted)))

    agent = Agent()
    agent.add_action("act", [InputEvent], act, error_strategy="retry",
                     **{"error_retry.initial_backoff_s": 0.001})
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store)
    driver = LocalDriver()
    CALLS.clear()
    started = time.monotonic()
    try:
        host_runs.process(engine, driver, "key", "hi")
    finally:
        engine.close()
        store.close()
        proxy.cut()
    assert driver.outputs == [{"key": "HI!"}]
    assert CALLS == Counter(first=1, second=1)
    assert time.monotonic() - started < 8


# --- SQLite: a locked file, a removed or replaced file ----------------------------------


def test_sqlite_write_rides_out_a_lock_held_past_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    store = SQLiteJournalStore(path, busy_timeout_ms=20)
    store.append("job", "k", 0, [entry("a@0", 0)])
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock for 0.4 s
    threading.Timer(0.4, lambda: other.execute("COMMIT")).start()
    try:
        store.append("job", "k", 0, [entry("a@0", 1)])  # was: sqlite3.OperationalError
        assert len(store.load_run("job", "k", 0)) == 2
    finally:
        store.close()
        time.sleep(0.5)
        other.close()


def test_sqlite_lock_past_the_retry_bound_names_the_operation_run_and_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    store = SQLiteJournalStore(path, busy_timeout_ms=10, retry=StoreRetry(timeout_s=0))
    store.append("job", "k", 0, [entry("a@0", 0)])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(JournalUnavailableError) as raised:
            store.append("job", "k", 7, [entry("a@0", 1)])
    finally:
        other.execute("ROLLBACK")
        other.close()
        store.close()
    error = raised.value
    assert (error.operation, error.run, error.location) == ("append", ("job", "k", 7), str(path))
    assert isinstance(error.__cause__, sqlite3.OperationalError)
    assert "database is locked" in str(error) and str(path) in str(error)


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_sqlite_file_removed_or_replaced_fails_the_next_write(tmp_path: Path, how: str) -> None:
    path = tmp_path / "journal.db"
    store = SQLiteJournalStore(path)
    store.append("job", "k", 0, [entry("a@0", 0)])
    if how == "removed":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    else:
        other = SQLiteJournalStore(tmp_path / "other.db")
        other.append("job", "k", 0, [entry("a@0", 0)])
        other.close()
        os.replace(tmp_path / "other.db", path)
    try:
        with pytest.raises(JournalReplacedError, match=f"the journal file {path} was {how}") as raised:
            store.append("job", "k", 0, [entry("a@0", 1)])
        assert raised.value.operation == "append" and raised.value.run == ("job", "k", 0)
        with pytest.raises(JournalReplacedError):  # and every write after it
            store.prune(1e12, "job")
    finally:
        store.close()


def test_a_running_record_whose_sqlite_journal_is_removed_fails_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    store = SQLiteJournalStore(path)

    def first(text: str) -> str:
        CALLS["first"] += 1
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return text.upper()

    def second(text: str) -> str:
        CALLS["second"] += 1
        return text

    def act(event: InputEvent, ctx: Any) -> None:
        ctx.send_event(OutputEvent(output=ctx.durable_execute(second, ctx.durable_execute(first, event.input))))

    agent = Agent()
    agent.add_action("act", [InputEvent], act)
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store)
    driver = LocalDriver()
    CALLS.clear()
    try:
        with pytest.raises(ActionFailed, match=r"^action 'act' failed on key 'key', record #0: JournalUnavailable: ") as raised:
            host_runs.process(engine, driver, "key", "hi")
    finally:
        engine.close()
        store.close()
    chain = _chain(raised.value)
    assert any(isinstance(error, JournalUnavailable) for error in chain), chain
    replaced = [error for error in chain if isinstance(error, JournalReplacedError)]
    assert replaced and f"the journal file {path} was removed" in str(replaced[0])
    assert driver.outputs == []  # no output on a result whose journal is gone
    assert CALLS == Counter(first=1)  # nothing ran on top of the lost write


def test_store_retry_options_are_read_from_the_job_configuration(tmp_path: Path) -> None:
    from flink_agents.stores import open_journal_store

    store = open_journal_store({
        "journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "j.db"),
        "journal.retry.timeout_s": "2.5", "journal.retry.max_backoff_s": 0.5,
    })
    assert store.retry == StoreRetry(timeout_s=2.5, initial_backoff_s=0.05, max_backoff_s=0.5)
    with pytest.raises(ValueError, match="'journal.retry.timeout_s': expected a number, got 'soon'"):
        open_journal_store({"journal.store": "sqlite", "journal.retry.timeout_s": "soon"})
    with pytest.raises(ValueError, match="max_backoff_s"):
        StoreRetry(initial_backoff_s=2.0, max_backoff_s=1.0)


class _LosesTheFirstCommitReply(SQLiteDialect):
    """SQLite whose first committed write then fails as a lost connection
    would: the commit landed, the caller hears an error."""

    failed = False

    @contextmanager
    def transaction(self, connection: sqlite3.Connection) -> Iterator[None]:
        with super().transaction(connection):
            yield
        if not self.failed:
            self.failed = True
            error = sqlite3.OperationalError("disk I/O error")
            error.sqlite_errorcode = 10  # type: ignore[attr-defined]  # SQLITE_IOERR
            raise error


def test_a_complete_retried_after_its_commit_landed_is_still_accepted(tmp_path: Path) -> None:
    fake = FakeTime()
    store = SQLJournalStore(
        SQLiteDialect(tmp_path / "journal.db"), sleep=fake.sleep, monotonic=fake.monotonic
    )
    store.register(CallbackRef("job", "k", 0, "wait@0", 0), "cb-1", "approval", 1, 10_000)
    store.close()
    store = SQLJournalStore(
        _LosesTheFirstCommitReply(tmp_path / "journal.db"), sleep=fake.sleep, monotonic=fake.monotonic
    )
    try:
        result = store.complete("cb-1", RESOLVED, b"yes", 500, count_late=True)
        assert len(fake.slept) == 1 and 0 <= fake.slept[0] <= 0.05  # retried once, after a jittered wait
        assert result.outcome == ACCEPTED  # its own commit, not someone else's: not late
        assert result.record is not None and result.record.late_completions == 0
        assert store.get_callback("cb-1").late_completions == 0
    finally:
        store.close()
