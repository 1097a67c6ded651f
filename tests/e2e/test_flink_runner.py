"""The Flink driver on the local mini-cluster: same results as the local
runner, per-key state across records, failures that name the record."""

from __future__ import annotations

import asyncio
import sys

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext


class Counted(Event):
    value: int


class CountingAgent(Agent):
    """Counts records per key in short-term memory, through an async action
    and a custom event, and fails on a poisoned value."""

    @action(InputEvent)
    @staticmethod
    async def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        await asyncio.sleep(0)
        if event.input["x"] == -1:
            raise ValueError("poisoned record")
        count = (ctx.short_term_memory.get("count") or 0) + 1
        ctx.short_term_memory.set("count", count)
        ctx.sensory_memory.set("x", event.input["x"])
        ctx.send_event(Counted(value=count))

    @action(Counted)
    @staticmethod
    def on_counted(event: Counted, ctx: RunnerContext) -> None:
        assert ctx.sensory_memory.get("x") is not None
        ctx.send_event(OutputEvent(output={"key": ctx.key, "count": event.value, "x": ctx.sensory_memory.get("x")}))


def _flink_env(parallelism: int = 2):
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    config = Configuration()
    config.set_string("restart-strategy.type", "none")
    config.set_string("python.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(1_000)
    return env


def _records(n: int) -> list[dict]:
    return [{"k": f"key-{i % 5}", "x": i} for i in range(n)]


def test_flink_runner_matches_local_runner(tmp_path) -> None:
    records = _records(200)
    env = _flink_env()
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    source = env.from_collection(records)
    stream = agents_env.from_datastream(source, lambda r: r["k"]).apply(CountingAgent()).to_datastream()
    with stream.execute_and_collect("counting") as collected:
        on_flink = list(collected)

    local_env = AgentsExecutionEnvironment.get_execution_environment()
    listed = local_env.from_list([{"key": r["k"], "value": r} for r in records]).apply(CountingAgent()).to_list()
    local_env.execute()
    local = [output for record in listed for output in record.values()]

    key = lambda o: (o["key"], o["count"])  # noqa: E731
    assert sorted(on_flink, key=key) == sorted(local, key=key)
    # Per key, counts follow input order.
    for k in {r["k"] for r in records}:
        xs = [o["x"] for o in sorted(on_flink, key=key) if o["key"] == k]
        assert xs == sorted(xs) and len(xs) == 40


def test_failing_action_fails_the_job_naming_key_and_action(tmp_path) -> None:
    records = _records(10) + [{"k": "key-3", "x": -1}]
    env = _flink_env(parallelism=1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    stream = agents_env.from_datastream(env.from_collection(records), lambda r: r["k"]).apply(CountingAgent()).to_datastream()
    from py4j.protocol import Py4JJavaError

    with pytest.raises(Py4JJavaError) as failure:
        with stream.execute_and_collect("failing") as collected:
            list(collected)
    # Across the Java boundary the Python exception survives as its
    # traceback's last line: the type's qualified name, then its message.
    message = str(failure.value)
    assert (
        "flink_agents.runtime.errors.ActionFailed: action 'on_input' failed on key 'key-3', record #2: "
        "ValueError: poisoned record"
    ) in message


def test_skip_strategy_routes_the_error_record_to_the_side_output(tmp_path) -> None:
    records = _records(10) + [{"k": "key-3", "x": -1}] + [{"k": "key-3", "x": 11}]
    env = _flink_env(parallelism=1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db"), "error_strategy": "skip"}
    )
    builder = agents_env.from_datastream(env.from_collection(records), lambda r: r["k"]).apply(CountingAgent())
    outputs = builder.to_datastream().map(lambda o: ("output", o))
    errors = builder.error_stream().map(lambda e: ("error", e))
    with outputs.union(errors).execute_and_collect("skipping") as collected:
        results = list(collected)

    error_records = [e for kind, e in results if kind == "error"]
    assert error_records == [{
        "key": "key-3", "seq": 2, "record": {"k": "key-3", "x": -1}, "action": "on_input",
        "error_type": "ValueError", "error_message": "poisoned record", "attempts": 1,
    }]
    key_3 = [o for kind, o in results if kind == "output" and o["key"] == "key-3"]
    # The skipped record left the count as it was: the next record counts 3.
    assert [(o["x"], o["count"]) for o in key_3] == [(3, 1), (8, 2), (11, 3)]
    assert len([1 for kind, _ in results if kind == "output"]) == 11
