"""Issue 13, example 8, on the mini-cluster: outputs keep their record's
event time (docs/guarantees.md, "Event time of outputs"), so a downstream
event-time window counts each output in its record's window.

60 records with event times 0..59 s over 4 keys (neighbours swapped, within
the bounded out-of-orderness of the watermarks), an async action that
awaits a journaled 300 ms sleep, then a 10 s tumbling event-time window
counting outputs: exactly 6 windows of 10, and every output carries its
record's timestamp. Before the fix 3 to 6 outputs per run went out with a
later record's timestamp or a polling timer's (processing time) and landed
in the wrong window, or in none.

Two sources, since different callbacks then apply the records:

- ``bounded``: a collection; the watermark runs ahead of the records in
  flight, and the input's end (the final watermark) drains them;
- ``watched``: an unbounded, watched directory; a last record far ahead in
  event time moves the watermark past all the others while they still run
  (its own output waits for a watermark at its time, which never comes).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext
from tests.support.flink_jobs import Collected, jsonl_stream, mini_cluster_env, write_jsonl

# Functions below run in Flink's Python workers: ship them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEYS = 4
RECORDS = 60
WINDOW_MS = 10_000
OUT_OF_ORDERNESS_MS = 1_500
FAR_AHEAD_MS = 1_000_000  # the watched source's last record: its window never fires


class SlowEcho(Agent):
    """Awaits a journaled 300 ms sleep, then echoes the record's key and time."""

    @action(InputEvent)
    @staticmethod
    async def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        await ctx.durable_execute_async(asyncio.sleep, 0.3)
        ctx.send_event(OutputEvent(output={"key": event.input["key"], "ts": event.input["ts"]}))


def _records() -> List[Dict[str, Any]]:
    """Event times 0..59 s, keys taking turns; neighbours of different keys
    swapped every 4 records (out of order by 1 s, within the bound)."""
    records = [{"key": f"k{n % KEYS}", "ts": 1_000 * n} for n in range(RECORDS)]
    for n in range(0, RECORDS - 1, 4):
        records[n], records[n + 1] = records[n + 1], records[n]
    return records


def _record_key(record: Dict[str, Any]) -> str:
    return record["key"]


def _watermark_strategy() -> Any:
    from pyflink.common import Duration, WatermarkStrategy
    from pyflink.common.watermark_strategy import TimestampAssigner

    class RecordTs(TimestampAssigner):
        def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
            return value["ts"]

    return WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(OUT_OF_ORDERNESS_MS)
    ).with_timestamp_assigner(RecordTs())


def _observer() -> Any:
    """Each output with the timestamp it carries."""
    from pyflink.datastream import ProcessFunction

    class Observe(ProcessFunction):
        def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any]:
            yield {"key": value["key"], "ts": value["ts"], "timestamp": ctx.timestamp()}

    return Observe()


def _window_counter() -> Any:
    """Per window: ``("window", start, end, sorted record times)``."""
    from pyflink.datastream.functions import ProcessWindowFunction

    class CountWindow(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Iterable[Any]) -> Iterable[Any]:
            window = context.window()
            yield ("window", window.start, window.end, sorted(e["ts"] for e in elements))

    return CountWindow()


def _job(tmp_path: Path, source: str, records: List[Dict[str, Any]]) -> Any:
    """The agent over ``records`` with event-time watermarks; its outputs
    observed, and counted in 10 s tumbling event-time windows downstream."""
    from pyflink.common import Types
    from pyflink.common.time import Time
    from pyflink.datastream.window import TumblingEventTimeWindows

    # Each function an operator of its own, seeing what Flink forwards.
    env = mini_cluster_env(1, **{"python.operator-chaining.enabled": "false"})
    if source == "bounded":
        stream = env.from_collection(records)
    else:
        input_dir = tmp_path / "input"
        input_dir.mkdir()
        write_jsonl(input_dir / "records.jsonl", records)
        stream = jsonl_stream(env, input_dir, "records", "records-source", "records-decode")
    stream = stream.assign_timestamps_and_watermarks(_watermark_strategy())
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    outputs = agents_env.from_datastream(stream, _record_key, key_type=Types.STRING()).apply(SlowEcho()).to_datastream()
    observed = outputs.process(_observer(), output_type=Types.PICKLED_BYTE_ARRAY())
    windows = (
        observed.key_by(lambda o: "all", key_type=Types.STRING())
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .process(_window_counter(), output_type=Types.PICKLED_BYTE_ARRAY())
    )
    return observed.map(lambda o: ("output", o), output_type=Types.PICKLED_BYTE_ARRAY()).union(windows)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("source", ["bounded", "watched"])
def test_outputs_keep_their_records_event_time_through_a_downstream_window(tmp_path: Path, source: str) -> None:
    records = _records()
    if source == "bounded":
        with _job(tmp_path, source, records).execute_and_collect("event-time") as collected:
            items = list(collected)
    else:
        # The last record's output waits for a watermark at its own time
        # (as a window does), which this input never brings: not counted.
        last = {"key": "end", "ts": FAR_AHEAD_MS}
        job = Collected(_job(tmp_path, source, records + [last]), "event-time")
        try:
            items = job.take(RECORDS + RECORDS * 1_000 // WINDOW_MS, timeout_s=90)
            items += job.poll()
        finally:
            job.close()
    observed = [item[1] for item in items if item[0] == "output"]
    windows = sorted(item[1:] for item in items if item[0] == "window")

    assert sorted((o["key"], o["ts"]) for o in observed) == sorted((r["key"], r["ts"]) for r in records)
    wrong = [o for o in observed if o["timestamp"] != o["ts"]]
    assert not wrong, f"{len(wrong)} outputs without their record's timestamp: {json.dumps(wrong)}"
    assert windows == [
        (start, start + WINDOW_MS, list(range(start, start + WINDOW_MS, 1_000)))
        for start in range(0, RECORDS * 1_000, WINDOW_MS)
    ]
