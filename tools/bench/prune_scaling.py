"""Prune time against journal size, on every journal store.

For each size N (runs; 2k to 64k by default) it fills a fresh store with N
finished runs through the port (each: two calls, a completion and the run-end
marker; every 8th run also a nested sub-agent journal ``job/<call>`` and a
callback), then prunes the oldest 10% (``prune_callbacks`` then ``prune``,
as the engine does) and prints the seconds it took, wall and CPU of the
pruning thread (``time.thread_time``: on a shared machine the steadier of
the two). Flat per-deleted-run time across sizes means pruning costs what it
deletes, not what the store holds. SQLite's time includes writing the
prune's pages back from the WAL (a checkpoint), whatever the size. For the SQL stores a second store object (its own connection) appends
in a loop during the prune and the slowest of its appends is printed: a prune
that holds the write lock throughout shows up there.

``--other-job`` also fills the same number of finished runs of a second job
(journal id ``other-job``, same keys and sequence numbers, older than the
cutoff) into the same store: the prune of ``job`` must leave every one of
them, and cost about the same per pruned run as without them.

PostgreSQL runs when ``FLINK_AGENTS_POSTGRES_DSN`` is set (a fresh schema,
dropped afterwards). Not a test: run it, read the figures.

    .venv/bin/python tools/bench/prune_scaling.py --stores memory,sqlite,postgres
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

from _common import machine

from flink_agents.stores import (
    COMPLETION,
    RUN_END,
    RUN_STEP,
    CallbackRef,
    InMemoryJournalStore,
    JournalEntry,
    PostgresJournalStore,
    SQLiteJournalStore,
)

DSN_ENV = "FLINK_AGENTS_POSTGRES_DSN"
SIZES = (2_000, 4_000, 8_000, 16_000, 32_000, 64_000)


def run_entries(n: int) -> List[JournalEntry]:
    digest = "ab" * 32
    return [
        JournalEntry("analyze@0", 0, "chat:model", digest, '{"text": "%s"}' % ("x" * 120)),
        JournalEntry("analyze@0", 1, "tool:lookup", digest, '{"n": %d}' % n),
        JournalEntry("analyze@0", COMPLETION, "", "", '{"events": []}'),
        JournalEntry(RUN_STEP, RUN_END, "", "", '"done"'),
    ]


def fill(store: Any, runs: int, clock: List[float], journal_id: str = "job") -> None:
    """``runs`` finished runs of ``journal_id``, one second apart from t=0,
    through the port."""
    for n in range(runs):
        clock[0] = float(n)
        key = f"k{n % 997}"
        store.append(journal_id, key, n, run_entries(n))
        if n % 8 == 0:
            store.append(f"{journal_id}/call-{n}", key, n, run_entries(n)[:2])
            store.register(CallbackRef(f"{journal_id}/call-{n}", key, n, "wait@0", 0), f"{journal_id}-cb-{n}",
                           "p", n, n + 1)


@contextmanager
def concurrent_writer(make: Optional[Callable[[], Any]]) -> Iterator[List[float]]:
    """Append from another store object in a loop; yields the append latencies."""
    latencies: List[float] = []
    if make is None:
        yield latencies
        return
    writer = make()
    writer.count_entries()  # connect before timing
    stop = threading.Event()

    def loop() -> None:
        n = 0
        while not stop.is_set():
            started = time.perf_counter()
            try:
                writer.append("other", "writer", n, run_entries(n)[:1])
            except Exception as error:  # e.g. "database is locked": report it, stop writing
                print(f"# concurrent writer failed: {error!r}", flush=True)
                latencies.append(float("inf"))
                return
            latencies.append(time.perf_counter() - started)
            n += 1
            time.sleep(0.002)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield latencies
    finally:
        stop.set()
        thread.join(120)
        writer.close()


def checkpoint(store: Any, mode: str) -> None:
    """SQLite: ``PRAGMA wal_checkpoint(mode)`` on a connection of its own.

    Before the prune (TRUNCATE, untimed) the WAL holds nothing of the fill;
    after it (PASSIVE, timed) the prune's pages are written back. Without
    this a prune that wrote fewer than the 1,000-page auto-checkpoint
    threshold (the small sizes) left its write-back to later writers and
    looked cheaper per run than a large one, which pays for several."""
    if isinstance(store, SQLiteJournalStore):
        connection = sqlite3.connect(store.path, isolation_level=None)
        try:
            connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
        finally:
            connection.close()


def measure(kind: str, make: Callable[[List[float]], Any], runs: int, other_job: bool = False) -> str:
    clock = [0.0]
    store = make(clock)
    fill(store, runs, clock)
    if other_job:
        fill(store, runs, clock, "other-job")
    before = store.count_entries()
    cutoff = runs * 0.1
    other = (lambda: make([1e9])) if kind != "memory" else None
    checkpoint(store, "TRUNCATE")
    with concurrent_writer(other) as latencies:
        time.sleep(0.01)
        started, cpu_started = time.perf_counter(), time.thread_time()
        callbacks = store.prune_callbacks(cutoff, "job")
        entries = store.prune(cutoff, "job")
        elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
    # After the writer stopped: one large write-back would stall its appends
    # behind the disk's fsync, where auto-checkpoints come 1,000 pages at a time.
    started, cpu_started = time.perf_counter(), time.thread_time()
    checkpoint(store, "PASSIVE")
    write_back = time.perf_counter() - started
    elapsed, cpu = elapsed + write_back, cpu + time.thread_time() - cpu_started
    if other_job:  # the other job's runs older than the cutoff are all there, nested ones too
        for n in range(0, int(cutoff), 8):
            assert len(store.load_run("other-job", f"k{n % 997}", n)) == len(run_entries(n)), f"other-job lost #{n}"
            assert len(store.load_run(f"other-job/call-{n}", f"k{n % 997}", n)) == 2, f"other-job lost #{n}'s child"
    store.close()
    pruned_runs = int(cutoff)
    slowest = f"{max(latencies) * 1000:8.1f}" if latencies else "       -"
    return (f"{kind:9s} {runs:7d} {before:9d} {entries:8d} {callbacks:6d} {elapsed:9.3f} {write_back:8.3f}"
            f" {elapsed / pruned_runs * 1e6:10.1f} {cpu / pruned_runs * 1e6:10.1f} {slowest}")


@contextmanager
def stores(kind: str, directory: Path) -> Iterator[Callable[[List[float]], Any]]:
    """A factory of store objects of ``kind`` over one fresh backing store."""
    if kind == "memory":
        yield lambda clock: InMemoryJournalStore(clock=lambda: clock[0])
    elif kind == "sqlite":
        path = directory / f"prune-{uuid.uuid4().hex[:8]}.db"
        yield lambda clock: SQLiteJournalStore(path, clock=lambda: clock[0], synchronous="NORMAL")
    else:
        import psycopg
        from psycopg.conninfo import make_conninfo

        dsn, schema = os.environ[DSN_ENV], f"fa_bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            scoped = make_conninfo(dsn, options=f"-csearch_path={schema}")
            yield lambda clock: PostgresJournalStore(scoped, clock=lambda: clock[0])
        finally:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="memory,sqlite,postgres")
    parser.add_argument("--sizes", default=",".join(str(size) for size in SIZES))
    parser.add_argument("--other-job", action="store_true",
                        help="fill as many runs of a second job into the same store (never pruned)")
    args = parser.parse_args()
    kinds = [kind.strip() for kind in args.stores.split(",") if kind.strip()]
    if "postgres" in kinds and not os.environ.get(DSN_ENV):
        print(f"# postgres skipped: {DSN_ENV} is unset")
        kinds.remove("postgres")
    print(f"# {machine()}")
    print("# store        runs   entries  deleted  calls   prune_s  of which write-back_s  us/pruned"
          "  cpu_us/pruned  writer_max_ms")
    with tempfile.TemporaryDirectory() as directory:
        for kind in kinds:
            for runs in (int(size) for size in args.sizes.split(",")):
                with stores(kind, Path(directory)) as make:
                    print(measure(kind, make, runs, args.other_job), flush=True)


if __name__ == "__main__":
    main()
