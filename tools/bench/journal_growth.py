"""Journal size and commits over a long stream, with and without pruning.

Runs the review-analysis agent (the offline ``local`` model) over N records
on the engine with a SQLite journal, side by side with pruning on and off, and
prints the entries left and journal writes per run. Time is simulated: an
injected clock advances ``--seconds-per-record`` per record, so an hour of
stream takes seconds. Not a test: run it, read the figures.

    .venv/bin/python tools/bench/journal_growth.py --records 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path, for tests.support)
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.sqlite_store import SQLiteJournalStore
from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, product_id_of
from flink_agents.jobs.review_records import read_reviews
from tests.support import host_runs

REPO = Path(__file__).resolve().parents[2]


def _reviews(count: int) -> list[dict]:
    shared = REPO.parent / "shared" / "data" / "product_reviews.jsonl"
    source = shared if shared.exists() else REPO / "jobs" / "data" / "sample_reviews.jsonl"
    base = read_reviews(source).reviews
    return [dict(base[i % len(base)], ts=i) for i in range(count)]


def run(records: list[dict], retention_s: float | None, seconds_per_record: float, directory: Path) -> dict:
    now = [1_000_000.0]
    store = SQLiteJournalStore(directory / f"journal-{retention_s}.db", clock=lambda: now[0])
    config = {"journal.prune_interval_s": 10.0, "journal.retention_s": retention_s or 1e18}
    engine = AgentEngine(AgentPlan.from_agent(ReviewAnalysisAgent()), config, job_id="bench", store=store,
                         clock=lambda: now[0])
    driver = LocalDriver()
    started = time.perf_counter()

    async def feed() -> None:
        for record in records:
            await host_runs.process_async(engine, driver, product_id_of(record), record)
            now[0] += seconds_per_record

    asyncio.run(feed())
    elapsed = time.perf_counter() - started
    engine.close()
    result = {
        "retention_s": retention_s,
        "records": len(records),
        "entries_left": store.count_entries(),
        "journal_writes_per_run": round(engine.counters.journal_writes / len(records), 3),
        "calls_per_run": round(engine.counters.calls_executed / len(records), 3),
        "wall_s": round(elapsed, 2),
    }
    store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--seconds-per-record", type=float, default=0.1, help="simulated stream rate")
    parser.add_argument("--retention-s", type=float, default=60.0)
    args = parser.parse_args()
    records = _reviews(args.records)
    with tempfile.TemporaryDirectory() as directory:
        pruned = run(records, args.retention_s, args.seconds_per_record, Path(directory))
        unpruned = run(records, None, args.seconds_per_record, Path(directory))
    for result in (pruned, unpruned):
        print(json.dumps(result))
    print(f"entries with pruning / without: {pruned['entries_left']} / {unpruned['entries_left']} "
          f"= {pruned['entries_left'] / unpruned['entries_left']:.3f}")


if __name__ == "__main__":
    main()
