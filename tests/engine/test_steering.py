"""Steering on the engine: messages sent while tools run arrive after their
results and before the next model request, in order, journaled so a replay
takes them at the same step, at no extra commit; the per-key queue bound."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, List, Sequence

import pytest

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.features.steering import MAX_STEERING_QUEUE, SteeringQueueFull
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.chat_turn import ChatTurnAgent
from tests.support import host_runs

REQUESTS: List[List[ChatMessage]] = []
TOOL_STARTED = threading.Event()
# The slow tool returns once this is set: a test that steers while it runs
# clears it, steers, then sets it (no sleep to race against).
TOOL_RELEASED = threading.Event()


class Crash(BaseException):
    """A simulated process crash."""


class SlowToolModel(BaseChatModelConnection):
    """Asks for the slow tool once, then answers with the user messages it saw."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        REQUESTS.append(list(messages))
        if not any(m.role == MessageRole.TOOL for m in messages):
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": "call_0", "type": "function", "function": {"name": "slow", "arguments": {}}},
            ])
        return ChatMessage(role=MessageRole.ASSISTANT, content=" | ".join(
            m.content for m in messages if m.role == MessageRole.USER
        ))


def slow() -> str:
    """A tool that runs until ``TOOL_RELEASED`` (at most 30 s)."""
    TOOL_STARTED.set()
    assert TOOL_RELEASED.wait(30), "the slow tool was never released"
    return "slow result"


@pytest.fixture(autouse=True)
def _clear() -> None:
    REQUESTS.clear()
    TOOL_STARTED.clear()
    TOOL_RELEASED.set()


def _engine(store: InMemoryJournalStore) -> AgentEngine:
    return AgentEngine(
        AgentPlan.from_agent(ChatTurnAgent(SlowToolModel, {"slow": slow})), {"steering.enabled": True, "progress.enabled": True},
        job_id="job", store=store,
    )


def _run_steering_during_tools(engine: AgentEngine, driver: LocalDriver, messages: List[str]) -> None:
    async def go() -> None:
        TOOL_RELEASED.clear()  # the tool runs until every message was sent
        run = asyncio.ensure_future(host_runs.process_async(engine, driver, "k", "question"))
        try:
            while not TOOL_STARTED.is_set():
                await asyncio.sleep(0.005)
            for message in messages:
                host_runs.steer(engine, driver, "k", message)
        finally:
            TOOL_RELEASED.set()
        await run

    asyncio.run(go())


def test_a_message_sent_while_tools_run_arrives_after_results_before_the_next_request() -> None:
    store = InMemoryJournalStore()
    engine = _engine(store)
    driver = LocalDriver()
    _run_steering_during_tools(engine, driver, ["use metric units", "and be brief", "thanks"])

    first, second = REQUESTS
    assert [m.role for m in first] == [MessageRole.USER]  # sent after the first request
    roles = [m.role for m in second]
    assert roles == [MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL,
                     MessageRole.USER, MessageRole.USER, MessageRole.USER]
    assert [m.content for m in second[3:]] == ["use metric units", "and be brief", "thanks"]  # in order
    assert all(m.extra_args.get("steering") for m in second[3:])
    assert driver.outputs == [{"k": "question | use metric units | and be brief | thanks"}]
    # Taken messages leave the key's state; steering cost no commit of its own.
    assert driver.states["k"].steering == []
    assert engine.counters.journal_writes == 4
    consumed = [r for r in driver.progress if r["kind"] == "steering_consumed" and r["messages"]]
    assert len(consumed) == 1 and consumed[0]["messages"] == ["use metric units", "and be brief", "thanks"]
    tool_commit = next(r["commit"] for r in driver.progress if r["kind"] == "tool_result")
    assert consumed[0]["commit"] == tool_commit  # committed with the step that took them


def test_with_no_turn_running_messages_wait_for_the_next_turn() -> None:
    store = InMemoryJournalStore()
    engine = _engine(store)
    driver = LocalDriver()
    host_runs.steer(engine, driver, "k", "early note")
    host_runs.process(engine, driver, "k", "question")
    assert [m.content for m in REQUESTS[0]] == ["question", "early note"]
    assert len(REQUESTS) == 2 and "early note" not in [m.content for m in REQUESTS[1][2:]]  # taken once


def test_a_replay_takes_the_same_messages_at_the_same_step() -> None:
    """Crash after the write that journaled the take; the restored key still
    has the messages in its state, and more arrive before the re-run: the
    replayed step takes exactly the journaled ones, the later ones go to the
    next boundary."""
    store = InMemoryJournalStore()
    writes: List[Any] = []

    def crash_after_third_write(entries: Any) -> None:
        writes.append(entries)
        if len(writes) == 3:  # the tool results and the steering taken with them
            raise Crash()

    store.after_append = crash_after_third_write
    driver = LocalDriver()
    with pytest.raises(Crash):
        _run_steering_during_tools(_engine(store), driver, ["first", "second"])
    assert [m for _, m in driver.states["k"].steering] == ["first", "second"]  # still in keyed state

    store.after_append = None
    REQUESTS.clear()
    restarted = _engine(store)
    host_runs.steer(restarted, driver, "k", "after the crash")
    host_runs.resume(restarted, driver, "k")
    # The second model call had not run: now it does, with exactly the
    # journaled messages; the one sent after the crash was not there then, so
    # it waits for the next boundary, here the key's next turn.
    (request,) = REQUESTS
    assert [m.content for m in request[3:]] == ["first", "second"]
    assert driver.outputs == [{"k": "question | first | second"}]
    assert [m for _, m in driver.states["k"].steering] == ["after the crash"]
    REQUESTS.clear()
    host_runs.process(restarted, driver, "k", "next question")
    assert [m.content for m in REQUESTS[0]] == ["next question", "after the crash"]
    assert driver.states["k"].steering == []


def test_the_queue_holds_at_most_32_messages_per_key() -> None:
    engine = _engine(InMemoryJournalStore())
    driver = LocalDriver()
    for n in range(MAX_STEERING_QUEUE):
        host_runs.steer(engine, driver, "k", f"m{n}")
    host_runs.steer(engine, driver, "k", "one too many")  # not queued: an error record
    (error,) = driver.errors
    assert error["error_type"] == SteeringQueueFull.__name__ and error["record"] == "one too many"
    assert "steering queue of key 'k' is full" in error["error_message"]
    host_runs.steer(engine, driver, "other", "another key has its own queue")
    assert len(driver.states["k"].steering) == MAX_STEERING_QUEUE
    host_runs.process(engine, driver, "k", "question")
    assert [m.content for m in REQUESTS[0][1:]] == [f"m{n}" for n in range(MAX_STEERING_QUEUE)]
    host_runs.steer(engine, driver, "k", "room again")  # taken messages freed the queue


def test_local_runner_with_steering_list_and_overflow_to_the_error_list() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    builder = (
        env.from_list([{"key": "k", "value": "question"}])
        .with_steering([{"key": "k", "value": f"m{n}"} for n in range(MAX_STEERING_QUEUE + 1)])
        .apply(ChatTurnAgent(SlowToolModel, {"slow": slow}))
    )
    outputs, errors = builder.to_list(), builder.to_error_list()
    env.execute()
    assert [m.content for m in REQUESTS[0][1:]] == [f"m{n}" for n in range(MAX_STEERING_QUEUE)]
    (error,) = errors
    assert error["key"] == "k" and error["record"] == f"m{MAX_STEERING_QUEUE}"
    assert error["error_type"] == "SteeringQueueFull" and "full" in error["error_message"]
    assert len(outputs) == 1


def test_local_runner_reports_messages_no_turn_took_and_refuses_late_calls() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    builder = (
        env.from_list([{"key": "k", "value": "question"}])
        .with_steering([{"key": "nobody", "value": "is anyone there?"}])
        .apply(ChatTurnAgent(SlowToolModel, {"slow": slow}))
    )
    errors = builder.to_error_list()
    env.execute()
    (error,) = errors  # not dropped silently: no turn of "nobody" ever ran
    assert error["key"] == "nobody" and error["record"] == "is anyone there?"
    assert "was not taken" in error["error_message"]
    with pytest.raises(RuntimeError, match="after execute"):
        builder.with_steering([{"key": "k", "value": "too late"}])
    with pytest.raises(RuntimeError, match="after execute"):
        builder.to_progress_list()
    with pytest.raises(TypeError, match="steering message #0"):
        env.from_list([]).with_steering(["just a string"])
