"""The Anthropic chat model over the real ``anthropic`` SDK, against the
scripted Messages API server (``tests.support.scripted_anthropic_server``)."""
from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any, List

import anthropic
import pytest
from pydantic import BaseModel

from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.errors import (
    ModelAuthenticationError,
    ModelBadRequest,
    ModelContextTooLong,
    ModelOverloaded,
    ModelRateLimited,
    ModelResponseError,
    ModelUnreachable,
)
from flink_agents.api.resource import ResourceDescriptor, ResourceName
from flink_agents.api.tools.tool import ToolMetadata
from flink_agents import _sdk as sdk
from flink_agents.integrations.chat_models.anthropic.anthropic_chat_model import (
    AnthropicChatModelConnection,
    AnthropicChatModelSetup,
    convert_to_anthropic_message,
    convert_to_anthropic_messages,
    convert_to_anthropic_system_prompts,
    to_anthropic_tool,
)
from tests.support.notify_tool import (  # noqa: F401 (clear_notified: an autouse fixture)
    NOTIFIED,
    NOTIFY,
    NOTIFY_RESULT,
    clear_notified,
)
from tests.support.provider_agent import ReviewAgent, run_local
from tests.support.ports import free_port
from tests.support.scripted_anthropic_server import AnthropicScriptedServer
from tests.support.scripted_http import ScriptedError

REVIEW = {"id": "B01", "review": "The box was crushed and the shoes arrived damaged."}
ANSWER = '{"score": 1, "reasons": ["reports shipping damage"]}'
NOTIFY_CALL = {
    "role": "assistant",
    "content": "I will tell shipping.",
    "tool_calls": [{"id": "toolu_0", "type": "function",
                    "function": {"name": "notify_shipping_manager", "arguments": REVIEW}}],
}
NOTIFY_TOOL = {
    "name": "notify_shipping_manager",
    "description": "Tell the shipping manager about a damaged delivery.",
    "input_schema": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The product id."},
            "review": {"type": "string", "description": "The customer's review."},
        },
        "required": ["id", "review"],
    },
}


def _connection(server: AnthropicScriptedServer, **fields: Any) -> AnthropicChatModelConnection:
    return AnthropicChatModelConnection(api_key="sk-test", base_url=server.base_url, **{"max_retries": 0, **fields})


# -- conversions -------------------------------------------------------------------------


def test_system_messages_go_apart_and_tool_results_share_one_user_turn():
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content="You rate reviews."),
        ChatMessage(role=MessageRole.USER, content="rate B01"),
        ChatMessage(role=MessageRole.SYSTEM, content="Be brief."),
        ChatMessage(role=MessageRole.ASSISTANT, content="Checking.", tool_calls=[
            {"id": "req1-0-0", "type": "function", "original_id": "toolu_0",
             "function": {"name": "lookup", "arguments": {"id": "B01"}}},
            {"id": "req1-0-1", "type": "function", "original_id": "toolu_0",
             "function": {"name": "notify", "arguments": '{"id": "B01"}'}},
        ]),
        ChatMessage(role=MessageRole.TOOL, content="found", extra_args={"tool_call_id": "req1-0-0"}),
        ChatMessage(role=MessageRole.TOOL, content="notified", extra_args={"tool_call_id": "req1-0-1"}),
        ChatMessage(role=MessageRole.USER, content="and the score?"),
    ]
    assert convert_to_anthropic_system_prompts(messages) == [
        {"type": "text", "text": "You rate reviews."}, {"type": "text", "text": "Be brief."},
    ]
    assert convert_to_anthropic_messages(messages) == [
        {"role": "user", "content": "rate B01"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "req1-0-0", "name": "lookup", "input": {"id": "B01"}},
            {"type": "tool_use", "id": "req1-0-1", "name": "notify", "input": {"id": "B01"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "req1-0-0", "content": "found"},
            {"type": "tool_result", "tool_use_id": "req1-0-1", "content": "notified"},
            {"type": "text", "text": "and the score?"},
        ]},
    ]


def test_message_conversion_refuses_what_the_api_cannot_take():
    with pytest.raises(ValueError, match="tool_call_id"):
        convert_to_anthropic_message(ChatMessage(role=MessageRole.TOOL, content="42"))
    with pytest.raises(ValueError, match="system"):
        convert_to_anthropic_message(ChatMessage(role=MessageRole.SYSTEM, content="be brief"))
    assert convert_to_anthropic_message(ChatMessage(role=MessageRole.ASSISTANT, content="hi")) == {
        "role": "assistant", "content": "hi",
    }


def test_tool_conversion_and_the_description_limit():
    assert to_anthropic_tool(metadata=NOTIFY.metadata) == NOTIFY_TOOL
    long = ToolMetadata(name="wordy", description="x" * 1025, args_schema={"type": "object", "properties": {}})
    with pytest.raises(ValueError, match="wordy.*1025"):
        to_anthropic_tool(metadata=long)
    assert to_anthropic_tool(metadata=long, skip_length_check=True)["description"] == "x" * 1025


def test_setup_defaults_are_those_of_0_3_1():
    setup = AnthropicChatModelSetup(connection="anthropic", additional_kwargs={"top_k": 5})
    assert setup.model_kwargs == {
        "model": "claude-sonnet-4-20250514", "max_tokens": 1024, "temperature": 0.1, "top_k": 5,
    }


# -- the SDK against the scripted server ---------------------------------------------------


def test_plain_answer_records_usage_stop_reason_and_model():
    with AnthropicScriptedServer([{"role": "assistant", "content": "Four stars."}]) as server:
        connection = _connection(server)
        try:
            reply = connection.chat(
                [ChatMessage(role=MessageRole.SYSTEM, content="Rate it."), ChatMessage(content="nice shoes")],
                model="claude-test", max_tokens=64, temperature=0.0, top_k=3,
            )
        finally:
            connection.close()
    assert reply.role == MessageRole.ASSISTANT and reply.content == "Four stars." and reply.tool_calls == []
    (sent,) = server.sent
    assert sent["usage"]["input_tokens"] > 0 and sent["usage"]["output_tokens"] > 0
    assert reply.extra_args == {
        "model_name": "claude-test", "stop_reason": "end_turn",
        "usage": {"prompt_tokens": sent["usage"]["input_tokens"], "completion_tokens": sent["usage"]["output_tokens"]},
    }
    assert server.requests == [{
        "model": "claude-test", "max_tokens": 64, "temperature": 0.0, "top_k": 3,
        "system": [{"type": "text", "text": "Rate it."}],
        "messages": [{"role": "user", "content": "nice shoes"}],
    }]
    assert server.exchanges[0].headers["anthropic-version"]


def test_cache_reads_and_writes_count_in_the_input_and_reads_as_cached():
    reply_with_cache = {"role": "assistant", "content": "Four stars.",
                        "usage_extra": {"cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}}
    with AnthropicScriptedServer([reply_with_cache]) as server:
        connection = _connection(server)
        try:
            reply = connection.chat([ChatMessage(content="nice shoes")], model="claude-test", max_tokens=64)
        finally:
            connection.close()
    (sent,) = server.sent
    # prompt_tokens is every input token (uncached + cache reads + cache writes), as OpenAI counts them
    assert reply.extra_args["usage"] == {
        "prompt_tokens": sent["usage"]["input_tokens"] + 120,
        "completion_tokens": sent["usage"]["output_tokens"],
        "cached_tokens": 100,
    }
    assert reply.extra_args["model_name"] == "claude-test"


def test_achat_uses_an_async_client_per_event_loop():
    replies = [{"role": "assistant", "content": f"answer {n}", "stop_reason": "max_tokens"} for n in range(2)]
    with AnthropicScriptedServer(replies) as server:
        connection = _connection(server)
        try:
            # Two asyncio.run calls: two loops, as two local runs would use.
            first = asyncio.run(connection.achat([ChatMessage(content="a")], model="claude-test"))
            second = asyncio.run(connection.achat([ChatMessage(content="b")], model="claude-test"))
        finally:
            connection.close()
    assert [first.content, second.content] == ["answer 0", "answer 1"]
    assert second.extra_args["stop_reason"] == "max_tokens"
    assert [r["max_tokens"] for r in server.requests] == [1024, 1024]  # the API requires one
    assert [e.headers["x-stainless-async"] for e in server.exchanges] == ["async:asyncio"] * 2


def _review_agent(base_url: str, output_schema: Any = None) -> ReviewAgent:
    """The shared review agent over an Anthropic connection to the test's
    server; with an output schema it sends no system message."""
    return ReviewAgent(
        "anthropic",
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.ANTHROPIC_CONNECTION, api_key="sk-test", base_url=base_url, max_retries=0,
        ),
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.ANTHROPIC_SETUP, connection="anthropic", model="claude-test",
            max_tokens=256, temperature=0.0, tools=["notify_shipping_manager"],
        ),
        system=None if output_schema else "You rate product reviews.",
        output_schema=output_schema,
    )


def test_tool_call_loop_of_an_agent_on_the_local_runner():
    with AnthropicScriptedServer([NOTIFY_CALL, {"role": "assistant", "content": ANSWER}]) as server:
        out = run_local(_review_agent(server.base_url), [{"key": "B01", "value": REVIEW}])
    assert out == [{"B01": {"answer": ANSWER}}]
    assert NOTIFIED == [REVIEW]
    first, second = server.requests
    user = {"role": "user", "content": json.dumps(REVIEW)}
    assert first == {
        "model": "claude-test", "max_tokens": 256, "temperature": 0.0,
        "system": [{"type": "text", "text": "You rate product reviews."}],
        "messages": [user], "tools": [NOTIFY_TOOL],
    }
    assert {k: v for k, v in second.items() if k != "messages"} == {k: v for k, v in first.items() if k != "messages"}
    asked, assistant, results = second["messages"]
    assert asked == user
    text, tool_use = assistant["content"]
    assert assistant["role"] == "assistant" and text == {"type": "text", "text": "I will tell shipping."}
    assert tool_use["type"] == "tool_use" and tool_use["name"] == "notify_shipping_manager"
    assert tool_use["input"] == REVIEW
    assert tool_use["id"] != "toolu_0"  # the runtime's id, not Anthropic's
    assert results == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_use["id"], "content": NOTIFY_RESULT},
    ]}


def test_concurrent_keys_pair_each_tool_result_with_its_own_call():
    """Every reply reuses the tool_use id "toolu_0"; each request still
    answers the call of its own conversation (the server refuses a
    tool_result that answers no tool_use of the previous turn)."""

    def reply(request: dict, index: int) -> dict:
        last = request["messages"][-1]
        if isinstance(last["content"], list):
            return {"role": "assistant", "content": f"done after {last['content'][0]['tool_use_id']}"}
        return {**NOTIFY_CALL, "tool_calls": [{"id": "toolu_0", "type": "function", "function": {
            "name": "notify_shipping_manager", "arguments": json.loads(last["content"]),
        }}]}

    records = [{"key": f"k{n % 3}", "value": {"id": f"B{n}", "review": f"box {n} was crushed"}} for n in range(6)]
    with AnthropicScriptedServer() as server:
        server.set_reply_fn(reply)
        out = run_local(_review_agent(server.base_url), records)
    assert len(out) == 6 and len(server.requests) == 12
    assert sorted(c["id"] for c in NOTIFIED) == [f"B{n}" for n in range(6)]
    answered = {r["messages"][-1]["content"][0]["tool_use_id"] for r in server.requests
                if isinstance(r["messages"][-1]["content"], list)}
    assert len(answered) == 6 and "toolu_0" not in answered


class Rating(BaseModel):
    score: int
    reasons: List[str]


def test_structured_output_is_a_forced_tool_whose_input_is_the_answer():
    rating = {"score": 1, "reasons": ["crushed box"]}
    schema_call = {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "Rating", "arguments": rating}},
    ]}
    with AnthropicScriptedServer([schema_call, schema_call]) as server:
        connection = _connection(server)
        try:
            alone = connection.chat([ChatMessage(content="rate")], model="claude-test", output_schema=OutputSchema(Rating))
            with_tools = connection.chat(
                [ChatMessage(content="rate")], tools=[NOTIFY], model="claude-test", output_schema=OutputSchema(Rating)
            )
        finally:
            connection.close()
    for reply in (alone, with_tools):
        assert json.loads(reply.content) == rating and reply.tool_calls == []
        assert reply.extra_args["stop_reason"] == "tool_use"
    schema_tool = {"name": "Rating", "description": server.requests[0]["tools"][0]["description"],
                   "input_schema": Rating.model_json_schema()}
    assert server.requests[0]["tools"] == [schema_tool]
    assert server.requests[0]["tool_choice"] == {"type": "tool", "name": "Rating"}
    assert server.requests[1]["tools"] == [NOTIFY_TOOL, schema_tool]
    assert server.requests[1]["tool_choice"] == {"type": "any"}


def test_structured_output_waits_for_the_other_tools_the_model_called():
    both = {"role": "assistant", "content": None, "tool_calls": [
        NOTIFY_CALL["tool_calls"][0],
        {"id": "toolu_1", "type": "function", "function": {"name": "Rating", "arguments": {"score": 1, "reasons": []}}},
    ]}
    with AnthropicScriptedServer([both]) as server:
        connection = _connection(server)
        try:
            reply = connection.chat([ChatMessage(content="rate")], tools=[NOTIFY], model="claude-test",
                                    output_schema=OutputSchema(Rating))
        finally:
            connection.close()
    # The notification must run: the reply asks for it, not for the answer.
    assert [c["function"]["name"] for c in reply.tool_calls] == ["notify_shipping_manager"]
    assert reply.tool_calls[0]["original_id"] == "toolu_0" and reply.content == ""


def test_structured_output_of_an_agent_on_the_local_runner():
    rating = {"score": 2, "reasons": ["late"]}
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "Rating", "arguments": rating}},
    ]}
    with AnthropicScriptedServer([reply]) as server:
        out = run_local(_review_agent(server.base_url, output_schema=Rating), [{"key": "B01", "value": REVIEW}])
    assert out == [{"B01": rating}]
    assert server.requests[0]["tool_choice"] == {"type": "any"}


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "message", "expected"), [
    (429, "Number of request tokens has exceeded your per-minute rate limit", ModelRateLimited),
    (529, "Overloaded", ModelOverloaded),
    (400, "prompt is too long: 208011 tokens > 200000 maximum", ModelContextTooLong),
    (401, "invalid x-api-key", ModelAuthenticationError),
    (404, "model: claude-nope", ModelBadRequest),
])
def test_http_errors_become_model_call_errors(status, message, expected):
    with AnthropicScriptedServer([ScriptedError(status, message), ScriptedError(status, message)]) as server:
        connection = _connection(server)
        try:
            with pytest.raises(expected) as sync_error:
                connection.chat([ChatMessage(content="hi")], model="claude-test")
            with pytest.raises(expected) as async_error:
                asyncio.run(connection.achat([ChatMessage(content="hi")], model="claude-test"))
        finally:
            connection.close()
    for raised in (sync_error.value, async_error.value):
        assert raised.status == status and raised.provider == "anthropic"
        assert str(raised) == f"anthropic HTTP {status}: {message}"  # the body's message, not the whole body
        assert isinstance(raised.__cause__, anthropic.APIStatusError)
        assert raised.__cause__.status_code == status
    assert len(server.requests) == 2  # max_retries=0: one request per call


def test_rate_limit_is_retried_by_the_sdk_first():
    limited = ScriptedError(429, "slow down", headers={"retry-after-ms": "10"})
    with AnthropicScriptedServer([limited, {"role": "assistant", "content": "ok"}]) as server:
        connection = _connection(server, max_retries=1)
        try:
            reply = connection.chat([ChatMessage(content="hi")], model="claude-test")
        finally:
            connection.close()
    assert reply.content == "ok" and len(server.requests) == 2


def test_no_server_is_model_unreachable():
    port = free_port()  # nobody listens there
    connection = AnthropicChatModelConnection(api_key="sk-test", base_url=f"http://127.0.0.1:{port}", max_retries=0)
    try:
        with pytest.raises(ModelUnreachable) as raised:
            connection.chat([ChatMessage(content="hi")], model="claude-test")
    finally:
        connection.close()
    assert isinstance(raised.value.__cause__, anthropic.APIConnectionError)
    assert raised.value.retryable


def test_a_tool_input_that_is_not_an_object_is_a_response_error():
    bad = {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "notify_shipping_manager", "arguments": "[1, 2]"}},
    ]}
    with AnthropicScriptedServer([bad]) as server:
        connection = _connection(server)
        try:
            with pytest.raises(ModelResponseError, match="notify_shipping_manager"):
                connection.chat([ChatMessage(content="hi")], tools=[NOTIFY], model="claude-test")
        finally:
            connection.close()


def test_api_key_comes_from_the_environment_or_the_call_fails_clearly(monkeypatch):
    with AnthropicScriptedServer([{"role": "assistant", "content": "ok"}]) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
        connection = AnthropicChatModelConnection(base_url=server.base_url)
        try:
            assert connection.chat([ChatMessage(content="hi")], model="claude-test").content == "ok"
        finally:
            connection.close()
    assert server.exchanges[0].headers["authorization"] == "Bearer sk-from-env"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ModelAuthenticationError, match="ANTHROPIC_API_KEY"):
        AnthropicChatModelConnection(base_url=server.base_url).chat([ChatMessage(content="hi")], model="claude-test")


def test_unknown_settings_are_refused_before_any_request():
    connection = AnthropicChatModelConnection(api_key="sk-test", base_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="'temprature'"):
        connection.chat([ChatMessage(content="hi")], model="claude-test", temprature=0.5)
    with pytest.raises(ValueError, match="model"):
        connection.chat([ChatMessage(content="hi")])
    connection.close()


def test_missing_sdk_names_the_extra(monkeypatch):
    real_import = importlib.import_module

    def without_anthropic(name: str, *args: Any) -> Any:
        if name == "anthropic":
            raise ImportError("No module named 'anthropic'")
        return real_import(name, *args)

    monkeypatch.setattr(sdk.importlib, "import_module", without_anthropic)
    connection = AnthropicChatModelConnection(api_key="sk-test")
    with pytest.raises(ImportError, match=r"pip install 'anthropic', or install this project with its 'anthropic' extra \(pip install -e '\.\[anthropic\]'"):
        connection.chat([ChatMessage(content="hi")], model="claude-test")


def test_the_scripted_server_refuses_what_the_reference_does_not_allow():
    """The server is what the other tests trust: it must refuse an unknown
    field, an answer to no tool call, and a tool call left unanswered."""
    orphan = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]
    unanswered = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": "well?"},
    ]
    server = AnthropicScriptedServer().start()
    client = anthropic.Anthropic(api_key="sk-test", base_url=server.base_url, max_retries=0)
    try:
        for messages, extra in ((orphan, {}), (unanswered, {}), ([{"role": "user", "content": "hi"}], {"bogus": 1})):
            with pytest.raises(anthropic.BadRequestError) as refused:
                client.messages.create(model="claude-test", max_tokens=8, messages=messages, extra_body=extra)
            assert refused.value.type == "invalid_request_error"
    finally:
        client.close()
        server.stop()
    assert len(server.violations) == 3
    assert "answers no tool_use" in server.violations[0]
    assert "without tool_result" in server.violations[1]
    assert "bogus" in server.violations[2]
