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
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool

CALLS: Counter = Counter()
CRASH: Dict[str, bool] = {}

# Usage the provider reports per question: (prompt, completion) tokens.
USAGE = {"first": (11, 3), "second": (17, 5)}


class Crash(BaseException):
    """A simulated process crash."""


class CountingModel(BaseChatModelConnection):
    """Answers the last message upper-cased, reporting ``USAGE`` for it."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        question = messages[-1].content
        CALLS[question] += 1
        if CRASH.pop(question, False):
            raise Crash(f"the process dies asking {question!r}")
        prompt, completion = USAGE[question]
        return ChatMessage(role=MessageRole.ASSISTANT, content=question.upper(), extra_args={
            "model_name": "counting-1", "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
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


def _run(journal: Path) -> Dict[str, Any]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update({
        "job-identifier": "token-metrics", "journal.store": "sqlite", "journal.sqlite.path": str(journal),
    })
    outputs = env.from_list([{"key": "k", "value": "go"}]).apply(_agent()).to_list()
    env.execute()
    assert outputs == [{"k": "SECOND"}]
    (metrics,) = env.last_metrics
    return {name: value for name, value in metrics.items() if name.endswith("Tokens")}


@pytest.fixture(autouse=True)
def _reset() -> Any:
    CALLS.clear()
    CRASH.clear()
    yield
    CRASH.clear()


def test_token_metrics_after_a_crash_and_replay_equal_an_uninterrupted_runs(tmp_path: Path) -> None:
    uninterrupted = _run(tmp_path / "uninterrupted.db")
    assert sorted(uninterrupted.values()) == [3 + 5, 11 + 17]  # both calls, once each
    CALLS.clear()

    journal = tmp_path / "journal.db"
    CRASH["second"] = True
    with pytest.raises(Crash):
        _run(journal)
    assert CALLS == Counter(first=1, second=1)

    assert _run(journal) == uninterrupted  # the replayed first call counted, nothing twice
    assert CALLS == Counter(first=1, second=2), "the journaled first call ran again"
