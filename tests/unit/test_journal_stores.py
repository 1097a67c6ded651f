"""The journal store contract, run on every store.

``make_store`` yields the in-memory store, SQLite in ``tmp_path`` and
PostgreSQL in a fresh schema of ``FLINK_AGENTS_POSTGRES_DSN``; the PostgreSQL
cases skip when that variable is unset (``bash tools/test.sh`` starts a server
and sets it) and fail under ``CI=true``. Each store's own duties are tested in
``test_journal_store_backends.py``.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from pathlib import Path
from typing import Iterator

import pytest

from flink_agents.stores import COMPLETION, JournalEntry, JournalStoreError
from tests.support import journal_writers
from tests.support.journal_stores import FakeClock, MakeStore, entry, run_end, store_factory


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    with store_factory(request.param, tmp_path) as make:
        yield make


@pytest.fixture(params=["sqlite", "postgres"])
def make_durable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    """Like ``make_store``, for stores whose data outlives the instance."""
    with store_factory(request.param, tmp_path) as make:
        yield make


# --- the contract -----------------------------------------------------------------


def test_append_then_load_run_round_trips(make_store: MakeStore) -> None:
    store = make_store()
    entries = [entry("plan@0", 0, '{"a": 1}'), entry("plan@0", 1), entry("plan@0", COMPLETION)]
    store.append("job", "user-1", 7, entries)
    assert store.load_run("job", "user-1", 7) == {(e.step, e.ordinal): e for e in entries}
    assert store.load_run("job", "user-1", 8) == {}


def test_payload_text_round_trips_exactly(make_store: MakeStore) -> None:
    store = make_store()
    payloads = ["", '"naïve — 猫 \\u0000 🙂"', "x" * 100_000, "line\nbreak\ttab"]
    store.append("job", "k", 0, [entry("a@0", i, p) for i, p in enumerate(payloads)])
    loaded = store.load_run("job", "k", 0)
    assert [loaded[("a@0", i)].payload for i in range(len(payloads))] == payloads


def test_same_step_and_ordinal_replaces(make_store: MakeStore) -> None:
    store = make_store()
    store.append("job", "k", 0, [entry("a@0", 0, '"first"'), entry("a@0", 1)])
    store.append("job", "k", 0, [entry("a@0", 0, '"second"')])
    run = store.load_run("job", "k", 0)
    assert run[("a@0", 0)].payload == '"second"'
    assert set(run) == {("a@0", 0), ("a@0", 1)}
    assert store.count_entries() == 2


def test_runs_are_isolated_by_journal_key_and_sequence(make_store: MakeStore) -> None:
    store = make_store()
    runs = [("job", "k", 0), ("job", "k", 1), ("job", "other", 0), ("other-job", "k", 0)]
    for journal_id, key, seq in runs:
        store.append(journal_id, key, seq, [entry("a@0", 0, f'"{journal_id}/{key}/{seq}"')])
    for journal_id, key, seq in runs:
        assert store.load_run(journal_id, key, seq) == {
            ("a@0", 0): entry("a@0", 0, f'"{journal_id}/{key}/{seq}"')
        }


def _rejected_entry_error(kind: str) -> type:
    """What ``append`` raises for a field its backend cannot store (each
    store's docstring): the memory store checks like a driver would."""
    if kind == "memory":
        return TypeError
    return JournalStoreError  # the SQL stores' own error, chained from the driver's


def test_failed_append_writes_nothing(make_store: MakeStore, request: pytest.FixtureRequest) -> None:
    store = make_store()
    bad = JournalEntry("a@0", 1, "f:g", "", {"not": "text"})  # type: ignore[arg-type]
    with pytest.raises(_rejected_entry_error(request.node.callspec.params["make_store"])) as raised:
        store.append("job", "k", 0, [entry("a@0", 0), bad, entry("a@0", 2)])
    if isinstance(raised.value, TypeError):
        assert "entries[1].payload" in str(raised.value)  # names the entry and field
    assert store.load_run("job", "k", 0) == {}
    assert store.count_entries() == 0
    assert store.writes == 0
    store.append("job", "k", 0, [entry("a@0", 0)])  # the store is still usable
    assert store.count_entries() == 1


def test_writes_counts_appends_that_wrote(make_store: MakeStore) -> None:
    store = make_store()
    store.append("job", "k", 0, [entry("a@0", 0), entry("a@0", COMPLETION)])
    store.append("job", "k", 0, [run_end()])
    store.append("job", "k", 1, [])  # nothing to write: no commit
    assert store.writes == 2


def test_count_entries_spans_all_runs(make_store: MakeStore) -> None:
    store = make_store()
    assert store.count_entries() == 0
    store.append("job", "a", 0, [entry("s@0", 0), entry("s@0", 1)])
    store.append("other", "b", 3, [entry("s@0", 0)])
    assert store.count_entries() == 3


def test_prune_deletes_runs_that_ended_before_the_cutoff(make_store: MakeStore) -> None:
    clock = FakeClock(100.0)
    store = make_store(clock=clock)
    store.append("job", "old", 0, [entry("a@0", 0), entry("a@0", COMPLETION), run_end()])
    clock.now = 200.0
    store.append("job", "new", 0, [entry("a@0", 0), run_end()])
    clock.now = 50.0  # an unfinished run, older than both: never pruned
    store.append("job", "open", 0, [entry("a@0", 0), entry("a@0", COMPLETION)])

    assert store.prune(finished_before_s=100.0, journal_id="job") == 0  # strictly before
    assert store.prune(finished_before_s=150.0, journal_id="job") == 3
    assert store.load_run("job", "old", 0) == {}
    assert len(store.load_run("job", "new", 0)) == 2
    assert store.prune(finished_before_s=1e12, journal_id="job") == 2
    assert store.load_run("job", "open", 0) == {
        ("a@0", 0): entry("a@0", 0),
        ("a@0", COMPLETION): entry("a@0", COMPLETION),
    }
    assert store.count_entries() == 2


def test_prune_uses_the_run_end_commit_time(make_store: MakeStore) -> None:
    clock = FakeClock(100.0)
    store = make_store(clock=clock)
    store.append("job", "k", 0, [entry("a@0", 0)])
    clock.now = 300.0
    store.append("job", "k", 0, [run_end()])  # the run ended at 300, began at 100
    assert store.prune(finished_before_s=200.0, journal_id="job") == 0
    assert store.prune(finished_before_s=301.0, journal_id="job") == 2


def test_threads_share_one_store(make_store: MakeStore) -> None:
    store = make_store()

    def work(thread: int) -> None:
        for seq in range(25):
            store.append("job", f"t{thread}", seq, [entry("a@0", 0), entry("a@0", COMPLETION)])
            assert len(store.load_run("job", f"t{thread}", seq)) == 2

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert store.count_entries() == 6 * 25 * 2
    assert store.writes == 6 * 25


def test_committed_entries_outlive_the_store_instance(make_durable_store: MakeStore) -> None:
    first = make_durable_store()
    first.append("job", "k", 0, [entry("a@0", 0)])
    first.close()
    assert make_durable_store().load_run("job", "k", 0) == {("a@0", 0): entry("a@0", 0)}


def test_forked_child_does_not_reuse_the_parent_connection(make_durable_store: MakeStore) -> None:
    store = make_durable_store()
    store.append("job", "parent", 0, [entry("a@0", 0)])  # the parent's connection is open
    child = multiprocessing.get_context("fork").Process(
        target=journal_writers.append_one, args=(store, "child")
    )
    child.start()
    child.join(30)
    assert child.exitcode == 0
    store.append("job", "parent", 1, [entry("a@0", 0)])  # still works after the fork
    assert len(store.load_run("job", "child", 0)) == 1
    assert store.count_entries() == 3


def test_store_pickles_without_its_connection(make_durable_store: MakeStore) -> None:
    store = make_durable_store()
    store.append("job", "k", 0, [entry("a@0", 0)])
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert copy.load_run("job", "k", 0) == {("a@0", 0): entry("a@0", 0)}
    finally:
        copy.close()
