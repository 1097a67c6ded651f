"""The callback port (``CallbackStore``), run on every store.

``backend`` yields the in-memory store, SQLite (a file under ``tmp_path``) and
PostgreSQL (a fresh schema of ``FLINK_AGENTS_POSTGRES_DSN``, dropped
afterwards; skipped when the variable is unset, failed under ``CI=true``,
exactly as in ``test_journal_stores.py``). ``durable`` yields the two whose
rows outlive the store object.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from flink_agents.stores import (
    ACCEPTED,
    CANCELLED,
    CLOSED,
    FINAL_STATES,
    FINISHED,
    PENDING,
    REJECTED,
    RESOLVED,
    TIMED_OUT,
    UNKNOWN,
    CallbackRef,
    CallbackStore,
    InMemoryJournalStore,
    PostgresJournalStore,
    SQLiteJournalStore,
)
from flink_agents.stores.journal import RUN_END, RUN_STEP, JournalEntry
from tests.support.journal_stores import postgres_schema

RUN = ("job", "user-1", 7)  # journal id, key, record sequence number
NOW = 1_700_000_000_000  # Unix milliseconds
DEADLINE = NOW + 60_000


def ref(step: str = "approve@0", ordinal: int = 0, run: Tuple[str, str, int] = RUN) -> CallbackRef:
    journal_id, key, seq = run
    return CallbackRef(journal_id, key, seq, step, ordinal)


def open_store(kind: str, location: str) -> CallbackStore:
    """A new store object of ``kind`` over ``location`` (a file or a DSN)."""
    if kind == "sqlite":
        return SQLiteJournalStore(location)
    if kind == "postgres":
        return PostgresJournalStore(location)
    raise ValueError(kind)


class Backend:
    """Store objects of one kind over one backing store, closed afterwards.

    ``open()`` builds a new object (its own connection) for SQLite and
    PostgreSQL; the in-memory store has no backing store beyond the object,
    so ``open()`` returns the same one each time.
    """

    def __init__(self, kind: str, location: str) -> None:
        self.kind = kind
        self.location = location
        self.opened: List[CallbackStore] = []

    def open(self) -> CallbackStore:
        if self.kind == "memory":
            if not self.opened:
                self.opened.append(InMemoryJournalStore())
            return self.opened[0]
        store = open_store(self.kind, self.location)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()  # type: ignore[attr-defined]


@contextmanager
def backend_of(kind: str, tmp_path: Path) -> Iterator[Backend]:
    if kind == "postgres":
        with postgres_schema() as dsn:
            backend = Backend(kind, dsn)
            try:
                yield backend
            finally:
                backend.close()
    else:
        backend = Backend(kind, str(tmp_path / "journal" / "journal.db"))
        try:
            yield backend
        finally:
            backend.close()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_of(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_of(request.param, tmp_path) as opened:
        yield opened


# --- register -----------------------------------------------------------------------


def test_register_returns_the_first_callback_of_a_ref(backend: Backend) -> None:
    store = backend.open()
    first = store.register(ref(), "cb-1", "manager approval", NOW, DEADLINE)
    assert (first.callback_id, first.ref, first.purpose) == ("cb-1", ref(), "manager approval")
    assert (first.created_ms, first.deadline_ms, first.state) == (NOW, DEADLINE, PENDING)
    assert (first.body, first.completed_ms, first.late_completions) == (None, None, 0)

    replayed = store.register(ref(), "cb-replay", "other purpose", NOW + 5, DEADLINE + 5)
    assert replayed == first
    assert store.get_callback("cb-replay") is None

    store.complete("cb-1", RESOLVED, b"yes", NOW + 10)
    after = store.register(ref(), "cb-again", "manager approval", NOW + 20, DEADLINE + 20)
    assert (after.callback_id, after.state, after.body) == ("cb-1", RESOLVED, b"yes")


def test_register_gives_every_ref_its_own_callback(backend: Backend) -> None:
    store = backend.open()
    refs = [ref(), ref(ordinal=1), ref(step="approve@0#2"), ref(run=("job", "user-1", 8)),
            ref(run=("job", "user-2", 7)), ref(run=("job/sub-1", "user-1", 7))]
    for index, each in enumerate(refs):
        assert store.register(each, f"cb-{index}", "p", NOW, DEADLINE).callback_id == f"cb-{index}"
    for index, each in enumerate(refs):
        found = store.get_callback(f"cb-{index}")
        assert found is not None and found.ref == each


def test_register_refuses_an_id_of_another_ref(backend: Backend) -> None:
    store = backend.open()
    store.register(ref(), "cb-1", "p", NOW, DEADLINE)
    with pytest.raises(ValueError, match="cb-1"):
        store.register(ref(ordinal=1), "cb-1", "q", NOW, DEADLINE)
    kept = store.get_callback("cb-1")
    assert kept is not None and kept.ref == ref() and kept.purpose == "p"
    # Nothing was stored for the refused ref: it still takes a new id.
    assert store.register(ref(ordinal=1), "cb-2", "q", NOW, DEADLINE).callback_id == "cb-2"


# --- complete -----------------------------------------------------------------------


BODIES = {
    "utf8": "naïve — 猫 🙂".encode(),
    "binary": bytes(range(256)) + b"\x00\xff\xfe",
    "empty": b"",
    "none": None,
    "1MiB": bytes((i * 7919) % 251 for i in range(1 << 20)),
}


@pytest.mark.parametrize("body_name", list(BODIES))
def test_complete_accepts_a_pending_callback_with_its_body(backend: Backend, body_name: str) -> None:
    body = BODIES[body_name]
    store = backend.open()
    store.register(ref(), "cb-1", "p", NOW, DEADLINE)
    result = store.complete("cb-1", RESOLVED, body, NOW + 100)
    assert result.outcome == ACCEPTED
    assert result.record is not None
    assert (result.record.state, result.record.completed_ms) == (RESOLVED, NOW + 100)
    stored = store.get_callback("cb-1")
    assert stored == result.record
    assert stored is not None and stored.body == body
    if body is not None:
        assert type(stored.body) is bytes


def test_first_completion_wins(backend: Backend) -> None:
    store = backend.open()
    store.register(ref(), "cb-1", "p", NOW, DEADLINE)
    assert store.complete("cb-1", REJECTED, b"\xffno", NOW + 1).outcome == ACCEPTED
    for state in FINAL_STATES:
        late = store.complete("cb-1", state, b"later", NOW + 2)
        assert late.outcome == FINISHED
        assert late.record is not None
        assert (late.record.state, late.record.body, late.record.completed_ms) == (
            REJECTED, b"\xffno", NOW + 1)
    assert store.get_callback("cb-1") == late.record


def test_late_completions_are_counted_only_when_asked(backend: Backend) -> None:
    store = backend.open()
    store.register(ref(), "cb-1", "p", NOW, DEADLINE)
    accepted = store.complete("cb-1", TIMED_OUT, None, DEADLINE, count_late=True)
    assert accepted.outcome == ACCEPTED and accepted.record is not None
    assert accepted.record.late_completions == 0  # the winner is not late
    uncounted = store.complete("cb-1", CANCELLED, None, DEADLINE + 1)
    assert uncounted.record is not None and uncounted.record.late_completions == 0
    for expected in (1, 2):
        late = store.complete("cb-1", RESOLVED, b"too late", DEADLINE + 2, count_late=True)
        assert late.outcome == FINISHED and late.record is not None
        assert (late.record.late_completions, late.record.state, late.record.body) == (
            expected, TIMED_OUT, None)
    stored = store.get_callback("cb-1")
    assert stored is not None and stored.late_completions == 2


def test_complete_of_an_unknown_id_is_unknown(backend: Backend) -> None:
    store = backend.open()
    store.register(ref(), "cb-1", "p", NOW, DEADLINE)
    for count_late in (False, True):
        result = store.complete("cb-nope", RESOLVED, b"x", NOW, count_late=count_late)
        assert (result.outcome, result.record) == (UNKNOWN, None)
    assert store.get_callback("cb-nope") is None
    stored = store.get_callback("cb-1")
    assert stored is not None and stored.state == PENDING


@pytest.mark.parametrize("state", [PENDING, "done", "RESOLVED", ""])
def test_complete_refuses_a_state_that_is_not_final(backend: Backend, state: str) -> None:
    store = backend.open()
    before = store.register(ref(), "cb-1", "p", NOW, DEADLINE)
    with pytest.raises(ValueError, match="final states"):
        store.complete("cb-1", state, b"x", NOW + 1)
    assert store.get_callback("cb-1") == before


def test_sql_stores_check_the_state_before_touching_the_database(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"certainly not sqlite" * 100)
    unreachable = PostgresJournalStore("postgresql://u@127.0.0.1:1/nowhere", connect_timeout_s=2)
    for store in (SQLiteJournalStore(garbage), unreachable):
        with pytest.raises(ValueError, match="final states"):
            store.complete("cb-1", "bogus", None, NOW)


# --- races --------------------------------------------------------------------------


def test_threads_racing_on_a_callback_have_one_winner(backend: Backend) -> None:
    threads, rounds = 8, 6
    stores = [backend.open() for _ in range(threads)]  # SQL: one connection each
    ids = [f"cb-{n}" for n in range(rounds)]
    for n, callback_id in enumerate(ids):
        stores[0].register(ref(ordinal=n), callback_id, "p", NOW, DEADLINE)
    for store in stores:
        store.get_callback(ids[0])  # connect before the race
    barrier = threading.Barrier(threads)
    outcomes: Dict[Tuple[str, int], Any] = {}

    def race(t: int) -> None:
        for callback_id in ids:
            barrier.wait(30)
            outcomes[callback_id, t] = stores[t].complete(
                callback_id, FINAL_STATES[t % len(FINAL_STATES)], f"thread {t}".encode(), NOW + t
            )

    workers = [threading.Thread(target=race, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert len(outcomes) == threads * rounds
    for callback_id in ids:
        results = [outcomes[callback_id, t] for t in range(threads)]
        winners = [t for t, result in enumerate(results) if result.outcome == ACCEPTED]
        assert len(winners) == 1, (callback_id, [r.outcome for r in results])
        won = winners[0]
        expected = (FINAL_STATES[won % len(FINAL_STATES)], f"thread {won}".encode(), NOW + won)
        for result in results:
            assert (result.record.state, result.record.body, result.record.completed_ms) == expected
        for store in stores:
            seen = store.get_callback(callback_id)
            assert seen is not None and (seen.state, seen.body, seen.completed_ms) == expected


def complete_in_process(
    kind: str, location: str, ids: List[str], state: str, start: Any, results: Any
) -> None:
    """Spawned child: open its own store, then for each of ``ids`` wait at
    ``start`` (a Barrier of all children, so they race on every callback) and
    complete it as ``state``; finally put ``(state, [(id, outcome, winning state,
    winning body), ...])`` on ``results``."""
    store = open_store(kind, location)
    store.get_callback(ids[0])  # connect before the race
    seen = []
    for callback_id in ids:
        start.wait(30)
        result = store.complete(callback_id, state, state.encode(), NOW)
        seen.append((callback_id, result.outcome, result.record.state, result.record.body))
    results.put((state, seen))
    store.close()  # type: ignore[attr-defined]


def test_processes_racing_on_callbacks_have_one_winner_each(durable: Backend) -> None:
    store = durable.open()
    ids = [f"cb-{n}" for n in range(40)]
    for n, callback_id in enumerate(ids):
        store.register(ref(ordinal=n), callback_id, "p", NOW, DEADLINE)
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(2), context.Queue()
    children = [
        context.Process(
            target=complete_in_process, args=(durable.kind, durable.location, ids, state, start, results)
        )
        for state in (RESOLVED, REJECTED)
    ]
    for child in children:
        child.start()
    reports = dict(results.get(timeout=60) for _ in children)
    for child in children:
        child.join(60)
    assert [child.exitcode for child in children] == [0, 0]
    for n, callback_id in enumerate(ids):
        rows = [reports[RESOLVED][n], reports[REJECTED][n]]
        assert [row[0] for row in rows] == [callback_id, callback_id]
        outcomes = sorted(row[1] for row in rows)
        assert outcomes == sorted([ACCEPTED, FINISHED]), (callback_id, rows)
        winner = next(row[2] for row in rows if row[1] == ACCEPTED)
        assert all(row[2:] == (winner, winner.encode()) for row in rows)
        fresh = durable.open().get_callback(callback_id) if n == 0 else store.get_callback(callback_id)
        assert fresh is not None and (fresh.state, fresh.body) == (winner, winner.encode())


# --- durability and schema --------------------------------------------------------


def test_a_new_store_object_sees_a_completion(durable: Backend) -> None:
    writer = durable.open()
    writer.register(ref(), "cb-1", "p", NOW, DEADLINE)
    writer.complete("cb-1", RESOLVED, b"\x00result", NOW + 5)
    writer.close()  # type: ignore[attr-defined]
    reader = durable.open()
    found = reader.get_callback("cb-1")
    assert found is not None
    assert (found.state, found.body, found.completed_ms, found.ref) == (
        RESOLVED, b"\x00result", NOW + 5, ref())
    assert reader.register(ref(), "cb-other", "p", NOW, DEADLINE).callback_id == "cb-1"
    assert reader.complete("cb-1", REJECTED, None, NOW + 6).outcome == FINISHED


# The schema of a version-1 journal file written before callbacks existed.
_V1_JOURNAL = (
    "CREATE TABLE journal (journal_id TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL,"
    " step TEXT NOT NULL, ordinal INTEGER NOT NULL, function_id TEXT NOT NULL,"
    " args_digest TEXT NOT NULL, payload TEXT NOT NULL, committed_at REAL NOT NULL,"
    " PRIMARY KEY (journal_id, key, seq, step, ordinal))",
    "CREATE INDEX journal_run_end ON journal (committed_at) WHERE step = '_run' AND ordinal = -2",
    "INSERT INTO journal VALUES ('job', 'user-1', 7, 'a@0', 0, 'f:g', '', '\"old\"', 1000.0)",
    "PRAGMA user_version = 1",
)


def test_sqlite_version_1_file_without_callbacks_gets_the_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode = WAL")
        for sql in _V1_JOURNAL:
            connection.execute(sql)
    connection.close()
    store = SQLiteJournalStore(path)
    try:
        assert store.load_run("job", "user-1", 7) == {("a@0", 0): JournalEntry("a@0", 0, "f:g", "", '"old"')}
        store.register(ref(), "cb-1", "p", NOW, DEADLINE)
        assert store.complete("cb-1", RESOLVED, b"ok", NOW + 1).outcome == ACCEPTED
    finally:
        store.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == 1
        assert connection.execute("SELECT count(*) FROM callbacks").fetchone()[0] == 1
    connection.close()
    again = SQLiteJournalStore(path)
    try:
        found = again.get_callback("cb-1")
        assert found is not None and (found.state, found.body) == (RESOLVED, b"ok")
    finally:
        again.close()


def test_postgres_version_1_schema_without_callbacks_gets_the_table() -> None:
    import psycopg

    with postgres_schema() as dsn:
        first = PostgresJournalStore(dsn)
        first.append("job", "user-1", 7, [JournalEntry("a@0", 0, "f:g", "", '"old"')])
        first.close()
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute("DROP TABLE callbacks")
        store = PostgresJournalStore(dsn)
        try:
            assert store.count_entries() == 1
            store.register(ref(), "cb-1", "p", NOW, DEADLINE)
            assert store.complete("cb-1", RESOLVED, b"ok", NOW + 1).outcome == ACCEPTED
            found = store.get_callback("cb-1")
            assert found is not None and (found.state, found.body) == (RESOLVED, b"ok")
        finally:
            store.close()


def test_sqlite_open_takes_no_write_lock_once_the_schema_is_there(tmp_path: Path) -> None:
    """The ingress must read callbacks while a worker holds the write lock."""
    path = tmp_path / "journal.db"
    writer = SQLiteJournalStore(path)
    writer.register(ref(), "cb-1", "p", NOW, DEADLINE)
    writer.close()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        reader = SQLiteJournalStore(path, busy_timeout_ms=50)
        try:
            found = reader.get_callback("cb-1")
            assert found is not None and found.state == PENDING
        finally:
            reader.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# --- finished_callbacks, close_run, prune_callbacks ---------------------------------


def test_finished_callbacks_returns_only_final_ones(backend: Backend) -> None:
    store = backend.open()
    store.register(ref(ordinal=0), "pending", "p", NOW, DEADLINE)
    store.register(ref(ordinal=1), "resolved", "p", NOW, DEADLINE)
    store.register(ref(ordinal=2), "timed-out", "p", NOW, DEADLINE)
    store.complete("resolved", RESOLVED, b"r", NOW + 1)
    store.complete("timed-out", TIMED_OUT, None, DEADLINE)
    found = store.finished_callbacks(["pending", "resolved", "timed-out", "unknown"])
    assert set(found) == {"resolved", "timed-out"}
    assert found["resolved"] == store.get_callback("resolved")
    assert found["timed-out"].state == TIMED_OUT
    assert store.finished_callbacks([]) == {}


def test_finished_callbacks_over_many_ids(backend: Backend) -> None:
    store = backend.open()
    ids = [f"unknown-{n}" for n in range(1200)]
    placed = {0: "first", 499: "chunk-end", 500: "second-chunk", 1199: "last", 800: "still-pending"}
    for position, callback_id in placed.items():
        ids[position] = callback_id
        store.register(ref(ordinal=position), callback_id, "p", NOW, DEADLINE)
        if callback_id != "still-pending":
            store.complete(callback_id, CANCELLED, None, NOW + position)
    found = store.finished_callbacks(iter(ids + ids[:10]))  # any iterable, duplicates too
    assert set(found) == {"first", "chunk-end", "second-chunk", "last"}
    assert all(record.state == CANCELLED for record in found.values())


def test_close_run_closes_only_the_runs_pending_callbacks(backend: Backend) -> None:
    store = backend.open()
    mine = {"a0": ref("a@0", 0), "a1": ref("a@0", 1), "b0": ref("b@1", 0)}
    others = {
        "other-seq": ref(run=("job", "user-1", 8)),
        "other-key": ref(run=("job", "user-2", 7)),
        "other-journal": ref(run=("job2", "user-1", 7)),
        "sub-agent": ref(run=("job/call-1", "user-1", 7)),
    }
    for callback_id, each in {**mine, **others, "done": ref("c@2", 0)}.items():
        store.register(each, callback_id, "p", NOW, DEADLINE)
    store.complete("done", RESOLVED, b"kept", NOW + 1)
    done = store.get_callback("done")

    assert store.close_run(*RUN, NOW + 50) == 3
    for callback_id in mine:
        closed = store.get_callback(callback_id)
        assert closed is not None
        assert (closed.state, closed.completed_ms, closed.body) == (CLOSED, NOW + 50, None)
    assert store.get_callback("done") == done
    for callback_id in others:
        untouched = store.get_callback(callback_id)
        assert untouched is not None and untouched.state == PENDING
    assert store.close_run(*RUN, NOW + 60) == 0
    assert store.get_callback("a0").completed_ms == NOW + 50  # type: ignore[union-attr]
    assert store.complete("a0", RESOLVED, b"late", NOW + 70).outcome == FINISHED


def test_prune_deletes_the_callbacks_of_runs_that_ended_before_the_cutoff(backend: Backend) -> None:
    """Callbacks live as long as their run: pruned with its run-end marker
    (nested sub-agent runs' too), never while the run may still replay."""
    store = backend.open()
    ended, running = RUN, ("job", "user-1", 8)
    store.register(ref(run=ended), "ended-final-0000", "p", NOW, DEADLINE)
    store.complete("ended-final-0000", RESOLVED, b"r", NOW + 1)
    store.register(ref(run=ended, ordinal=1), "ended-pending-00", "p", NOW, DEADLINE)
    store.register(ref(run=("job/child-call", "user-1", 7)), "ended-nested-000", "p", NOW, DEADLINE)
    store.register(ref(run=("job2", "user-1", 7)), "other-journal-00", "p", NOW, DEADLINE)
    store.register(ref(run=running), "running-final-00", "p", NOW, DEADLINE)
    store.complete("running-final-00", RESOLVED, b"long ago", NOW + 1)  # its run goes on
    store.append(*ended, [JournalEntry(RUN_STEP, RUN_END, "", "", '{"outcome": "ok"}')])
    ended_at = time.time()

    assert store.prune_callbacks(ended_at - 3600, "job") == 0  # the run ended after the cutoff
    assert store.prune_callbacks(ended_at + 1, "job") == 3
    gone = {
        callback_id
        for callback_id in ("ended-final-0000", "ended-pending-00", "ended-nested-000", "other-journal-00", "running-final-00")
        if store.get_callback(callback_id) is None
    }
    assert gone == {"ended-final-0000", "ended-pending-00", "ended-nested-000"}
    assert store.complete("ended-final-0000", TIMED_OUT, None, NOW).outcome == UNKNOWN
    assert store.prune_callbacks(ended_at + 1, "job") == 0
