"""Sub-agent calls on one explicit session keep every write
(docs/durability.md, "Same-session calls"): two ``submit()`` calls with the
same ``session_id`` under ``asyncio.gather`` take turns, in the order they
start, so neither child's memory write is lost, in the record, in the key's
next record, and after a crash and the replay of the record.

Run through the local runner over a SQLite journal: a rerun with the same
``job-identifier`` replays the journaled record, as a restart does.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceType

CHILD_RUNS: Counter = Counter()
CRASH_IN: Dict[str, bool] = {}


class Crash(BaseException):
    """A simulated process crash."""


async def _slow_note(prompt: str) -> str:
    await asyncio.sleep(0.02)  # long enough for a sibling on the session to start, were it let
    if CRASH_IN.pop(prompt, False):
        raise Crash(f"crash while the child notes {prompt!r}")
    return prompt


async def note(event: InputEvent, ctx: Any) -> None:
    """The child: reports what the session's memory held, then notes its
    prompt in it (after a journaled wait)."""
    prompt = event.input
    CHILD_RUNS[prompt] += 1
    seen = sorted(ctx.short_term_memory.get_field_names())
    if prompt != "read":
        await ctx.durable_execute_async(_slow_note, prompt)
        ctx.short_term_memory.set(prompt, True)
    ctx.send_event(OutputEvent(output=seen))


async def two_at_once(event: InputEvent, ctx: Any) -> None:
    """The parent: two calls on session ``s`` at once (first record), then
    one that reads it."""
    handle = ctx.get_resource("noter", ResourceType.AGENT)
    saw: Dict[str, Any] = {}
    if event.input == "write":
        a, b = await asyncio.gather(
            handle.submit(ctx, "a", session_id="s"), handle.submit(ctx, "b", session_id="s"),
        )
        saw.update(a=a.result[0], b=b.result[0])
    saw["after"] = (await handle.submit(ctx, "read", session_id="s")).result[0]
    ctx.send_event(OutputEvent(output=saw))


def _agent() -> Agent:
    child = Agent().add_action("note", [InputEvent], note)
    return Agent().add_action("two_at_once", [InputEvent], two_at_once).add_resource(
        "noter", ResourceType.AGENT, child,
    )


def _run(journal: Path, values: List[str]) -> List[Any]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update({
        "job-identifier": "same-session", "journal.store": "sqlite", "journal.sqlite.path": str(journal),
    })
    outputs = env.from_list([{"key": "k", "value": v} for v in values]).apply(_agent()).to_list()
    env.execute()
    return [o["k"] for o in outputs]


@pytest.fixture(autouse=True)
def _reset() -> Any:
    CHILD_RUNS.clear()
    CRASH_IN.clear()
    yield
    CRASH_IN.clear()


# What an uninterrupted run gives: ``a`` starts first and sees an empty
# session, ``b`` sees ``a``'s note, the read after them sees both; the key's
# next record sees both too.
UNINTERRUPTED = [{"a": [], "b": ["a"], "after": ["a", "b"]}, {"after": ["a", "b"]}]


def test_two_gathered_calls_on_one_session_keep_both_writes_in_the_record_and_the_next(tmp_path: Path) -> None:
    assert _run(tmp_path / "journal.db", ["write", "next"]) == UNINTERRUPTED


def test_after_a_crash_in_the_second_call_the_replay_leaves_the_same_memory(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    CRASH_IN["b"] = True  # the process dies while b runs, once a's result was journaled
    with pytest.raises(Crash):
        _run(journal, ["write"])
    assert CHILD_RUNS == Counter(a=1, b=1)

    assert _run(journal, ["write", "next"]) == UNINTERRUPTED  # the restart replays the record
    assert CHILD_RUNS["a"] == 1, "a's journaled result was not replayed: the child ran again"
    assert CHILD_RUNS["b"] == 2


def test_a_replay_of_the_finished_record_gives_the_same_memory(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    assert _run(journal, ["write", "next"]) == UNINTERRUPTED
    runs = Counter(CHILD_RUNS)
    assert _run(journal, ["write", "next"]) == UNINTERRUPTED  # replayed from the journal
    assert CHILD_RUNS == runs, "a replay ran a child again"
