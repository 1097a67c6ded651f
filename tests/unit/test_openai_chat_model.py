"""The OpenAI chat model over the real ``openai`` SDK, against the scripted server."""
from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Dict, List

import openai
import pytest
from openai.types.chat import ChatCompletion
from pydantic import BaseModel


from flink_agents.api.chat_message import ChatMessage, MessageRole


from flink_agents.api.resource import ResourceDescriptor, ResourceName

from flink_agents.integrations.chat_models.openai.openai_chat_model import (
    OpenAIChatModelConnection,
    OpenAIChatModelSetup,
    from_openai_completion,
    split_reasoning,
    to_openai_messages,
    to_openai_tools,
)
from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_models.errors import (
    ModelAuthenticationError,
    ModelBadRequest,
    ModelContextTooLong,
    ModelOverloaded,
    ModelRateLimited,
    ModelServerError,
    ModelUnreachable,
)
from flink_agents.integrations.chat_models.chat_model_utils import to_openai_tool
from flink_agents.integrations.chat_models.openai.openai_utils import (
    DEFAULT_OPENAI_API_BASE_URL,
    api_key_or_placeholder,
    convert_from_openai_message,
    convert_to_openai_message,
    convert_to_openai_messages,
    resolve_openai_credentials,
)
from flink_agents.runtime.errors import ActionFailed
from tests.support.notify_tool import (  # noqa: F401 (clear_notified: an autouse fixture)
    NOTIFIED,
    NOTIFY,
    NOTIFY_RESULT,
    clear_notified,
)
from tests.support.provider_agent import ReviewAgent, run_local
from tests.support.scripted_http import ScriptedError
from tests.support.scripted_openai_server import OpenAIScriptedServer, openai_error_body

REVIEW = {"id": "B01", "review": "The box was crushed and the shoes arrived damaged."}
TOOL_CALL_REPLY = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{
        "id": "call_0",
        "type": "function",
        "function": {"name": "notify_shipping_manager", "arguments": json.dumps(REVIEW)},
    }],
}
ANSWER = '{"score": 1, "reasons": ["reports shipping damage"]}'


def openai_review_agent(base_url: str, max_retries: int = 2) -> ReviewAgent:
    """The shared review agent over an OpenAI connection to the test's server."""
    return ReviewAgent(
        "openai",
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=base_url, max_retries=max_retries,
            timeout_s=10.0,
        ),
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="openai", model="gpt-test",
            temperature=0.0, tools=["notify_shipping_manager"],
        ),
    )


def test_tool_call_loop_through_the_local_runner(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": ANSWER}])

    out = run_local(openai_review_agent(server.base_url), [{"key": "B01", "value": REVIEW}])

    assert out == [{"B01": {"answer": ANSWER}}]
    assert NOTIFIED == [REVIEW]
    assert len(server.requests) == 2
    first, second = server.requests
    assert first["model"] == "gpt-test" and first["temperature"] == 0.0
    assert first["messages"] == [{"role": "user", "content": json.dumps(REVIEW)}]
    assert first["tools"] == [{
        "type": "function",
        "function": {
            "name": "notify_shipping_manager",
            "description": "Tell the shipping manager about a damaged delivery.",
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The product id."},
                    "review": {"type": "string", "description": "The customer's review."},
                },
                "required": ["id", "review"],
            },
        },
    }]
    user, assistant, tool_message = second["messages"]
    assert user == first["messages"][0]
    (call,) = assistant["tool_calls"]
    assert call["function"] == {"name": "notify_shipping_manager", "arguments": json.dumps(REVIEW)}
    assert call["id"] != "call_0"  # the runtime's id, not the provider's
    assert tool_message == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": NOTIFY_RESULT,
    }
    assert second["tools"] == first["tools"]


def test_reused_provider_ids_and_concurrent_keys(scripted_chat_server):
    """The provider gives every call the id "call_0"; each turn still pairs
    its tool result with its own call, across concurrent keys."""
    server = scripted_chat_server

    def reply(request: dict, index: int) -> dict:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return {"role": "assistant", "content": f"done after {last['tool_call_id']}"}
        return {**TOOL_CALL_REPLY, "tool_calls": [{
            "id": "call_0",
            "type": "function",
            "function": {"name": "notify_shipping_manager", "arguments": last["content"]},
        }]}

    server.set_reply_fn(reply)
    records = [
        {"key": f"k{n % 3}", "value": {"id": f"B{n}", "review": f"box {n} was crushed"}}
        for n in range(9)
    ]
    out = run_local(openai_review_agent(server.base_url), records)

    assert len(out) == 9 and len(server.requests) == 18
    assert sorted(c["id"] for c in NOTIFIED) == sorted(f"B{n}" for n in range(9))
    call_ids = set()
    for request in server.requests:
        messages = request["messages"]
        if messages[-1]["role"] == "tool":
            assert messages[-1]["tool_call_id"] == messages[-2]["tool_calls"][0]["id"]
            call_ids.add(messages[-1]["tool_call_id"])
    assert len(call_ids) == 9


def test_provider_error_fails_the_run_with_a_classified_error(scripted_chat_server):
    # An empty script: the server answers 500.
    with pytest.raises(ActionFailed) as failed:
        run_local(openai_review_agent(scripted_chat_server.base_url, max_retries=0), [{"key": "B01", "value": REVIEW}])
    cause = failed.value.cause
    assert isinstance(cause, ModelServerError) and cause.retryable
    assert (cause.provider, cause.status) == ("openai", 500)
    assert "no reply for request #0" in str(cause)  # the message of the error body
    assert failed.value.action == "_chat_model_action"
    assert len(scripted_chat_server.requests) == 1


def test_bad_tool_arguments_come_back_as_the_text_the_model_sent(scripted_chat_server):
    # The model's to correct: the tool action answers it with an error
    # result (tests/engine/test_tool_results_and_calls.py), the reply is not refused.
    scripted_chat_server.replies.append({
        "role": "assistant",
        "tool_calls": [{
            "id": "call_0",
            "type": "function",
            "function": {"name": "notify_shipping_manager", "arguments": '{"id": "B01", '},
        }],
    })
    connection = OpenAIChatModelConnection(base_url=scripted_chat_server.base_url)
    try:
        reply = connection.chat([ChatMessage(content="hi")], model="gpt-test")
    finally:
        connection.close()
    assert reply.tool_calls[0]["function"] == {"name": "notify_shipping_manager", "arguments": '{"id": "B01", '}


def _completion(message: Dict[str, Any], usage: Dict[str, int] | None = None) -> ChatCompletion:
    return ChatCompletion.model_validate({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    })


def test_bad_arguments_in_a_completion_stay_the_models_text():
    for text in ('{"id": ', '["B01"]'):
        completion = _completion({"role": "assistant", "tool_calls": [{
            "id": "c", "type": "function", "function": {"name": "lookup", "arguments": text},
        }]})
        assert from_openai_completion(completion).tool_calls[0]["function"]["arguments"] == text


def test_messages_to_openai():
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content="be brief"),
        ChatMessage(role=MessageRole.USER, content="hi"),
        ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[{
            "id": "req-0-0",
            "type": "function",
            "function": {"name": "lookup", "arguments": {"q": "x", "n": 2}},
            "original_id": "call_0",
        }]),
        ChatMessage(role=MessageRole.TOOL, content="42", extra_args={"tool_call_id": "req-0-0", "external_id": "call_0"}),
        ChatMessage(role=MessageRole.ASSISTANT, content="it is 42"),
    ]
    assert to_openai_messages(messages) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "req-0-0",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "x", "n": 2}'},
        }]},
        {"role": "tool", "tool_call_id": "req-0-0", "content": "42"},
        {"role": "assistant", "content": "it is 42"},
    ]
    with pytest.raises(ValueError, match="tool_call_id"):
        to_openai_messages([ChatMessage(role=MessageRole.TOOL, content="42")])


def test_tools_to_openai():
    tool_ = NOTIFY
    (converted,) = to_openai_tools([tool_])
    assert converted == {
        "type": "function",
        "function": {
            "name": "notify_shipping_manager",
            "description": "Tell the shipping manager about a damaged delivery.",
            "parameters": tool_.metadata.get_parameters_dict(),
        },
    }
    assert converted["function"]["parameters"]["required"] == ["id", "review"]


def test_completion_to_message():
    reply = from_openai_completion(_completion(
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}},
            {"id": "call_8", "type": "function", "function": {"name": "ping", "arguments": ""}},
        ]},
        usage={"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    ))
    assert reply.role == MessageRole.ASSISTANT and reply.content == ""
    assert reply.tool_calls == [
        {"id": "call_7", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}}, "original_id": "call_7"},
        {"id": "call_8", "type": "function", "function": {"name": "ping", "arguments": {}}, "original_id": "call_8"},
    ]
    assert reply.extra_args == {
        "usage": {"prompt_tokens": 11, "completion_tokens": 5}, "model_name": "gpt-test", "stop_reason": "stop",
    }

    text = from_openai_completion(_completion({"role": "assistant", "content": "hello"}), model_name="my-gpt")
    assert (text.content, text.tool_calls) == ("hello", [])
    assert text.extra_args == {"model_name": "my-gpt", "stop_reason": "stop"}


def test_setup_model_kwargs():
    assert OpenAIChatModelSetup(connection="c", model="m").model_kwargs == {"model": "m"}
    setup = OpenAIChatModelSetup(connection="c", model="m", temperature=0.2, max_tokens=64)
    assert setup.model_kwargs == {"model": "m", "temperature": 0.2, "max_tokens": 64}
    # 0.3.1's fields: top_logprobs only with logprobs, additional_kwargs last.
    assert OpenAIChatModelSetup(connection="c", model="m", top_logprobs=3).model_kwargs == {"model": "m"}
    setup = OpenAIChatModelSetup(
        connection="c", model="m", logprobs=True, top_logprobs=3, strict=True, reasoning_effort="low",
        additional_kwargs={"seed": 7, "max_tokens": 9},
    )
    assert setup.model_kwargs == {
        "model": "m", "logprobs": True, "top_logprobs": 3, "reasoning_effort": "low", "strict": True,
        "seed": 7, "max_tokens": 9,
    }


def test_split_reasoning():
    assert split_reasoning("<think>hmm\n</think>\n42") == ("42", "hmm")
    assert split_reasoning("a<think>x</think>b<think>y</think>") == ("ab", "x\n\ny")
    assert split_reasoning("x, then y</think> 42") == ("42", "x, then y")
    assert split_reasoning("42") == ("42", "")


def _setup_over(connection: OpenAIChatModelConnection, **fields: Any) -> OpenAIChatModelSetup:
    setup = OpenAIChatModelSetup(connection="openai", model="gpt-test", **fields)
    setup.get_resource = lambda name, type: connection
    return setup


def test_setup_extracts_reasoning_and_sends_settings(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend([{"content": "<think>short review</think>Positive."}] * 2)
    connection = OpenAIChatModelConnection(base_url=server.base_url)
    try:
        plain = _setup_over(connection).chat([ChatMessage(content="great")])
        reply = _setup_over(connection, extract_reasoning=True, max_tokens=32).chat([ChatMessage(content="great")])
    finally:
        connection.close()
    assert plain.content == "<think>short review</think>Positive."
    assert reply.content == "Positive."
    assert reply.extra_args["reasoning"] == "short review"
    assert "max_tokens" not in server.requests[0] and server.requests[1]["max_tokens"] == 32


def test_api_key_falls_back_to_env_then_placeholder(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    connection = OpenAIChatModelConnection(base_url="http://127.0.0.1:9/v1")
    assert connection._sync().api_key == "unused"
    connection.close()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert connection._sync().api_key == "sk-env"
    connection.close()
    explicit = OpenAIChatModelConnection(api_key="sk-given", base_url="http://127.0.0.1:9/v1")
    assert explicit._sync().api_key == "sk-given"
    assert "sk-given" not in repr(explicit)
    explicit.close()


def test_no_key_for_openais_own_api_is_refused_before_any_request(monkeypatch):
    """A placeholder key suits a server of the user's own; OpenAI's API
    refuses it (a 401 online, an unreachable server offline, neither naming
    the missing key): the call fails first, naming where a key comes from.
    No SDK client is built here, so no request can leave this machine."""
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(openai, "api_key", None)
    built: List[Any] = []
    for client_class in (openai.OpenAI, openai.AsyncOpenAI):
        monkeypatch.setattr(client_class, "__init__", lambda *a, **k: built.append(k) or 1 / 0)
    connection = OpenAIChatModelConnection()
    try:
        with pytest.raises(ModelAuthenticationError,
                           match=f"no API key for {re.escape(DEFAULT_OPENAI_API_BASE_URL)}.*OPENAI_API_KEY"):
            _setup_over(connection).chat([ChatMessage(content="great")])
    finally:
        connection.close()
    assert built == []
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert api_key_or_placeholder(None, None, "OpenAIChatModelConnection") == "sk-env"


def test_missing_model_is_a_clear_error():
    connection = OpenAIChatModelConnection(base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="model name"):
        connection.chat([ChatMessage(content="hi")])


def test_async_clients_follow_the_event_loop(scripted_chat_server):
    """One async client per loop: a connection survives successive
    ``asyncio.run`` calls (as the local runner makes), and every client gets
    closed on its own loop."""
    server = scripted_chat_server
    server.set_reply_fn(lambda request, index: {"content": f"reply {index}"})
    connection = OpenAIChatModelConnection(base_url=server.base_url)

    async def many(n: int) -> List[str]:
        replies = await asyncio.gather(
            *(connection.achat([ChatMessage(content="hi")], model="m") for _ in range(n))
        )
        assert connection._pool().async_count() == 1  # one client for this loop
        return [r.content for r in replies]

    assert len(asyncio.run(many(64))) == 64
    assert connection._pool().async_count() == 0  # closed by asyncio.run's shutdown
    assert len(asyncio.run(many(3))) == 3

    async def close_inside() -> None:
        await connection.achat([ChatMessage(content="hi")], model="m")
        connection.close()  # as the local runner does: closed at the loop's end

    asyncio.run(close_inside())
    assert connection._pool().async_count() == 0

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(many(2))
        connection.close()  # the loop is idle: closed right away
        assert connection._pool().async_count() == 0
    finally:
        loop.close()
    assert connection.chat([ChatMessage(content="hi")], model="m").content.startswith("reply")
    connection.close()
    assert len(server.requests) == 64 + 3 + 1 + 2 + 1


# -- structured output, error classes, 0.3.1 names (strict OpenAI dialect) ------------------

class Verdict(BaseModel):
    score: int
    damaged: bool


def _strict_connection(server: OpenAIScriptedServer, **fields: Any) -> OpenAIChatModelConnection:
    return OpenAIChatModelConnection(api_key="sk-test", base_url=server.base_url, max_retries=0, **fields)


def test_structured_output_asks_for_a_json_schema_response_format():
    answer = '{"score": 2, "damaged": true}'
    with OpenAIScriptedServer([{"content": answer}] * 3) as server:
        connection = _strict_connection(server)
        try:
            reply = _setup_over(connection).chat([ChatMessage(content="crushed box")], output_schema=Verdict)
            strict_setup = _setup_over(connection, strict=True)
            strict_reply = strict_setup.chat([ChatMessage(content="crushed box")], output_schema=Verdict)
            tools_reply = connection.chat(
                [ChatMessage(content="crushed box")], tools=[NOTIFY], model="gpt-test",
                output_schema=OutputSchema(output_schema=Verdict), strict=True,
            )
        finally:
            connection.close()
    assert reply.content == strict_reply.content == tools_reply.content == answer
    plain, strict, with_tools = server.requests
    assert plain["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "schema": Verdict.model_json_schema(), "strict": False},
    }
    # The schema is asked natively: no instruction message is added.
    assert [m["role"] for m in plain["messages"]] == ["user"]
    assert strict["response_format"]["json_schema"]["strict"] is True
    # Strict mode takes closed objects with every property required, at every depth.
    strict_schema = strict["response_format"]["json_schema"]["schema"]
    assert strict_schema["additionalProperties"] is False
    assert strict_schema["required"] == list(Verdict.model_json_schema()["properties"])
    assert all("default" not in p for p in strict_schema["properties"].values())
    assert "strict" not in strict  # a setting of ours, not a body field (the server checks)
    (function,) = [t["function"] for t in with_tools["tools"]]
    assert function["strict"] is True and function["parameters"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ScriptedError(401, "Incorrect API key provided"), ModelAuthenticationError),
        (ScriptedError(429, "Rate limit reached for requests"), ModelRateLimited),
        (ScriptedError(404, "The model `gpt-nope` does not exist"), ModelBadRequest),
        (ScriptedError(503, "The engine is currently overloaded"), ModelOverloaded),
        (ScriptedError(500, "The server had an error"), ModelServerError),
        # Classified by OpenAI's error code, whatever the message says.
        (ScriptedError(400, "Your input is over the limit of gpt-test", body=openai_error_body(
            400, "Your input is over the limit of gpt-test", code="context_length_exceeded", param="messages",
        )), ModelContextTooLong),
    ],
    ids=["401", "429", "404", "503", "500", "context_length_exceeded"],
)
def test_http_errors_become_model_call_errors(error: ScriptedError, expected: type):
    with OpenAIScriptedServer([error, error]) as server:
        connection = _strict_connection(server)
        try:
            with pytest.raises(expected) as raised:
                connection.chat([ChatMessage(content="hi")], model="gpt-test")
            with pytest.raises(expected) as raised_async:
                asyncio.run(connection.achat([ChatMessage(content="hi")], model="gpt-test"))
        finally:
            connection.close()
    for exc in (raised.value, raised_async.value):
        assert (exc.provider, exc.status) == ("openai", error.status)
        assert error.message in str(exc)  # the body's message, not the SDK's rendering of it
        assert isinstance(exc.__cause__, openai.APIStatusError)
        assert exc.__cause__.status_code == error.status


def test_no_response_is_model_unreachable():
    with OpenAIScriptedServer() as server:
        closed_url = server.base_url
    connection = OpenAIChatModelConnection(api_key="sk-test", base_url=closed_url, max_retries=0)
    with pytest.raises(ModelUnreachable) as refused:
        connection.chat([ChatMessage(content="hi")], model="gpt-test")
    assert refused.value.retryable and refused.value.status is None
    assert isinstance(refused.value.__cause__, openai.APIConnectionError)

    with OpenAIScriptedServer([{"content": "late"}], latency_s=1.0) as slow:
        connection = _strict_connection(slow, timeout=0.2)
        try:
            with pytest.raises(ModelUnreachable) as timed_out:
                asyncio.run(connection.achat([ChatMessage(content="hi")], model="gpt-test"))
        finally:
            connection.close()
    assert isinstance(timed_out.value.__cause__, openai.APITimeoutError)


def test_031_field_names_reach_the_server():
    with OpenAIScriptedServer([{"content": "a"}, {"content": "b"}]) as server:
        connection = OpenAIChatModelConnection(
            api_key="sk-test", api_base_url=server.base_url, timeout=7.5,
            default_headers={"X-Team": "reviews"}, reuse_client=False,
        )
        assert (connection.base_url, connection.timeout_s) == (server.base_url, 7.5)
        assert (connection.api_base_url, connection.timeout) == (server.base_url, 7.5)
        assert connection.chat([ChatMessage(content="hi")], model="gpt-test").content == "a"
        assert connection.client is connection.client  # `client` opens one, shared
        connection.close()
        assert asyncio.run(connection.achat([ChatMessage(content="hi")], model="gpt-test")).content == "b"
        assert connection._pool().async_count() == 0  # reuse_client=False: no per-loop client was kept
    assert [e.headers.get("x-team") for e in server.exchanges] == ["reviews", "reviews"]
    # Both spellings of one setting may agree; they may not differ.
    assert OpenAIChatModelConnection(base_url="http://h/v1", api_base_url="http://h/v1").base_url == "http://h/v1"
    with pytest.raises(ValueError, match="timeout_s=5.0 and timeout=6.0"):
        OpenAIChatModelConnection(timeout_s=5.0, timeout=6.0)
    with pytest.raises(ValueError, match="base_url=.* and api_base_url="):
        OpenAIChatModelConnection(base_url="http://a/v1", api_base_url="http://b/v1")


def test_031_helpers(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # No base URL anywhere: the SDK's public default (a constant; nothing is called).
    assert resolve_openai_credentials() == ("", DEFAULT_OPENAI_API_BASE_URL)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_API_BASE_URL", "http://env/v1")
    assert resolve_openai_credentials() == ("sk-env", "http://env/v1")
    assert resolve_openai_credentials("sk-arg", "http://arg/v1") == ("sk-arg", "http://arg/v1")

    call = {"id": "req-1", "type": "function", "function": {"name": "lookup", "arguments": {"q": 1}},
            "original_id": "call_1"}
    assistant = ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])
    assert convert_to_openai_message(assistant)["tool_calls"][0]["id"] == "req-1"
    assert convert_to_openai_messages([assistant]) == to_openai_messages([assistant])

    completion = _completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 2}'}}]})
    reply = convert_from_openai_message(completion.choices[0].message, {"model_name": "m"})
    assert reply.tool_calls[0]["function"]["arguments"] == {"q": 2} and reply.extra_args == {"model_name": "m"}

    long_tool = NOTIFY.metadata.model_copy(update={"description": "x" * 1025})
    with pytest.raises(ValueError, match="'notify_shipping_manager'.*1025 characters"):
        to_openai_tool(metadata=long_tool)
    assert to_openai_tool(metadata=long_tool, skip_length_check=True)["function"]["description"] == "x" * 1025


def test_strict_schemas_close_every_object_and_require_every_property() -> None:
    """OpenAI's strict mode refuses a schema with an open object or an
    optional property at any depth; fields named like keywords stay."""
    from typing import List, Optional

    from flink_agents.integrations.chat_models.openai.openai_utils import strict_json_schema

    class Part(BaseModel):
        default: int = 3  # a field named like the keyword strict mode drops
        note: Optional[str] = None

    class Order(BaseModel):
        label: str
        parts: List[Part] = []
        properties: Optional[Part] = None

    strict = strict_json_schema(Order.model_json_schema())
    part = strict["$defs"]["Part"]
    assert (strict["additionalProperties"], strict["required"]) == (False, ["label", "parts", "properties"])
    assert (part["additionalProperties"], part["required"]) == (False, ["default", "note"])
    assert "default" in part["properties"] and "default" not in part["properties"]["default"]
    assert strict["properties"]["parts"]["items"] == {"$ref": "#/$defs/Part"}


def test_cached_and_reasoning_tokens_reach_the_reply_when_reported(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend([
        {"content": "Positive.", "usage_extra": {"prompt_tokens_details": {"cached_tokens": 2},
                                                  "completion_tokens_details": {"reasoning_tokens": 1}}},
        {"content": "Positive."},
    ])
    connection = OpenAIChatModelConnection(base_url=server.base_url)
    try:
        detailed = _setup_over(connection).chat([ChatMessage(content="great shoes")])
        plain = _setup_over(connection).chat([ChatMessage(content="great shoes")])
    finally:
        connection.close()
    assert detailed.extra_args["usage"] == {"prompt_tokens": 2, "completion_tokens": 1, "cached_tokens": 2,
                                            "reasoning_tokens": 1}
    assert plain.extra_args["usage"] == {"prompt_tokens": 2, "completion_tokens": 1}  # not reported: absent
    assert detailed.extra_args["model_name"] == server.requests[0]["model"]
