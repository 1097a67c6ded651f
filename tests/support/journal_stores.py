"""Stores, clocks and entries for the journal store tests.

``store_factory(kind, tmp_path)`` yields ``make(clock=None)`` building stores
of one kind over one backing store: ``memory``, ``sqlite`` (a file under
``tmp_path``) or ``postgres`` (a fresh schema of ``FLINK_AGENTS_POSTGRES_DSN``,
dropped afterwards; skipped when the variable is unset, failed under
``CI=true``).
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

from flink_agents.stores import (
    RUN_END,
    RUN_STEP,
    InMemoryJournalStore,
    JournalEntry,
    JournalStore,
    PostgresJournalStore,
    SQLiteJournalStore,
)

DSN_ENV = "FLINK_AGENTS_POSTGRES_DSN"
MakeStore = Callable[..., JournalStore]


class FakeClock:
    """A clock the test moves by hand, in Unix seconds."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def entry(step: str, ordinal: int, payload: str = '"ok"') -> JournalEntry:
    return JournalEntry(step, ordinal, "tools:lookup" if ordinal >= 0 else "", "ab" * 32, payload)


def run_end(payload: str = '"done"') -> JournalEntry:
    return JournalEntry(RUN_STEP, RUN_END, "", "", payload)


# --- PostgreSQL schemas and store factories ------------------------------------


def postgres_dsn() -> str:
    dsn = os.environ.get(DSN_ENV)
    if dsn:
        return dsn
    reason = os.environ.get("FLINK_AGENTS_POSTGRES_UNAVAILABLE") or (
        f"{DSN_ENV} is unset; run 'bash tools/test.sh' (it starts PostgreSQL with "
        "tools/postgres.sh) or export a DSN"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL is required under CI=true: {reason}")
    pytest.skip(reason)


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A DSN whose search_path is a fresh schema, dropped afterwards."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    dsn = postgres_dsn()
    schema = f"fa_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield make_conninfo(dsn, options=f"-csearch_path={schema}")
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def _backing(kind: str, tmp_path: Path) -> Iterator[str]:
    """Where stores of ``kind`` keep their data: a DSN or a file path."""
    if kind == "postgres":
        with postgres_schema() as dsn:
            yield dsn
    else:
        yield str(tmp_path / "journal" / "journal.db")


@contextmanager
def store_factory(kind: str, tmp_path: Path) -> Iterator[MakeStore]:
    """``make(clock=...)`` building stores of ``kind`` over one backing store
    (for ``memory`` each store is its own)."""
    opened: List[JournalStore] = []
    with _backing(kind, tmp_path) as location:

        def make(clock: Optional[Callable[[], float]] = None) -> JournalStore:
            clock = clock or FakeClock()
            if kind == "memory":
                store: JournalStore = InMemoryJournalStore(clock=clock)
            elif kind == "sqlite":
                store = SQLiteJournalStore(location, clock=clock)
            else:
                store = PostgresJournalStore(location, clock=clock)
            opened.append(store)
            return store

        try:
            yield make
        finally:
            for store in opened:
                store.close()


class FakeTime:
    """``sleep`` and ``monotonic`` for a store: sleeping advances the clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: List[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict]:
    """The journal settings of a job (and of its ingress) on a real store:
    a SQLite file under ``tmp_path``, then a fresh PostgreSQL schema.
    Import it (and ``store``) into a test module to use it."""
    if request.param == "sqlite":
        yield {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
        return
    with postgres_schema() as dsn:
        yield {"journal.store": "postgres", "journal.postgres.dsn": dsn}


@pytest.fixture
def store(journal: dict) -> Iterator[JournalStore]:
    """The store ``journal`` names, opened as a job opens it."""
    from flink_agents.stores import open_journal_store

    opened = open_journal_store(journal)
    yield opened
    opened.close()
