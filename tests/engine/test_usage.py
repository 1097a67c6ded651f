"""Usage and cost as users see them (docs/durability.md, "Usage"): the
progress stream's model replies carry each call's usage, model and times,
the run's end the record's totals (a sub-agent's calls and replayed calls
included, each once); the price table (``usage.prices``) is checked when
the job starts, and gives costs.

Run through the local runner (``from_list(...).apply(...)``, ``execute()``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.configuration import Configuration
from flink_agents.api.core_options import RuntimeOptions, validate_options
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.runtime.execution.usage import PriceTable, Usage
from flink_agents.runtime.features.progress import RunProgress
from flink_agents.stores.journal import RUN_END, RUN_STEP, JournalEntry

PRICES = {"usage.prices": {"usage-1": {"input": 2.0, "cached_input": 1.0, "output": 10.0}}}


class UsageModel(BaseChatModelConnection):
    """Answers upper-cased: 11 prompt tokens (4 cached), 3 completion (1 reasoning), from ``usage-1-2025-01-31``."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content=messages[-1].content.upper(), extra_args={
            "model_name": "usage-1-2025-01-31",
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "cached_tokens": 4, "reasoning_tokens": 1},
        })


class UsageSetup(BaseChatModelSetup):
    pass


def _ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(content=str(event.input))]))


def _answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.response.content))


def _chat_agent() -> Agent:
    agent = Agent().add_action("ask", [InputEvent], _ask).add_action("answer", [ChatResponseEvent], _answer)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=UsageModel))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=UsageSetup, connection="conn"))
    return agent


async def _delegate(event: InputEvent, ctx: Any) -> None:
    """Asks the model itself, then hands the input to a child that asks it too."""
    result = await ctx.get_resource("child", ResourceType.AGENT).submit(ctx, event.input)
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(content=str(result.result))]))


def _parent_agent() -> Agent:
    agent = Agent().add_action("delegate", [InputEvent], _delegate).add_action("answer", [ChatResponseEvent], _answer)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=UsageModel))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=UsageSetup, connection="conn"))
    return agent.add_resource("child", ResourceType.AGENT, _chat_agent())


def _progress(agent: Agent, config: Dict[str, Any] | None = None) -> List[Dict[str, Any]]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update(config or {})
    builder = env.from_list([{"key": "k", "value": "go"}]).apply(agent)
    outputs, progress = builder.to_list(), builder.to_progress_list()
    env.execute()
    assert outputs
    return progress


ONE_CALL = {"input_tokens": 11, "output_tokens": 3, "cached_input_tokens": 4, "reasoning_tokens": 1}


def test_a_model_reply_carries_its_usage_model_and_times_and_the_run_end_the_records_total() -> None:
    progress = _progress(_chat_agent())
    (reply,) = [r for r in progress if r["kind"] == "model_reply"]
    assert reply["usage"] == ONE_CALL and reply["response_model"] == "usage-1-2025-01-31"
    assert reply["model"] == "model"  # the setup, as before
    assert "cost_usd" not in reply  # no price table
    assert reply["start"].endswith("Z") and len(reply["start"]) == len("2026-01-15T10:30:00.123Z")
    assert isinstance(reply["duration_ms"], (int, float)) and reply["duration_ms"] >= 0
    (finished,) = [r for r in progress if r["kind"] == "run_finished"]
    assert finished["usage"] == ONE_CALL and "cost_usd" not in finished
    assert "start" in finished and finished["duration_ms"] >= reply["duration_ms"]
    steps = [r for r in progress if r["kind"] == "step_completed"]
    assert steps and all("start" in r and "duration_ms" in r for r in steps)


def test_the_run_end_totals_a_sub_agents_calls_with_the_parents() -> None:
    progress = _progress(_parent_agent())
    (finished,) = [r for r in progress if r["kind"] == "run_finished"]
    assert finished["usage"] == {name: 2 * value for name, value in ONE_CALL.items()}


def test_with_a_price_table_replies_and_the_run_end_carry_their_cost() -> None:
    progress = _progress(_parent_agent(), PRICES)
    one = ((11 - 4) * 2.0 + 4 * 1.0 + 3 * 10.0) / 1e6
    replies = [r for r in progress if r["kind"] == "model_reply"]
    assert [r["cost_usd"] for r in replies] == [pytest.approx(one)]
    (finished,) = [r for r in progress if r["kind"] == "run_finished"]
    assert finished["cost_usd"] == pytest.approx(2 * one)


def _entry(step: str, ordinal: int, function_id: str, payload: Dict[str, Any]) -> JournalEntry:
    return JournalEntry(step, ordinal, function_id, "", json.dumps(payload))


def test_run_progress_with_a_price_table_gives_costs_and_counts_a_replayed_entry_once() -> None:
    published: List[List[Dict[str, Any]]] = []
    progress = RunProgress("k", 0, published.append, prices=PriceTable(PRICES["usage.prices"]))
    reply = {"ok": {"content": "x", "tool_calls": [], "response": {},
                    "usage": {"input_tokens": 1000, "output_tokens": 100}, "model": "usage-1"},
             "t": [1_700_000_000_123_456_789, 2_500_000]}
    call = _entry("respond@1/turn0/m0", 0, "chat:pydantic_ai/reviewer", reply)
    progress.replayed([call])
    end = JournalEntry(RUN_STEP, RUN_END, "", "", json.dumps({"outcome": "ok", "t": [1_700_000_000_000_000_000, 9]}))
    progress.committed([call, end])  # the same call again: counted once
    records = [r for batch in published for r in batch]
    replies = [r for r in records if r["kind"] == "model_reply"]
    assert replies[0]["cost_usd"] == pytest.approx((1000 * 2.0 + 100 * 10.0) / 1e6)
    assert replies[0]["start"] == "2023-11-14T22:13:20.123Z" and replies[0]["duration_ms"] == 2.5
    (finished,) = [r for r in records if r["kind"] == "run_finished"]
    assert finished["usage"] == {"input_tokens": 1000, "output_tokens": 100}
    assert finished["cost_usd"] == pytest.approx(0.003)


# -- the price table: checked when the job starts -------------------------------------------------


@pytest.mark.parametrize("prices, message", [
    ({"usage-1": {"input": -1}}, "usage.prices['usage-1'].input must be a number >= 0"),
    ({"usage-1": {"inptu": 1}}, "usage.prices['usage-1']: unknown field(s) ['inptu']"),
    ({"usage-1": 3}, "usage.prices['usage-1'] must map input/output/cached_input"),
    ("{not json", "configuration 'usage.prices': expected a mapping or a JSON object string"),
    ("[1, 2]", "configuration 'usage.prices': expected a mapping or a JSON object string"),
])
def test_a_bad_price_table_fails_the_job_at_start_naming_the_model_and_field(prices: Any, message: str) -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update({"usage.prices": prices})
    env.from_list([{"key": "k", "value": "go"}]).apply(_chat_agent()).to_list()
    with pytest.raises(ValueError) as failed:
        env.execute()
    assert message in str(failed.value)


def test_the_price_table_reads_as_a_mapping_a_json_string_or_a_nested_yaml_section(tmp_path: Path) -> None:
    expected = {"usage-1": {"input": 2.0, "output": 10.0}}
    assert validate_options({"usage.prices": expected}).get(RuntimeOptions.USAGE_PRICES) == expected
    assert validate_options({"usage.prices": json.dumps(expected)}).get(RuntimeOptions.USAGE_PRICES) == expected
    config_file = tmp_path / "config.yaml"
    config_file.write_text("agent:\n  usage:\n    prices:\n      gpt-4.1: {input: 2, output: 8}\n")
    config = Configuration()
    config.load_from_file(config_file)
    flat = validate_options(config).get(RuntimeOptions.USAGE_PRICES)
    assert flat == {"gpt-4.1.input": 2, "gpt-4.1.output": 8}  # flattened by the loader; a dotted model name kept
    assert PriceTable(flat).cost("gpt-4.1", Usage(1_000_000, 1_000_000)) == pytest.approx(10.0)


def test_a_keys_usage_and_cost_add_up_in_its_keyed_state_once_per_record() -> None:
    """Per key: the totals live in the key's state (checkpointed with it),
    each record added once, and each run_finished shows them as they stand."""
    from flink_agents.runtime.execution.state import KeyState
    from flink_agents.runtime.local.driver import LocalDriver
    from flink_agents.stores.memory_store import InMemoryJournalStore
    from tests.support.framework_runs import progress_engine, run_records

    store = InMemoryJournalStore()
    driver = LocalDriver()
    run_records(progress_engine(_chat_agent(), store, PRICES), [("a", "x"), ("b", "y"), ("a", "z")], driver)
    one = ((11 - 4) * 2.0 + 4 * 1.0 + 3 * 10.0) / 1e6
    state = KeyState.from_json(driver.load("a").to_json())  # as a checkpoint holds it
    assert state.usage == {"records": 2, **{name: 2 * value for name, value in ONE_CALL.items()},
                           "cost_usd": pytest.approx(2 * one)}
    assert driver.load("b").usage["records"] == 1
    finished = [r for r in driver.progress if r["kind"] == "run_finished" and r["key"] == "a"]
    assert [r["key_usage"]["records"] for r in finished] == [1, 2]
    assert finished[-1]["key_usage"]["cost_usd"] == pytest.approx(2 * one)
    assert finished[-1]["key_usage"]["input_tokens"] == 22
