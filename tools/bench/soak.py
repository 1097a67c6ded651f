"""Soak: many records through the engine with a short journal retention.

Drives the host core on the local path (``tests.support.host_runs.
process_async``: one asyncio loop; records in order,
``--keys`` keys round-robin, ``--concurrency`` records of distinct keys in
flight at once) over a journal store: SQLite, and PostgreSQL
when ``FLINK_AGENTS_POSTGRES_DSN`` is set (a fresh schema, dropped
afterwards). Each record runs one action making one ``durable_execute``
call, so each run journals the call, the step's completion and its run end
(3 entries, 1 write).

A fake clock advances ``--tick-ms`` per record (default 1 ms: 1,000 records
per simulated second), shared by the engine and the store (``committed_at``),
with ``journal.retention_s`` 5 and ``journal.prune_interval_s`` 1: a prune
every 1,000 records deletes the runs that finished more than 5 simulated
seconds earlier, so the journal should hover around 5,000 runs.

Per block of ``--block`` records (default 10k) it prints the block's wall
time, its CPU time (this process), the time spent in prune calls, and the
journal's entry count at the end of the block. Flat block times and a flat
entry count mean neither the journal nor the cost of a record grows on an
endless stream. Not a test: run it, read the figures.

    .venv/bin/python tools/bench/soak.py --stores sqlite,postgres --records 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List

from _common import machine

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores import JournalStore, PostgresJournalStore, SQLiteJournalStore
from tests.support import host_runs

DSN_ENV = "FLINK_AGENTS_POSTGRES_DSN"
RETENTION_S = 5.0
PRUNE_INTERVAL_S = 1.0


def score(text: str) -> int:
    """The journaled call: stands in for a model or tool call."""
    return len(text) % 5


def rate(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={"score": ctx.durable_execute(score, str(event.input))}))


class FakeClock:
    """Unix seconds that move only when the soak advances them."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class TimedPrune:
    """Wraps a store's ``prune`` to add up the seconds spent in it."""

    def __init__(self, store: JournalStore) -> None:
        self.seconds = 0.0
        self.deleted = 0
        self._prune = store.prune
        store.prune = self  # type: ignore[method-assign]  # this bench's probe only

    def __call__(self, finished_before_s: float, journal_id: str) -> int:
        started = time.perf_counter()
        deleted = self._prune(finished_before_s, journal_id)
        self.seconds += time.perf_counter() - started
        self.deleted += deleted
        return deleted


async def soak(
    store: JournalStore, clock: FakeClock, records: int, keys: int, block: int, tick_s: float, concurrency: int
) -> None:
    agent = Agent().add_action("rate", [InputEvent], rate)
    config = {"journal.retention_s": RETENTION_S, "journal.prune_interval_s": PRUNE_INTERVAL_S}
    engine = AgentEngine(AgentPlan.from_agent(agent), config, job_id="soak", store=store, clock=clock)
    driver = LocalDriver()
    pruning = TimedPrune(store)
    print("#   records  block_s  cpu_s  prune_s  us/record  journal_entries  pruned_total", flush=True)
    try:
        started, cpu_started, pruned_before = time.perf_counter(), time.process_time(), 0.0
        first = 0
        while first < records:  # groups of distinct keys, never across a block's end
            batch = range(first, min(first + concurrency, records, (first // block + 1) * block))
            clock.now += tick_s * len(batch)
            await asyncio.gather(*(host_runs.process_async(engine, driver, f"k{n % keys}", f"review {n}") for n in batch))
            first = n = batch[-1] + 1
            if n % block == 0:
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
                in_prune = pruning.seconds - pruned_before
                print(f"{n:11d} {elapsed:8.2f} {cpu:6.2f} {in_prune:8.3f} {elapsed / block * 1e6:10.1f}"
                      f" {store.count_entries():16d} {pruning.deleted:13d}", flush=True)
                driver.outputs.clear()
                started, cpu_started, pruned_before = time.perf_counter(), time.process_time(), pruning.seconds
        if engine.counters.records != records:
            raise RuntimeError(f"only {engine.counters.records} of {records} records ran")
    finally:
        engine.close()


@contextmanager
def stores(kind: str, directory: Path, clock: FakeClock, synchronous: str) -> Iterator[JournalStore]:
    if kind == "sqlite":
        store: JournalStore = SQLiteJournalStore(directory / "soak.db", clock=clock, synchronous=synchronous)
        try:
            yield store
        finally:
            store.close()
        return
    import psycopg
    from psycopg.conninfo import make_conninfo

    dsn, schema = os.environ[DSN_ENV], f"fa_soak_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    store = PostgresJournalStore(make_conninfo(dsn, options=f"-csearch_path={schema}"), clock=clock)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--block", type=int, default=10_000)
    parser.add_argument("--tick-ms", type=float, default=1.0, help="simulated time per record")
    parser.add_argument("--concurrency", type=int, default=32, help="records of distinct keys in flight")
    parser.add_argument("--synchronous", default="NORMAL", help="SQLite: FULL or NORMAL (default: the soak "
                        "measures pruning and the engine, not fsync)")
    args = parser.parse_args()
    kinds: List[str] = [kind.strip() for kind in args.stores.split(",") if kind.strip()]
    if "postgres" in kinds and not os.environ.get(DSN_ENV):
        print(f"# postgres skipped: {DSN_ENV} is unset")
        kinds.remove("postgres")
    print(f"# {machine()}")
    print(f"# {args.records} records over {args.keys} keys, {args.concurrency} in flight, "
          f"{args.tick_ms:g} ms simulated per record, SQLite synchronous={args.synchronous}, "
          f"retention {RETENTION_S:g} s, prune every {PRUNE_INTERVAL_S:g} s (simulated)")
    for kind in kinds:
        print(f"# store {kind}", flush=True)
        with tempfile.TemporaryDirectory() as directory:
            clock = FakeClock(1_700_000_000.0)
            with stores(kind, Path(directory), clock, args.synchronous) as store:
                asyncio.run(soak(store, clock, args.records, args.keys, args.block, args.tick_ms / 1000.0,
                                 min(args.concurrency, args.keys)))


if __name__ == "__main__":
    main()
