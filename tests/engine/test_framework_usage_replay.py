"""Usage is the same after a replay (docs/durability.md, "Usage"): what a
journaled framework tool call added to its run's usage (a delegated agent's
requests and tokens) is journaled with the call's result and added again
when a replay returns the result without running the tool.

Run through the local runner over a SQLite journal: the process "dies"
(a ``BaseException``) at the outer agent's second model request, once the
tool's result was journaled; a rerun with the same ``job-identifier``
replays the record, as a restart does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent as PydanticAgent, RunContext  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402

from flink_agents.api.agents.agent import Agent  # noqa: E402
from flink_agents.api.decorators import action  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402
from flink_agents.api.execution_environment import AgentsExecutionEnvironment  # noqa: E402
from flink_agents.integrations.frameworks.pydantic_ai import run_durably  # noqa: E402

REQUESTS: Counter = Counter()
CRASH: Dict[str, bool] = {}


class Crash(BaseException):
    """A simulated process crash."""


def _outer_model(messages: List[Any], info: AgentInfo) -> ModelResponse:
    REQUESTS["outer"] += 1
    if len(messages) == 1:  # the prompt: delegate
        return ModelResponse(parts=[ToolCallPart("ask_expert", {"question": "why?"})],
                             usage=RequestUsage(input_tokens=10, output_tokens=5))
    if CRASH.pop("outer", False):
        raise Crash("the process dies at the second request, the tool's result journaled")
    return ModelResponse(parts=[TextPart("because")], usage=RequestUsage(input_tokens=21, output_tokens=8))


def _expert_model(messages: List[Any], info: AgentInfo) -> ModelResponse:
    REQUESTS["expert"] += 1
    return ModelResponse(parts=[TextPart("physics")], usage=RequestUsage(input_tokens=7, output_tokens=9))


EXPERT = PydanticAgent(FunctionModel(_expert_model), name="expert")
LEAD = PydanticAgent(FunctionModel(_outer_model), name="lead")


@LEAD.tool
async def ask_expert(ctx: RunContext[None], question: str) -> str:
    """Ask the expert agent."""
    answer = await EXPERT.run(question, usage=ctx.usage)  # the delegation pattern: one usage for both
    return answer.output


class LeadAgent(Agent):
    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        result = await run_durably(ctx, LEAD, event.input)
        usage = result.usage
        ctx.send_event(OutputEvent(output={
            "answer": result.output, "requests": usage.requests,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        }))


def _run(journal: Path) -> Any:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update({
        "job-identifier": "usage-replay", "journal.store": "sqlite", "journal.sqlite.path": str(journal),
    })
    outputs = env.from_list([{"key": "k", "value": "go"}]).apply(LeadAgent()).to_list()
    env.execute()
    return outputs[0]["k"]


@pytest.fixture(autouse=True)
def _reset() -> Any:
    REQUESTS.clear()
    CRASH.clear()
    yield
    CRASH.clear()


# 2 outer requests (10/5, 21/8) and the expert's (7/9).
UNINTERRUPTED = {"answer": "because", "requests": 3, "input_tokens": 38, "output_tokens": 22}


def test_pydantic_ai_usage_of_a_delegating_tool_is_the_same_after_a_crash_and_replay(tmp_path: Path) -> None:
    assert _run(tmp_path / "uninterrupted.db") == UNINTERRUPTED
    REQUESTS.clear()

    journal = tmp_path / "journal.db"
    CRASH["outer"] = True
    with pytest.raises(Crash):
        _run(journal)
    assert REQUESTS == Counter(outer=2, expert=1)

    assert _run(journal) == UNINTERRUPTED
    assert REQUESTS == Counter(outer=3, expert=1), "the journaled tool ran again"

