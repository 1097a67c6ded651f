"""Promises of docs/guarantees.md held on the local mini-cluster (issue 12).

1. Watermarks: "an event-time timer at each record's timestamp waits for
   that record, so a watermark never passes a record still in flight ...
   Outputs of records applied by the polling timer carry that timer's
   processing-time timestamp, not the record's." Timestamped records, some
   keys with a slow (300 ms) journaled call, bounded out-of-orderness
   watermarks; an operator after the agent (not chained to it, so it sees
   Flink's own watermark) notes each output's timestamp and the watermark
   it had then. It holds: no output behind the watermark. Not as promised
   (xfail): an output applied in a callback of another record of its key
   (that record's ``process_element``, or an earlier record's event-time
   timer) carries that record's timestamp. And a Python function chained
   to the agent (PyFlink chains by default) is handed, with outputs of
   event-time timers, the watermark that fired the timer, so there they
   look late; an unchained or Java operator sees Flink's watermark.
2. Callbacks: "the deadline is a keyed processing-time timer, so it fires
   after a restore too": a key waits on a callback, the job is cancelled
   with a retained checkpoint before the deadline, and restored after it;
   the restored timer times the callback out before the record is replayed,
   and the replay ends with ``CallbackTimeout``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.callbacks import CallbackTimeout
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext
from flink_agents.stores.factory import open_journal_store
from tests.support.flink_jobs import (
    Collected,
    checkpoint_after,
    completed_checkpoints,
    jsonl_stream,
    mini_cluster_env,
    write_jsonl,
)

# Functions below run in Flink's Python workers: ship them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SLOW_S = 0.3


# --- 1. a watermark never passes a record in flight -------------------------------------------


async def _slow_model(text: str) -> str:
    await asyncio.sleep(SLOW_S)
    return text.upper()


async def _slower_model(text: str) -> str:
    await asyncio.sleep(5 * SLOW_S)
    return text.upper()


class SlowForSomeKeys(Agent):
    """Echoes each record; keys starting with ``slow`` first make a journaled
    call that takes 300 ms (1.5 s for a record marked ``slower``). A record
    with a ``done_marker`` path writes it when its run is about to end."""

    @action(InputEvent)
    @staticmethod
    async def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        record = event.input
        if record["key"].startswith("slow"):
            model = _slower_model if record.get("slower") else _slow_model
            await ctx.durable_execute_async(model, record["key"])
        if record.get("done_marker"):
            Path(record["done_marker"]).write_text(str(record["ts"]), encoding="utf-8")
        ctx.send_event(OutputEvent(output={"key": record["key"], "ts": record["ts"]}))


def _record_key(record: Dict[str, Any]) -> str:
    return record["key"]


def _watermark_strategy() -> Any:
    from pyflink.common import Duration, WatermarkStrategy
    from pyflink.common.watermark_strategy import TimestampAssigner

    class RecordTs(TimestampAssigner):
        def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
            return value["ts"]

    return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(250)).with_timestamp_assigner(RecordTs())


def _observe(output: Any, ctx: Any) -> Any:
    """What the operator after the agent sees of each output."""
    yield {"output": output, "timestamp": ctx.timestamp(), "watermark": ctx.timer_service().current_watermark()}


def _observer() -> Any:
    from pyflink.datastream import ProcessFunction

    class Observe(ProcessFunction):
        def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
            yield from _observe(value, ctx)

    return Observe()


FIRST_TS = 10_000  # event time, ms: far below any processing-time timestamp
LAST_TS = FIRST_TS + 60_000
# The watched input never ends, so no final watermark comes: a record whose
# run outlasts flink.inline_wait_ms (2 ms; under load even a fast echo can)
# gives its output in its event-time timer, once a later record moves the
# watermark past it. The sentinel moves it past the last counted record; its
# own output may never come, and is not counted.
SENTINEL = {"key": "sentinel", "ts": LAST_TS + 60_000}


def _take_counted(job: Collected, count: int, timeout_s: float) -> List[Dict[str, Any]]:
    """The next ``count`` observed outputs that are not the sentinel's."""
    deadline = time.monotonic() + timeout_s
    taken: List[Dict[str, Any]] = []
    while len(taken) < count:
        try:
            (seen,) = job.take(1, timeout_s=max(deadline - time.monotonic(), 0.001))
        except AssertionError:
            raise AssertionError(f"{len(taken)} of {count} outputs within {timeout_s} s: {taken}") from None
        if seen["output"]["key"] != SENTINEL["key"]:
            taken.append(seen)
    return taken


def _timestamped_records() -> List[Dict[str, Any]]:
    """Keys taking turns, 50 ms of event time apart, neighbours swapped (out
    of order within the 250 ms bound); a last record far ahead moves the
    watermark past all the others."""
    keys = ["slow-a", "fast-a", "slow-b", "fast-b", "slow-c", "fast-c"]
    records = [{"key": keys[n % len(keys)], "ts": FIRST_TS + 50 * n} for n in range(24)]
    for n in range(0, len(records) - 1, 4):
        records[n], records[n + 1] = records[n + 1], records[n]
    # Still running when the last record's watermark comes, whatever the
    # pace of the source: 1.5 s, right before it.
    records.append({"key": "slow-z", "ts": records[-1]["ts"] + 50, "slower": True})
    return records + [{"key": "fast-end", "ts": LAST_TS}]


def _agent_job(tmp_path: Path, input_dir: Path, agent: Agent, watermarks: bool, **config: Any) -> Any:
    """The agent over the watched ``input_dir`` (parallelism 1), its outputs
    through the observer; ``config`` goes to the agent."""
    from pyflink.common import Types

    # The observer must be an operator of its own: chained Python functions
    # are handed the agent operator's watermark, not the one Flink forwards.
    env = mini_cluster_env(1, **{"python.operator-chaining.enabled": "false"})
    stream = jsonl_stream(env, input_dir, "records", "records-source", "records-decode")
    if watermarks:
        stream = stream.assign_timestamps_and_watermarks(_watermark_strategy())
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db"), **config}
    )
    outputs = agents_env.from_datastream(stream, _record_key, key_type=Types.STRING()).apply(agent).to_datastream()
    return outputs.process(_observer(), output_type=Types.PICKLED_BYTE_ARRAY())


@pytest.mark.timeout(120)
def test_a_watermark_never_passes_a_record_in_flight(tmp_path: Path) -> None:
    records = _timestamped_records()
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    write_jsonl(input_dir / "records.jsonl", records + [SENTINEL])
    started_ms = int(time.time() * 1000)
    job = Collected(_agent_job(tmp_path, input_dir, SlowForSomeKeys(), watermarks=True), "watermarks")
    try:
        observed = _take_counted(job, len(records), timeout_s=60)
    finally:
        job.close()
    first_s, last_s = (job.arrivals[i][0] - started_ms / 1000 for i in (0, -1))

    assert sorted((o["output"]["key"], o["output"]["ts"]) for o in observed) == sorted(
        (r["key"], r["ts"]) for r in records
    )
    # Never late: when an output reached the next operator, the watermark
    # there had not passed its record's timestamp, nor the output's own.
    late = [s for s in observed if s["watermark"] >= min(s["output"]["ts"], s["timestamp"])]
    assert not late, f"outputs behind the watermark: {late}"
    # The watermark did pass records in flight: the last record's moved it
    # past all the others while slow-z (1.5 s) still ran, and slow-z's output
    # came from its own event-time timer (its record's timestamp), before
    # that watermark went on.
    slow_z = next(s for s in observed if s["output"]["key"] == "slow-z")
    assert slow_z["timestamp"] == slow_z["output"]["ts"]
    own = sum(s["timestamp"] == s["output"]["ts"] for s in observed)
    polled = sum(s["timestamp"] >= started_ms for s in observed)
    print(f"\n{len(observed)} outputs: {own} with their record's timestamp, {polled} with a polling timer's "
          f"(processing time), {len(observed) - own - polled} with another record's; first output "
          f"{first_s:.1f} s after the job was submitted, last {last_s:.1f} s")


@pytest.mark.timeout(120)
def test_each_output_carries_its_own_records_timestamp(tmp_path: Path) -> None:
    """Two slow records of one key, no poll (``flink.poll_interval_ms`` far
    beyond the test), the watermark below both until a last record:

    - record 1 ends, then record 2 arrives: its ``process_element`` applies
      record 1, whose output gets ts 20_100 (record 2's);
    - record 2 ends, then the last record's watermark fires the event-time
      timer of record 1 (20_000) first, which applies record 2: ts 20_000.

    With default settings the same happens whenever a key's next record or
    an earlier record's timer comes between a run's end and the next poll
    (seen in runs of test_a_watermark_never_passes_a_record_in_flight:
    ``slow-a`` ts 10000 emitted with ts 10300)."""
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    first = {"key": "slow-a", "ts": 20_000, "done_marker": str(tmp_path / "1.done")}
    # Within the 250 ms bound: the watermark stays below 20_000.
    second = {"key": "slow-a", "ts": 20_100, "done_marker": str(tmp_path / "2.done")}
    last = {"key": "fast-end", "ts": LAST_TS}

    def when_done(record: Dict[str, Any]) -> None:
        marker = Path(record["done_marker"])
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), f"the run of {record} did not end"

    write_jsonl(input_dir / "1.jsonl", [first])
    stream = _agent_job(tmp_path, input_dir, SlowForSomeKeys(), watermarks=True,
                        **{"flink.poll_interval_ms": 10**12})
    job = Collected(stream, "timestamps")
    try:
        when_done(first)
        write_jsonl(input_dir / "2.jsonl", [second])
        when_done(second)
        write_jsonl(input_dir / "3.jsonl", [last, SENTINEL])
        observed = _take_counted(job, 3, timeout_s=60)
    finally:
        job.close()
    print("\n" + "\n".join(f"  {s}" for s in observed))
    assert not [s for s in observed if s["watermark"] >= min(s["output"]["ts"], s["timestamp"])]
    assert sorted((s["output"]["ts"], s["timestamp"]) for s in observed) == [
        (20_000, 20_000), (20_100, 20_100), (LAST_TS, LAST_TS)
    ]


# --- 2. a callback's deadline timer fires after a restore -----------------------------------


async def _wait_for_callback(event: InputEvent, ctx: RunnerContext) -> None:
    """Create a callback and wait for it; each start of the run and what it
    got are appended to ``runs_file`` (Unix seconds)."""
    value = event.input
    with open(value["runs_file"], "a", encoding="utf-8") as runs:
        runs.write(f"start {time.time():.6f}\n")
    cb = await ctx.create_callback("promise: deadline after a restore", value["timeout_s"])
    with open(value["runs_file"], "a", encoding="utf-8") as runs:
        runs.write(f"created {cb.callback_id} {time.time():.6f}\n")
    try:
        await cb
        outcome = "resolved"
    except CallbackTimeout:
        outcome = "timed_out"
    ctx.send_event(OutputEvent(output={"key": ctx.key, "callback_id": cb.callback_id, "outcome": outcome}))


def _runs(path: Path) -> List[List[str]]:
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


@pytest.mark.timeout(180)
def test_a_callbacks_deadline_timer_fires_after_a_restore_before_the_record_is_replayed(tmp_path: Path) -> None:
    journal_path = tmp_path / "journal.db"
    store = open_journal_store({"journal.store": "sqlite", "journal.sqlite.path": str(journal_path)})
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    checkpoints = tmp_path / "checkpoints"
    runs_file = tmp_path / "waiter.runs"
    write_jsonl(input_dir / "1.jsonl", [{"key": "waiter", "timeout_s": 5, "runs_file": str(runs_file)}])
    config = {
        "journal.store": "sqlite", "journal.sqlite.path": str(journal_path),
        "callbacks.base_url": "http://127.0.0.1:9",  # nobody answers: the deadline decides
        "callbacks.poll_interval_ms": 50,
        # No poll of the waiting key comes in either job: in the restored
        # job only the deadline timer can wake the key.
        "flink.parked_poll_interval_ms": 10**12,
    }

    def job(name: str, **options: str) -> Collected:
        from pyflink.common import Types

        env = mini_cluster_env(1, checkpoints, 300, **options)
        stream = jsonl_stream(env, input_dir, "records", "records-source", "records-decode")
        agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **config)
        agent = Agent().add_action("wait", [InputEvent], _wait_for_callback)
        return Collected(
            agents_env.from_datastream(stream, _record_key, key_type=Types.STRING()).apply(agent).to_datastream(),
            name,
        )

    first = job("deadline-1")
    try:
        deadline = time.monotonic() + 60
        while len(_runs(runs_file)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        (_, started_1), (_, callback_id, _) = _runs(runs_file)
        record = store.get_callback(callback_id)
        assert record.state == "pending"
        # A checkpoint with the deadline timer in it (armed by the key's first
        # poll, at most 100 ms after the callback was created).
        checkpoint_after(checkpoints, time.time() + 0.2)
    finally:
        first.close()
    cancelled_ms = int(time.time() * 1000)
    assert cancelled_ms < record.deadline_ms, "cancelled after the deadline: job 1's own timer could have fired"
    assert store.get_callback(callback_id).state == "pending"
    restore_from = completed_checkpoints(checkpoints)[-1][1]
    # The deadline passes while no job runs.
    time.sleep(max(record.deadline_ms / 1000 - time.time(), 0) + 0.1)
    assert store.get_callback(callback_id).state == "pending"

    second = job("deadline-2", **{
        "execution.state-recovery.path": restore_from.as_uri(),
        "execution.state-recovery.ignore-unclaimed-state": "true",
    })
    try:
        [output] = second.take(1, timeout_s=60)
    finally:
        second.close()

    assert output == {"key": "waiter", "callback_id": callback_id, "outcome": "timed_out"}
    runs = _runs(runs_file)
    assert [line[0] for line in runs] == ["start", "created", "start", "created"]
    assert runs[3][1] == callback_id  # the replay got the same callback back
    replay_started_ms = float(runs[2][1]) * 1000
    timed_out = store.get_callback(callback_id)
    assert timed_out.state == "timed_out"
    assert record.deadline_ms <= timed_out.completed_ms < replay_started_ms, (
        f"timed out at {timed_out.completed_ms}, deadline {record.deadline_ms}, "
        f"replay started at {replay_started_ms:.0f}"
    )
    print(f"\ncallback {callback_id[:8]}: deadline {record.deadline_ms}, job 1 cancelled at {cancelled_ms}, "
          f"timed out at {timed_out.completed_ms} (restored timer), replay started at {replay_started_ms:.0f}")
