"""Blocking user calls get the run concurrency, and never the store's threads
(issue 13, example 7; ``runtime.scheduling.executors``).

asyncio's default executor has cores + 4 threads (6 here): before, 20 keys
whose actions each awaited ``durable_execute_async(time.sleep, 0.3)`` ran six
at a time. Asserted by counting calls in flight, not by the clock; the
timing is ``tools/bench/blocking_calls.py``.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.chat_turn import ChatTurnAgent
from tests.support import host_runs

KEYS = 20


class Gate:
    """Holds each blocking call until ``expected`` are in flight at once (or
    a generous bound passes), and records the most seen together."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.in_flight = 0
        self.arrived = 0
        self.max_in_flight = 0
        self.threads: set[str] = set()
        self._changed = threading.Condition()

    def hold(self) -> None:
        with self._changed:
            self.in_flight += 1
            self.arrived += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.threads.add(threading.current_thread().name)
            self._changed.notify_all()
            group_end = (self.arrived + self.expected - 1) // self.expected * self.expected
            self._changed.wait_for(lambda: self.arrived >= group_end, timeout=5)
            self.in_flight -= 1


GATE = Gate(KEYS)


def blocking_lookup(key: str) -> str:
    GATE.hold()
    return f"looked up {key}"


async def lookup_action(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(blocking_lookup, ctx.key)))


def _run_local(agent: Agent, **config: Any) -> List[Dict[str, Any]]:
    env = AgentsExecutionEnvironment.get_execution_environment(**config)
    outputs = env.from_list([{"key": f"k{i}", "value": f"r{i}"} for i in range(KEYS)]).apply(agent).to_list()
    env.execute()
    return outputs


def test_twenty_keys_blocking_in_durable_execute_async_all_run_at_once() -> None:
    global GATE
    GATE = Gate(KEYS)
    outputs = _run_local(Agent().add_action("lookup", [InputEvent], lookup_action))
    assert sorted(o[k] for o in outputs for k in o) == sorted(f"looked up k{i}" for i in range(KEYS))
    assert GATE.max_in_flight == KEYS  # the default executor gave 6 (cores + 4)
    assert all(name.startswith("flink-agents-call") for name in GATE.threads), GATE.threads


def test_the_run_concurrency_bounds_blocking_calls_too() -> None:
    global GATE
    GATE = Gate(5)  # released in groups of five: never waits for a sixth
    _run_local(Agent().add_action("lookup", [InputEvent], lookup_action), max_concurrent_runs=5)
    assert GATE.max_in_flight == 5


def blocking_tool(q: str) -> str:
    """Look something up, blocking.

    Args:
        q: The query.
    """
    GATE.hold()
    return f"found {q}"


class OneToolModel(BaseChatModelConnection):
    """A sync connection: asks for the tool once, then answers."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        results = [m.content for m in messages if m.role == MessageRole.TOOL]
        if not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}}}])
        return ChatMessage(role=MessageRole.ASSISTANT, content=results[0])


def test_sync_tools_of_twenty_keys_run_at_once() -> None:
    global GATE
    GATE = Gate(KEYS)
    outputs = _run_local(ChatTurnAgent(OneToolModel, {"lookup": blocking_tool}))
    assert len(outputs) == KEYS and GATE.max_in_flight == KEYS


class _DatabaseLikeStore(InMemoryJournalStore):
    """An in-memory store that says its calls wait for I/O, as a database's do."""

    blocking_io = True


@pytest.mark.parametrize("store_class, writer", [
    (_DatabaseLikeStore, "flink-agents-io"),  # a write that waits: on the io pool
    (InMemoryJournalStore, "MainThread"),  # a write in memory: in place, on the run's loop
])
def test_journal_writes_run_on_the_io_pool_not_beside_user_calls(store_class: type, writer: str) -> None:
    global GATE
    GATE = Gate(1)
    writers: List[str] = []
    store = store_class()
    store.before_append = lambda entries: writers.append(threading.current_thread().name)

    async def two_calls(event: Event, ctx: Any) -> None:
        await ctx.durable_execute_async(blocking_lookup, "a")
        ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(blocking_lookup, "b")))

    import asyncio
    from flink_agents.runtime.local.driver import LocalDriver

    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("two", [InputEvent], two_calls)), {},
                         store=store)
    try:
        host_runs.process(engine, LocalDriver(), "k", 1)
    finally:
        engine.close()
    assert writers and all(name.startswith(writer) for name in writers), writers
    assert GATE.threads and all(name.startswith("flink-agents-call") for name in GATE.threads)


# ---- a run's journal read waits off the loop's thread ------------------------------------------


FAST_DONE = threading.Event()


class _SlowReadStore(InMemoryJournalStore):
    """A store whose reads wait for I/O, as a database's do; reading key
    ``slow``'s run waits until key ``fast``'s run has finished."""

    blocking_io = True

    def __init__(self) -> None:
        super().__init__()
        self.fast_finished_during_slow_read: bool | None = None

    def load_run(self, journal_id: str, key: str, seq: int) -> Any:
        if '"slow"' in key:
            self.fast_finished_during_slow_read = FAST_DONE.wait(timeout=5)
        return super().load_run(journal_id, key, seq)


def _mark_done(event: InputEvent, ctx: Any) -> None:
    if event.input == "fast":
        FAST_DONE.set()
    ctx.send_event(OutputEvent(output=event.input))


def test_a_runs_journal_read_does_not_hold_the_other_runs_of_the_loop() -> None:
    from flink_agents.runtime.execution.state import KeyState, PendingRecord
    from flink_agents.runtime.scheduling.key_runner import KeyRunner

    FAST_DONE.clear()
    store = _SlowReadStore()
    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("mark", [InputEvent], _mark_done)), {},
                         job_id="job", store=store)
    runner = KeyRunner(engine, max_concurrent_runs=4)
    try:
        for key in ("slow", "fast"):
            runner.submit(key, KeyState(journal_id="job", next_seq=1, pending=[PendingRecord(0, key)]))
        assert runner.wait_for("slow", timeout_s=10) and runner.wait_for("fast", timeout_s=10)
        outputs = {key: [c.outputs for c in runner.take(key)] for key in ("slow", "fast")}
    finally:
        runner.close()
        engine.close()

    assert store.fast_finished_during_slow_read is True
    assert outputs == {"slow": [["slow"]], "fast": [["fast"]]}
