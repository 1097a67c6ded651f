"""The shared rate window port (``stores.rate_window``) on every store:
memory, SQLite and PostgreSQL (skipped without a server, see
``tests.support.journal_stores``). Times are passed as ``now`` (Unix
seconds), so nothing sleeps."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from flink_agents.stores import InMemoryJournalStore, SQLiteJournalStore
from flink_agents.stores import _sql_rate_window
from flink_agents.stores._dialect import SCHEMA_OBJECTS
from flink_agents.stores.rate_window import KEEP_S, RateWindowStore, wait_s
from tests.support.journal_stores import MakeStore, store_factory

KINDS = ["memory", "sqlite", "postgres"]
T0 = 1_000_000.0


@pytest.fixture(params=KINDS)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    with store_factory(request.param, tmp_path) as factory:
        yield factory


def _rows(store: RateWindowStore, scope: str) -> int:
    if isinstance(store, InMemoryJournalStore):
        return len(store._rate_scopes().get(scope, {}))
    return store._call("rows", None, lambda connection: connection.execute(  # type: ignore[attr-defined]
        store._sql(f"SELECT count(*) FROM {_sql_rate_window.TABLE} WHERE scope = {{p}}"), (scope,)).fetchone()[0])


def test_requests_fit_up_to_the_cap_then_wait_for_the_oldest(make: MakeStore) -> None:
    store = make()
    claims = [store.claim("s", 3, 10.0, now=T0 + i) for i in range(3)]
    assert all(claim_id and wait == 0.0 for claim_id, wait in claims)
    assert store.claim("s", 3, 10.0, now=T0 + 5) == (None, pytest.approx(5.0))  # the first leaves at T0 + 10
    assert store.claim("s", 3, 10.0, now=T0 + 10)[0] is not None  # (T0, T0 + 10]: the first is out
    assert store.claim("other", 3, 10.0, now=T0 + 10)[0] is not None  # scopes do not mix


def test_tokens_fit_up_to_the_cap_and_a_large_request_goes_alone(make: MakeStore) -> None:
    store = make()
    assert store.claim("s", None, 10.0, tokens=60, tokens_cap=100, tokens_window_s=10.0, now=T0)[0]
    assert store.claim("s", None, 10.0, tokens=30, tokens_cap=100, tokens_window_s=10.0, now=T0 + 1)[0]
    refused, wait = store.claim("s", None, 10.0, tokens=20, tokens_cap=100, tokens_window_s=10.0, now=T0 + 2)
    assert refused is None and wait == pytest.approx(8.0)  # 60 must leave: the first, at T0 + 10
    # Larger than the whole cap: waits for an empty window, then goes alone.
    assert store.claim("s", None, 10.0, tokens=500, tokens_cap=100, tokens_window_s=10.0,
                       now=T0 + 3) == (None, pytest.approx(8.0))
    assert store.claim("s", None, 10.0, tokens=500, tokens_cap=100, tokens_window_s=10.0, now=T0 + 11)[0]


def test_a_restamp_counts_the_request_from_its_end_with_its_reported_tokens(make: MakeStore) -> None:
    store = make()
    first, _ = store.claim("s", 1, 10.0, tokens=50, tokens_cap=100, tokens_window_s=10.0, now=T0)
    assert store.restamp(first, tokens=90, now=T0 + 4)
    assert store.claim("s", 1, 10.0, tokens=5, tokens_cap=100, tokens_window_s=10.0,
                       now=T0 + 12) == (None, pytest.approx(2.0))  # counted from T0 + 4 now
    assert store.claim("s", 5, 10.0, tokens=20, tokens_cap=100, tokens_window_s=10.0,
                       now=T0 + 12) == (None, pytest.approx(2.0))  # 90 reported tokens, not 50
    assert store.restamp(first, now=T0 + 1)  # never earlier
    assert store.claim("s", 1, 10.0, now=T0 + 13.9)[0] is None
    assert not store.restamp("no-such-claim", now=T0)


def test_unclaim_frees_the_place(make: MakeStore) -> None:
    store = make()
    first, _ = store.claim("s", 1, 10.0, now=T0)
    assert store.claim("s", 1, 10.0, now=T0 + 1)[0] is None
    assert store.unclaim(first) and not store.unclaim(first)
    assert store.claim("s", 1, 10.0, now=T0 + 1)[0] is not None


def test_a_claim_deletes_its_scopes_claims_older_than_a_minute(make: MakeStore) -> None:
    store = make()
    for i in range(5):
        store.claim("s", 100, 10.0, now=T0 + i)
        store.claim("kept", 100, 10.0, now=T0 + i)
    assert _rows(store, "s") == 5
    store.claim("s", 100, 10.0, now=T0 + KEEP_S + 2.5)  # T0, T0+1, T0+2 are a minute old
    assert _rows(store, "s") == 3
    assert _rows(store, "kept") == 5  # another scope's are left to its own claims


def test_bad_arguments_are_refused_before_anything_is_written(make: MakeStore) -> None:
    store = make()
    for kwargs in ({"requests_cap": 0, "requests_window_s": 10.0}, {"requests_cap": 1, "requests_window_s": 0.0},
                   {"requests_cap": 1, "requests_window_s": 10.0, "tokens": -1}):
        with pytest.raises(ValueError):
            store.claim("s", **kwargs)
    assert _rows(store, "s") == 0


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_concurrent_claims_from_two_stores_never_pass_the_cap(kind: str, tmp_path: Path) -> None:
    with store_factory(kind, tmp_path) as factory:
        stores = [factory(), factory()]  # two connections, as two TaskManagers
        admitted: List[str] = []
        lock = threading.Lock()

        def claim_many(store: RateWindowStore) -> None:
            for _ in range(15):
                claim_id, _ = store.claim("shared", 10, 30.0)  # the store's clock
                if claim_id is not None:
                    with lock:
                        admitted.append(claim_id)

        threads = [threading.Thread(target=claim_many, args=(store,)) for store in stores for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(admitted) == 10 and len(set(admitted)) == 10
        assert _rows(stores[0], "shared") == 10


def test_a_retried_claim_finds_its_own_commit(tmp_path: Path) -> None:
    store = SQLiteJournalStore(tmp_path / "journal.db")
    try:
        def twice(connection):
            first = _sql_rate_window.claim(connection, "?", "c1", "s", T0, 1, 10.0, 0, None, 10.0)
            again = _sql_rate_window.claim(connection, "?", "c1", "s", T0 + 1, 1, 10.0, 0, None, 10.0)
            return first, again

        assert store._call("twice", None, twice, write=True) == (("c1", 0.0), ("c1", 0.0))
        assert _rows(store, "s") == 1
    finally:
        store.close()


def test_postgres_stamps_claims_with_the_servers_clock(tmp_path: Path) -> None:
    with store_factory("postgres", tmp_path) as factory:
        store = factory()
        before = time.time()
        claim_id, _ = store.claim("s", 5, 10.0)
        stamped = store._call("read", None, lambda connection: connection.execute(
            f"SELECT claimed_at FROM {_sql_rate_window.TABLE} WHERE claim_id = %s", (claim_id,)).fetchone()[0])
        assert before - 5 < float(stamped) < time.time() + 5  # one host here: the clocks agree


def test_the_table_is_part_of_the_schema() -> None:
    assert set(_sql_rate_window.SCHEMA_OBJECTS) <= set(SCHEMA_OBJECTS)


def test_wait_s_is_the_time_until_enough_oldest_claims_leave() -> None:
    claims = [(T0, 1), (T0 + 2, 1), (T0 + 4, 1)]
    assert wait_s(claims, T0 + 5, 3, 10.0, 0, None, 10.0) == pytest.approx(5.0)
    assert wait_s(claims, T0 + 5, 2, 10.0, 0, None, 10.0) == pytest.approx(7.0)  # two must leave
    assert wait_s(claims, T0 + 5, 4, 10.0, 0, None, 10.0) == 0.0
    assert wait_s([], T0, 1, 10.0, 10**9, 5, 10.0) == 0.0  # alone into an empty window
