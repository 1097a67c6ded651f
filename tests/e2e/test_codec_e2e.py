"""Issue 11, part 4 on the mini-cluster: memory values and input records go
through the same typed codec on the Flink runner as on the local runner.

- ``StrEnum``/``IntEnum`` values in short-term memory read back as enums on
  every record (before: ``str``/``int`` whenever the key's state had been
  read back from Flink state, enums otherwise);
- input records with a ``datetime`` and a ``set`` run, with the same outputs
  as on the local runner (before: the job failed with a ``TypeError`` naming
  no key, record or field);
- a record the codec refuses fails the job naming key, record and field path.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from enum import IntEnum
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext
from tests.support.flink_jobs import mini_cluster_env
from tests.support.pythons import StrEnum


class Tier(StrEnum):
    GOLD = "gold"


class Level(IntEnum):
    HIGH = 3


class Opaque:
    """Not something keyed state can keep."""


class TypesAgent(Agent):
    """Stores enums in memory and reports the types it reads back; echoes
    the types of dated records."""

    @action(InputEvent)
    @staticmethod
    async def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        record = event.input
        if record["op"] == "dated":
            ctx.send_event(OutputEvent(output={
                "key": record["k"], "at": record["at"].isoformat(), "at_type": type(record["at"]).__name__,
                "tags": sorted(record["tags"]), "tags_type": type(record["tags"]).__name__,
            }))
            return
        if record["i"] % 2:
            await asyncio.sleep(0.02)  # some records wait in the key's queue, some run at once
        memory = ctx.short_term_memory
        if record["op"] == "set":
            memory.set("tier", Tier.GOLD)
            memory.set("level", Level.HIGH)
        ctx.send_event(OutputEvent(output={
            "key": record["k"], "i": record["i"],
            "tier": type(memory.get("tier")).__name__, "level": type(memory.get("level")).__name__,
        }))


def _memory_records() -> List[Dict[str, Any]]:
    return [{"k": f"k{n}", "i": i, "op": "set" if i == 0 else "get"} for n in range(3) for i in range(6)]


DATED = [
    {"k": "d1", "op": "dated", "at": dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc), "tags": {"b", "a"}},
    {"k": "d2", "op": "dated", "at": dt.datetime(2024, 5, 2, 8, 0), "tags": frozenset({"x"})},
]


def _on_flink(tmp_path: Path, records: List[Dict[str, Any]]) -> List[Any]:
    from pyflink.common import Types

    env = mini_cluster_env(1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    # Records built in a Python function: datetimes and sets as PyFlink gives them.
    source = env.from_collection(list(range(len(records))), type_info=Types.INT()).map(
        lambda i: records[i], output_type=Types.PICKLED_BYTE_ARRAY()
    )
    stream = agents_env.from_datastream(source, lambda r: r["k"]).apply(TypesAgent()).to_datastream()
    with stream.execute_and_collect("codec") as collected:
        return list(collected)


def _on_local(records: List[Dict[str, Any]]) -> List[Any]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    listed = env.from_list([{"key": r["k"], "value": r} for r in records]).apply(TypesAgent()).to_list()
    env.execute()
    return [output for record in listed for output in record.values()]


def _sorted(outputs: List[Any]) -> List[Any]:
    return sorted(outputs, key=lambda o: (o["key"], o.get("i", 0)))


@pytest.mark.timeout(300)
def test_enums_in_memory_read_back_as_enums_on_every_record_on_flink(tmp_path: Path) -> None:
    records = _memory_records()

    on_flink = _on_flink(tmp_path, records)

    assert len(on_flink) == len(records)
    assert {(o["tier"], o["level"]) for o in on_flink} == {("Tier", "Level")}
    assert _sorted(on_flink) == _sorted(_on_local(records))


@pytest.mark.timeout(300)
def test_inputs_with_a_datetime_and_a_set_run_on_flink_as_on_the_local_runner(tmp_path: Path) -> None:
    on_flink = _on_flink(tmp_path, DATED)

    assert _sorted(on_flink) == _sorted(_on_local(DATED)) == [
        {"key": "d1", "at": "2024-05-01T12:30:00+00:00", "at_type": "datetime", "tags": ["a", "b"], "tags_type": "set"},
        {"key": "d2", "at": "2024-05-02T08:00:00", "at_type": "datetime", "tags": ["x"], "tags_type": "frozenset"},
    ]


@pytest.mark.timeout(300)
def test_a_refused_input_record_fails_the_job_naming_key_record_and_field(tmp_path: Path) -> None:
    records = [DATED[0], {"k": "d1", "op": "dated", "rows": [1, Opaque()]}]

    from py4j.protocol import Py4JJavaError

    with pytest.raises(Py4JJavaError, match=r"input record #1 of key 'd1'") as failure:
        _on_flink(tmp_path, records)

    message = str(failure.value)
    assert "input record #1 of key 'd1'" in message
    assert "record.rows[1] is a " in message and "Opaque" in message
