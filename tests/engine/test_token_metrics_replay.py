"""The built-in chat action's token metrics after a replay equal an
uninterrupted run's (docs/durability.md, "Usage"): the tokens of a model
call are counted from its journaled reply once per call in the engine that
runs the record, whether the call ran or its reply was replayed, so an
engine restarted after a crash neither misses the replayed calls nor
counts one twice.

Run through the local runner over a SQLite journal: the process "dies"
(a ``BaseException``) at the second model call, once the first reply was
journaled; a rerun with the same ``job-identifier`` replays the record.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from tests.support.chat_turn import ChatTurnAgent
from flink_agents.runtime.errors import ActionFailed

CALLS: Counter = Counter()
CRASH: Dict[str, bool] = {}

# Usage the provider reports per question: (prompt, completion, cached, reasoning) tokens.
USAGE = {"first": (11, 3, 4, 1), "second": (17, 5, 6, 2)}
# USD per million tokens of counting-1 (usage.prices).
PRICES = {"usage.prices": {"counting-1": {"input": 2.0, "cached_input": 1.0, "output": 10.0}}}


class Crash(BaseException):
    """A simulated process crash."""


class CountingModel(BaseChatModelConnection):
    """Answers the last message upper-cased, reporting ``USAGE`` for it."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        question = messages[-1].content
        CALLS[question] += 1
        if CRASH.pop(question, False):
            raise Crash(f"the process dies asking {question!r}")
        prompt, completion, cached, reasoning = USAGE[question]
        return ChatMessage(role=MessageRole.ASSISTANT, content=question.upper(), extra_args={
            "model_name": "counting-1", "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                                  "cached_tokens": cached, "reasoning_tokens": reasoning},
        })


class CountingSetup(BaseChatModelSetup):
    pass


def ask_first(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(content="first")]))


def ask_second_or_answer(event: ChatResponseEvent, ctx: Any) -> None:
    if event.response.content == "FIRST":
        ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(content="second")]))
    else:
        ctx.send_event(OutputEvent(output=event.response.content))


def _agent() -> Agent:
    agent = Agent().add_action("ask_first", [InputEvent], ask_first)
    agent.add_action("ask_second_or_answer", [ChatResponseEvent], ask_second_or_answer)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=CountingModel))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=CountingSetup, connection="conn"))
    return agent


def _metrics(agent: Agent, journal: Path, config: Dict[str, Any] | None = None) -> Tuple[Any, Dict[str, Any]]:
    """Run one record of ``agent`` through the local runner over ``journal``:
    its outputs, or the ``ActionFailed`` it failed with, and the token
    metrics of the engine that ran it."""
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update({
        "job-identifier": "token-metrics", "journal.store": "sqlite", "journal.sqlite.path": str(journal),
        **(config or {}),
    })
    outputs = env.from_list([{"key": "k", "value": "go"}]).apply(agent).to_list()
    try:
        env.execute()
    except ActionFailed as failed:
        outputs = failed
    (metrics,) = env.last_metrics
    return outputs, {name: value for name, value in metrics.items() if name.endswith(("Tokens", "MicroUsd"))}


def _run(journal: Path, config: Dict[str, Any] | None = None) -> Dict[str, Any]:
    outputs, tokens = _metrics(_agent(), journal, config)
    assert outputs == [{"k": "SECOND"}]
    return tokens


@pytest.fixture(autouse=True)
def _reset() -> Any:
    CALLS.clear()
    CRASH.clear()
    yield
    CRASH.clear()


def test_token_metrics_after_a_crash_and_replay_equal_an_uninterrupted_runs(tmp_path: Path) -> None:
    uninterrupted = _run(tmp_path / "uninterrupted.db", PRICES)
    # Both calls (the built-in chat action's), once each, under one model group.
    (group,) = {name.rpartition(".")[0] for name in uninterrupted}
    assert group.endswith(".model.counting-1")
    assert {name.rpartition(".")[2]: value for name, value in uninterrupted.items()} == {
        "promptTokens": 11 + 17, "completionTokens": 3 + 5, "cachedTokens": 4 + 6, "reasoningTokens": 1 + 2,
        # ((11 - 4) x 2 + 4 x 1 + 3 x 10) + ((17 - 6) x 2 + 6 x 1 + 5 x 10) micro-USD
        "costMicroUsd": 48 + 78,
    }
    CALLS.clear()

    journal = tmp_path / "journal.db"
    CRASH["second"] = True
    with pytest.raises(Crash):
        _run(journal, PRICES)
    assert CALLS == Counter(first=1, second=1)

    assert _run(journal, PRICES) == uninterrupted  # the replayed first call counted, nothing twice
    assert CALLS == Counter(first=1, second=2), "the journaled first call ran again"


# -- a record that ends skipped or failed after a replay --------------------------------------


async def _check_or_fail(event: ChatResponseEvent, ctx: Any) -> None:
    """After the first reply: a journaled check that crashes the process
    once (``CRASH["check"]``), then always fails: the record ends skipped
    or failed, its first model call replayed from the journal."""
    await ctx.durable_execute_async(_check, event.response.content)


def _check(answer: str) -> None:
    CALLS["check"] += 1
    if CRASH.pop("check", False):
        raise Crash("the process dies in the check, the first reply journaled")
    raise ValueError(f"the check refuses {answer!r}")


def _failing_agent() -> Agent:
    agent = Agent().add_action("ask_first", [InputEvent], ask_first)
    agent.add_action("check_or_fail", [ChatResponseEvent], _check_or_fail)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=CountingModel))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=CountingSetup, connection="conn"))
    return agent


@pytest.mark.parametrize("strategy", ["skip", "fail"])
def test_token_metrics_of_a_record_that_ends_skipped_or_failed_after_a_replay_equal_an_uninterrupted_runs(
    tmp_path: Path, strategy: str,
) -> None:
    config = {"error_strategy": strategy}
    outputs, uninterrupted = _metrics(_failing_agent(), tmp_path / "uninterrupted.db", config)
    assert outputs == [] if strategy == "skip" else isinstance(outputs, ActionFailed)
    assert sorted(uninterrupted.values()) == [1, 3, 4, 11]  # the first call, once (cached 4, reasoning 1)
    CALLS.clear()

    journal = tmp_path / "journal.db"
    CRASH["check"] = True
    with pytest.raises(Crash):
        _metrics(_failing_agent(), journal, config)
    assert _metrics(_failing_agent(), journal, config)[1] == uninterrupted
    assert CALLS["first"] == 1, "the journaled first call ran again"


# -- a retried action -------------------------------------------------------------------------


def lookup(q: str) -> str:
    """Look something up.

    Args:
        q: The query.
    """
    return f"found {q}"


class FlakyToolModel(BaseChatModelConnection):
    """Asks for ``lookup`` (11/3 tokens), then answers (17/5 tokens); the
    answer's request fails once with a ``ConnectionError`` when
    ``CRASH["flaky"]`` is set, so the chat action is retried."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        results = [m.content for m in messages if m.role == MessageRole.TOOL]
        CALLS["answer" if results else "ask"] += 1
        usage = {"model_name": "counting-1"}
        if not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}}},
            ], extra_args={**usage, "usage": {"prompt_tokens": 11, "completion_tokens": 3}})
        if CRASH.pop("flaky", False):
            raise ConnectionError("the provider dropped the connection")
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"done: {results}",
                           extra_args={**usage, "usage": {"prompt_tokens": 17, "completion_tokens": 5}})


def test_a_retried_chat_action_counts_each_model_call_once(tmp_path: Path) -> None:
    config = {"error_strategy": "retry", "error_retry.initial_backoff_s": 0.001}
    outputs, uninterrupted = _metrics(ChatTurnAgent(FlakyToolModel, {"lookup": lookup}), tmp_path / "u.db", config)
    assert outputs == [{"k": "done: ['found x']"}]
    assert sorted(uninterrupted.values()) == [3 + 5, 11 + 17]
    CALLS.clear()

    CRASH["flaky"] = True
    outputs, retried = _metrics(ChatTurnAgent(FlakyToolModel, {"lookup": lookup}), tmp_path / "r.db", config)
    assert outputs == [{"k": "done: ['found x']"}]
    assert CALLS == Counter(ask=1, answer=2), "the retry asked the journaled first call again"
    assert retried == uninterrupted


# -- a sub-agent call replayed from its journaled result -------------------------------------


async def _delegate(event: InputEvent, ctx: Any) -> None:
    """The parent: asks the child (which asks the model), then crashes the
    process once (``CRASH["parent"]``), the child's result journaled."""
    result = await ctx.get_resource("asker", ResourceType.AGENT).submit(ctx, "first")
    await ctx.durable_execute_async(_after_child)
    ctx.send_event(OutputEvent(output=result.result))


def _after_child() -> None:
    if CRASH.pop("parent", False):
        raise Crash("the process dies in the parent, the child's result journaled")


def _child_ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(content=event.input)]))


def _child_answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.response.content))


def _parent_agent() -> Agent:
    child = Agent().add_action("child_ask", [InputEvent], _child_ask)
    child.add_action("child_answer", [ChatResponseEvent], _child_answer)
    child.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=CountingModel))
    child.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=CountingSetup, connection="conn"))
    return Agent().add_action("delegate", [InputEvent], _delegate).add_resource("asker", ResourceType.AGENT, child)


def test_token_metrics_count_the_child_of_a_sub_agent_call_replayed_from_its_result(tmp_path: Path) -> None:
    outputs, uninterrupted = _metrics(_parent_agent(), tmp_path / "uninterrupted.db")
    assert outputs == [{"k": ["FIRST"]}]
    assert sorted(uninterrupted.values()) == [1, 3, 4, 11]  # the child's call (cached 4, reasoning 1 journaled too)
    CALLS.clear()

    journal = tmp_path / "journal.db"
    CRASH["parent"] = True
    with pytest.raises(Crash):
        _metrics(_parent_agent(), journal)
    assert _metrics(_parent_agent(), journal) == ([{"k": ["FIRST"]}], uninterrupted)
    assert CALLS["first"] == 1, "the child ran again"
