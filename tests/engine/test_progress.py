"""The progress stream on the engine: one publish per commit, records only
after their journal write landed, a reply's tool calls before their results
and the results before the next model request, and a crash after any write
never leaves a follower with a step the recovered run lacks."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.chat_turn import ChatTurnAgent
from tests.support import host_runs

MODEL_REQUESTS: List[int] = []  # how many tool results each model request carried


class Crash(BaseException):
    """A simulated process crash."""


class ThreeToolsModel(BaseChatModelConnection):
    """First asks for three tools at once, then answers with their results."""

    tools_first: bool = True

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        results = [m.content for m in messages if m.role == MessageRole.TOOL]
        MODEL_REQUESTS.append(len(results))
        if self.tools_first and not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": f"call_{i}", "type": "function", "function": {"name": "double", "arguments": {"n": i}}}
                for i in range(3)
            ])
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"sum of {results}")


class PlainModel(ThreeToolsModel):
    tools_first: bool = False


def double(n: int) -> int:
    """Double a number.

    Args:
        n: The number.
    """
    time.sleep(0.03 * n)  # the results of one round land apart, in call order
    return 2 * n


def _run(engine: AgentEngine, driver: LocalDriver, value: Any = "go") -> None:
    host_runs.process(engine, driver, "k", value)


def _engine(store: InMemoryJournalStore, agent: Agent | None = None) -> AgentEngine:
    return AgentEngine(AgentPlan.from_agent(agent or ChatTurnAgent(ThreeToolsModel, {"double": double})), {"progress.enabled": True}, job_id="job", store=store)


def _by_commit(records: List[Dict[str, Any]]) -> Dict[int, List[str]]:
    commits: Dict[int, List[str]] = {}
    for record in records:
        commits.setdefault(record["commit"], []).append(record["kind"])
    return commits


def test_a_tool_round_publishes_once_per_commit_in_commit_order() -> None:
    store = InMemoryJournalStore()
    engine = _engine(store)
    driver = LocalDriver()
    published: List[List[Dict[str, Any]]] = []
    store_writes: List[int] = []
    store.after_append = lambda entries: store_writes.append(len(entries))
    original = driver.emit_progress
    driver.emit_progress = lambda records: (published.append(records), original(records))  # type: ignore[method-assign]
    _run(engine, driver)

    assert driver.outputs == [{"k": "sum of ['0', '2', '4']"}]
    # Each tool result that lands while a sibling still runs is written (and
    # published) as it lands; the last one goes with the tool step's completion.
    assert len(store_writes) == 6 and engine.counters.journal_writes == 6
    assert len(published) == 6 == engine.counters.progress_publishes  # one publish per commit
    assert _by_commit(driver.progress) == {
        1: ["run_started", "step_completed"],
        2: ["model_reply", "step_completed"],
        3: ["tool_result"],
        4: ["tool_result"],
        5: ["tool_result", "step_completed"],
        6: ["model_reply", "step_completed", "step_completed", "output", "run_finished"],
    }
    reply = next(r for r in driver.progress if r["kind"] == "model_reply")
    assert [c["name"] for c in reply["tool_calls"]] == ["double"] * 3
    results = [r["result"] for r in driver.progress if r["kind"] == "tool_result"]
    assert sorted(results) == [0, 2, 4]
    output = dict(driver.progress[-2])
    assert isinstance(output.pop("start"), str) and output.pop("duration_ms") >= 0  # the step completion's times
    assert output == {
        "key": "k", "seq": 0, "commit": 6, "kind": "output", "step": "answer@4", "output": "sum of ['0', '2', '4']",
    }
    assert all(r["key"] == "k" and r["seq"] == 0 for r in driver.progress)


def test_a_plain_turn_publishes_twice() -> None:
    store = InMemoryJournalStore()
    engine = _engine(store, ChatTurnAgent(PlainModel, {"double": double}))
    driver = LocalDriver()
    _run(engine, driver)
    assert engine.counters.journal_writes == 2 == engine.counters.progress_publishes
    assert _by_commit(driver.progress) == {
        1: ["run_started", "step_completed"],
        2: ["model_reply", "step_completed", "step_completed", "output", "run_finished"],
    }


def test_tool_calls_come_before_results_and_results_before_the_next_request() -> None:
    """What the follower has seen at the moment of each model request."""
    store = InMemoryJournalStore()
    engine = _engine(store)
    driver = LocalDriver()
    seen_at_request: List[List[str]] = []
    original = ThreeToolsModel.chat

    def watching(self: Any, messages: Any, tools: Any = None, **kwargs: Any) -> ChatMessage:
        seen_at_request.append([r["kind"] for r in driver.progress])
        return original(self, messages, tools, **kwargs)

    ThreeToolsModel.chat = watching  # type: ignore[method-assign]
    try:
        _run(engine, driver)
    finally:
        ThreeToolsModel.chat = original  # type: ignore[method-assign]
    first, second = seen_at_request
    assert "model_reply" not in first
    assert first == ["run_started", "step_completed"]
    # Before the second request: the reply (with its calls), then all three results.
    assert second.index("model_reply") < second.index("tool_result")
    assert second.count("tool_result") == 3


def test_nothing_published_without_a_commit_and_the_local_runner_list() -> None:
    class Echo(Agent):
        def __init__(self) -> None:
            super().__init__()
            self.add_action("echo", [InputEvent], Echo.echo)

        @staticmethod
        def echo(event: InputEvent, ctx: Any) -> None:
            ctx.send_event(OutputEvent(output=event.input))

    env = AgentsExecutionEnvironment.get_execution_environment()
    builder = env.from_list([{"key": "a", "value": 1}]).apply(Echo())
    outputs, progress = builder.to_list(), builder.to_progress_list()
    counters = env.execute()[0]
    assert outputs == [{"a": 1}]
    assert counters["journal_writes"] == 0 and counters["progress_publishes"] == 1
    assert [r["kind"] for r in progress] == ["run_started", "output", "run_finished"]


def _strip(record: Dict[str, Any]) -> Any:
    return tuple(sorted((k, repr(v)) for k, v in record.items() if k not in ("commit", "replayed")))


@pytest.mark.parametrize("crash_after_write", [1, 2, 3, 4])
def test_after_a_crash_at_any_write_the_follower_saw_only_what_the_recovered_run_has(crash_after_write: int) -> None:
    store = InMemoryJournalStore()
    writes = []

    def crash(entries: Any) -> None:
        writes.append(entries)
        if len(writes) == crash_after_write:
            raise Crash()

    store.after_append = crash
    driver = LocalDriver()
    with pytest.raises(Crash):
        _run(_engine(store), driver)
    seen_before_crash = list(driver.progress)
    # The crashed write landed but was never confirmed: nothing of it is out.
    assert len({r["commit"] for r in seen_before_crash}) == crash_after_write - 1

    store.after_append = None
    recovered = LocalDriver()
    recovered.states = driver.states
    host_runs.resume(_engine(store), recovered, "k")
    assert recovered.outputs == [{"k": "sum of ['0', '2', '4']"}]
    recovered_history = {_strip(r) for r in recovered.progress}
    assert {_strip(r) for r in seen_before_crash} <= recovered_history
    replayed = [r for r in recovered.progress if r.get("replayed")]
    assert {_strip(r) for r in replayed} >= {_strip(r) for r in seen_before_crash}


def instant_double(n: int) -> int:
    """Double a number, at once.

    Args:
        n: The number.
    """
    return 2 * n


def test_a_round_of_three_quick_tools_commits_four_times_with_its_results_in_one_write() -> None:
    """The native chat action's count beside the framework integrations'
    (``tests/test_framework_*.py``): results that land within the journal's
    group-commit delay share one write."""
    store = InMemoryJournalStore()
    engine = _engine(store, ChatTurnAgent(ThreeToolsModel, {"double": instant_double}))
    driver = LocalDriver()
    _run(engine, driver)
    assert driver.outputs == [{"k": "sum of ['0', '2', '4']"}]
    assert engine.counters.journal_writes == 4 == store.writes
    commits = _by_commit(driver.progress)
    assert commits[2] == ["model_reply", "step_completed"]
    assert commits[3].count("tool_result") == 3
