"""Tool results reach the model as JSON; a malformed tool call is the model's
to correct (issue 28, points 6 and 7; docs/guarantees.md "Tool calls").

Every test runs the local runner with an OpenAI connection to the scripted
chat-completions server on 127.0.0.1, so the tool message checked is the one
the provider receives. The replay tests rerun the same record with the same
``job-identifier`` over a SQLite journal as a crash leaves it after the
calls were journaled (the steps' completions and the run's end gone, as in
tests/engine/test_stored_data_trust.py): the actions run again, every model and
tool call replays from the journal, the server is not asked again.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sqlite3
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List

import pytest
from pydantic import BaseModel

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.events.tool_event import ToolResponseEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.tools.tool import FunctionTool
from flink_agents.runtime.errors import ActionFailed


@dataclasses.dataclass
class Shipment:
    carrier: str
    weight_kg: Decimal
    handling: set


class Parcel(BaseModel):
    id: uuid.UUID
    shipped_at: datetime.datetime
    shipment: Shipment


PARCEL_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
AT = datetime.datetime(2024, 5, 1, 12, 30)
RESULTS: Dict[str, Any] = {}  # what the tool ``lookup`` returns, per test
SEEN: List[Any] = []  # tool results as an action of the agent's own sees them
RUNS: List[int] = []  # x of each run of ``good``


def lookup(parcel: str) -> Any:
    """Look a parcel up.

    Args:
        parcel: The parcel's id.
    """
    return RESULTS[parcel]


def good(x: int) -> str:
    """Double a number.

    Args:
        x: The number.
    """
    RUNS.append(x)
    return f"doubled: {2 * x}"


@pytest.fixture(autouse=True)
def _clean() -> Any:
    RESULTS.clear()
    SEEN.clear()
    RUNS.clear()
    yield
    RESULTS.clear()
    SEEN.clear()
    RUNS.clear()


def _ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(role=MessageRole.USER, content=event.input)]))


def _answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.response.content))


def _watch(event: ToolResponseEvent, ctx: Any) -> None:
    SEEN.extend(event.responses.values())


def _agent(base_url: str) -> Agent:
    agent = Agent()
    agent.add_action("ask", [InputEvent], _ask)
    agent.add_action("answer", [ChatResponseEvent], _answer)
    agent.add_action("watch", [ToolResponseEvent], _watch)
    agent.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=base_url, max_retries=0, timeout_s=10.0,
    ))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="openai", model="gpt-test",
        tools=["lookup", "good"],
    ))
    agent.add_resource("lookup", ResourceType.TOOL, FunctionTool.from_callable(lookup))
    agent.add_resource("good", ResourceType.TOOL, FunctionTool.from_callable(good))
    return agent


def _run(base_url: str, config: Dict[str, Any] | None = None) -> List[Dict[Any, Any]]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update(config or {})
    outputs = env.from_list([{"key": "k1", "value": "go"}]).apply(_agent(base_url)).to_list()
    env.execute()
    return outputs


def _crash_after_calls(path: Path) -> None:
    """The journal as a crash leaves it once every call was journaled: the
    steps' completions and the run's end (rows without a function id) gone."""
    with sqlite3.connect(path) as db:
        assert db.execute("DELETE FROM journal WHERE function_id = ''").rowcount > 0


def _call(name: str, arguments: str, n: int = 0) -> Dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": arguments},
    }]}


def _tool_messages(request: Dict[str, Any]) -> List[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


# -- 6: tool results reach the model as JSON --------------------------------------

CASES = {
    "datetime, UUID and Decimal": (
        {"at": AT, "id": PARCEL_ID, "cost": Decimal("12.50")},
        {"at": "2024-05-01T12:30:00", "id": str(PARCEL_ID), "cost": "12.50"},
    ),
    "a dataclass": (
        Shipment("DHL", Decimal("2.5"), {"fragile", "upright"}),
        {"carrier": "DHL", "weight_kg": "2.5", "handling": ["fragile", "upright"]},
    ),
    "a pydantic model": (
        Parcel(id=PARCEL_ID, shipped_at=AT, shipment=Shipment("UPS", Decimal("1"), {"dry"})),
        {"id": str(PARCEL_ID), "shipped_at": "2024-05-01T12:30:00",
         "shipment": {"carrier": "UPS", "weight_kg": "1", "handling": ["dry"]}},
    ),
    "a set, a tuple and bytes": (
        {"tags": {"fragile", "b-side", "urgent"}, "dims": (1, 2), "label": b"\x00\xffDHL"},
        {"tags": ["b-side", "fragile", "urgent"], "dims": [1, 2], "label": "AP9ESEw="},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_tool_result_reaches_the_model_as_json_and_the_journal_keeps_its_type(
    case: str, scripted_chat_server: Any, tmp_path: Path,
) -> None:
    value, shown = CASES[case]
    RESULTS["p1"] = value
    server = scripted_chat_server
    server.replies.extend([_call("lookup", '{"parcel": "p1"}'), {"role": "assistant", "content": "done"}])
    config = {"job-identifier": "json-results", "journal.store": "sqlite",
              "journal.sqlite.path": str(tmp_path / "journal.db")}

    assert _run(server.base_url, config) == [{"k1": "done"}]

    (text,) = _tool_messages(server.requests[1])
    assert json.loads(text) == shown
    assert SEEN == [value]  # the agent's own action gets the value as the tool returned it
    # A rerun replays the journaled result: typed, the model shown the same
    # text (else the journaled model call would not match), the server not asked.
    SEEN.clear()
    RESULTS.clear()
    _crash_after_calls(tmp_path / "journal.db")
    assert _run(server.base_url, config) == [{"k1": "done"}]
    assert len(server.requests) == 2
    assert SEEN == [value] and type(SEEN[0]) is type(value)


def test_a_str_result_reaches_the_model_as_itself(scripted_chat_server: Any) -> None:
    server = scripted_chat_server
    server.replies.extend([_call("good", '{"x": 4}'), {"role": "assistant", "content": "8"}])

    assert _run(server.base_url) == [{"k1": "8"}]

    assert _tool_messages(server.requests[1]) == ["doubled: 8"]


# -- 7: a malformed tool call is the model's to correct -------------------------------

MALFORMED = {
    "arguments that are not JSON": ('{"x": 4,', ["tool 'good'", "not valid JSON", "Expecting property name"]),
    "a missing required argument": ('{"y": 4}', ["tool 'good'", "x: Field required"]),
    "an argument of the wrong type": ('{"x": "four"}', ["tool 'good'", "x: Input should be a valid integer"]),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_call_goes_back_to_the_model_which_corrects_it(
    case: str, scripted_chat_server: Any, tmp_path: Path,
) -> None:
    arguments, named = MALFORMED[case]
    server = scripted_chat_server
    server.replies.extend([
        _call("good", arguments, 0), _call("good", '{"x": 4}', 1), {"role": "assistant", "content": "it is 8"},
    ])
    config = {"job-identifier": "malformed", "journal.store": "sqlite",
              "journal.sqlite.path": str(tmp_path / "journal.db"), "error_strategy": "retry"}

    assert _run(server.base_url, config) == [{"k1": "it is 8"}]

    (error,) = _tool_messages(server.requests[1])
    assert error.startswith("Error: ToolArgumentsError: ")
    assert all(part in error for part in named), error
    assert _tool_messages(server.requests[2]) == [error, "doubled: 8"]
    assert RUNS == [4]  # the malformed call ran nothing
    # The model's own text goes back to it as it was sent.
    assert server.requests[1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == arguments
    # A rerun replays: the error result, the corrected call, the answer.
    _crash_after_calls(tmp_path / "journal.db")
    assert _run(server.base_url, config) == [{"k1": "it is 8"}]
    assert len(server.requests) == 3 and RUNS == [4]


def test_a_call_of_a_tool_that_does_not_exist_goes_back_to_the_model(scripted_chat_server: Any) -> None:
    server = scripted_chat_server
    server.replies.extend([
        _call("gooood", '{"x": 4}', 0), _call("good", '{"x": 4}', 1), {"role": "assistant", "content": "it is 8"},
    ])

    assert _run(server.base_url) == [{"k1": "it is 8"}]

    (error,) = _tool_messages(server.requests[1])
    assert error.startswith("Error: ToolNotOffered: tool 'gooood' was not offered")


def test_a_model_that_keeps_sending_malformed_calls_fails_the_record_at_the_round_limit(
    scripted_chat_server: Any, tmp_path: Path,
) -> None:
    server = scripted_chat_server
    server.set_reply_fn(lambda request, index: _call("good", '{"x": 4,', index))
    config = {"job-identifier": "keeps-failing", "journal.store": "sqlite",
              "journal.sqlite.path": str(tmp_path / "journal.db"), "chat.max_tool_rounds": 3}

    for attempt in ("first run", "replay"):
        if attempt == "replay":
            _crash_after_calls(tmp_path / "journal.db")
        with pytest.raises(ActionFailed) as failed:
            _run(server.base_url, config)
        text = str(failed.value)
        assert "more than 3 rounds (chat.max_tool_rounds)" in text, attempt
        assert "the last tool error (round 2): tool 'good'" in text, attempt
        assert "ToolArgumentsError" in text and "not valid JSON" in text, attempt
        assert type(failed.value.cause).__name__ == "ToolRoundLimitReached", attempt
        assert len(server.requests) == 4, attempt  # 3 rounds of tools, then the 4th reply asks again: refused
    assert RUNS == []
