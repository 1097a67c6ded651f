"""The Tongyi (DashScope) chat and embedding models over the real ``dashscope``
SDK, against the scripted DashScope server."""
from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import List

import aiohttp
import dashscope
import pytest
import requests
from pydantic import BaseModel


from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.errors import (
    ModelAuthenticationError,
    ModelBadRequest,
    ModelContextTooLong,
    ModelRateLimited,
    ModelServerError,
    ModelUnreachable,
)


from flink_agents.api.resource import ResourceDescriptor, ResourceName

from flink_agents.api.tools.tool import ToolMetadata
from flink_agents.integrations.chat_models.tongyi_chat_model import (
    TongyiChatModelConnection,
    TongyiChatModelSetup,
    to_dashscope_messages,
    to_dashscope_tool,
)
from flink_agents.integrations.embedding_models.tongyi_embedding_model import (
    TongyiEmbeddingModelConnection,
    TongyiEmbeddingModelSetup,
)
from tests.support.notify_tool import (  # noqa: F401 (clear_notified: an autouse fixture)
    NOTIFIED,
    NOTIFY_RESULT,
    clear_notified,
)
from tests.support.provider_agent import ReviewAgent, run_local
from tests.support.ports import free_port
from tests.support.scripted_dashscope_server import EMBEDDING_PATH, GENERATION_PATH, DashScopeScriptedServer
from tests.support.scripted_http import ScriptedError

KEY = "sk-scripted"
REVIEW = {"id": "B01", "review": "The box was crushed and the shoes arrived damaged."}
ANSWER = '{"score": 1, "reasons": ["reports shipping damage"]}'
HI = [ChatMessage(role=MessageRole.USER, content="hi")]


@pytest.fixture(autouse=True)
def _no_key_in_env(monkeypatch):
    """Keys come from the test, never from the machine."""
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)


def _review_agent(base_url: str) -> ReviewAgent:
    """The shared review agent over a Tongyi connection to the test's server."""
    return ReviewAgent(
        "tongyi",
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.TONGYI_CONNECTION, api_key=KEY, base_url=base_url, request_timeout=10.0
        ),
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.TONGYI_SETUP, connection="tongyi", model="qwen-max", temperature=0.1,
            tools=["notify_shipping_manager"],
        ),
    )


def _closed_port_url() -> str:
    port = free_port()
    return f"http://127.0.0.1:{port}/api/v1"


# -- chat ------------------------------------------------------------------------------


def test_plain_answer_usage_and_request(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", KEY)  # api_key=None reads it
    with DashScopeScriptedServer([{"role": "assistant", "content": "Hello from Qwen"}]) as server:
        connection = TongyiChatModelConnection(base_url=server.base_url)
        messages = [ChatMessage(role=MessageRole.SYSTEM, content="be brief"), *HI]
        reply = connection.chat(messages, model="qwen-turbo", temperature=0.3, max_tokens=50)

    assert reply.role == MessageRole.ASSISTANT and reply.content == "Hello from Qwen"
    assert reply.tool_calls == []
    sent_usage = server.sent[0]["usage"]
    assert reply.extra_args == {
        "model_name": "qwen-turbo",
        "stop_reason": "stop",
        "usage": {"prompt_tokens": sent_usage["input_tokens"], "completion_tokens": sent_usage["output_tokens"]},
    }
    (exchange,) = server.exchanges
    assert exchange.path == GENERATION_PATH
    assert exchange.headers["authorization"] == f"Bearer {KEY}"
    assert exchange.json == {
        "model": "qwen-turbo",
        "input": {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]},
        "parameters": {"result_format": "message", "temperature": 0.3, "max_tokens": 50},
    }


def test_cached_and_reasoning_tokens_when_dashscope_reports_them(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", KEY)
    reply = {"role": "assistant", "content": "Hello from Qwen",
             "usage_extra": {"prompt_tokens_details": {"cached_tokens": 1},
                             "output_tokens_details": {"reasoning_tokens": 2}}}
    with DashScopeScriptedServer([reply]) as server:
        connection = TongyiChatModelConnection(base_url=server.base_url)
        answer = connection.chat(HI, model="qwen-plus")
    sent_usage = server.sent[0]["usage"]
    assert answer.extra_args["usage"] == {
        "prompt_tokens": sent_usage["input_tokens"], "completion_tokens": sent_usage["output_tokens"],
        "cached_tokens": 1, "reasoning_tokens": 2,
    }
    assert answer.extra_args["model_name"] == "qwen-plus"


def test_tool_call_loop_through_the_local_runner():
    tool_call = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_abc", "type": "function",
        "function": {"name": "notify_shipping_manager", "arguments": json.dumps(REVIEW)},
    }]}
    with DashScopeScriptedServer([tool_call, {"role": "assistant", "content": ANSWER}]) as server:
        out = run_local(_review_agent(server.base_url), [{"key": "B01", "value": REVIEW}])

    assert out == [{"B01": {"answer": ANSWER}}]
    assert NOTIFIED == [REVIEW]
    first, second = server.requests
    assert first["model"] == "qwen-max"
    assert first["parameters"]["temperature"] == 0.1
    assert first["parameters"]["tools"] == [{
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
    user, assistant, tool_message = second["input"]["messages"]
    assert user == {"role": "user", "content": json.dumps(REVIEW)}
    (call,) = assistant["tool_calls"]
    assert call["function"] == {"name": "notify_shipping_manager", "arguments": json.dumps(REVIEW)}
    assert call["id"] != "call_abc"  # the runtime's id, not the provider's
    assert tool_message == {"role": "tool", "content": NOTIFY_RESULT, "tool_call_id": call["id"]}
    assert second["parameters"]["tools"] == first["parameters"]["tools"]


class Verdict(BaseModel):
    score: int
    reasons: List[str]


@pytest.mark.parametrize("system", [None, "You review deliveries."])
def test_structured_output_asks_for_json_mode_with_the_schema(system):
    schema = OutputSchema(Verdict)
    messages = ([ChatMessage(role=MessageRole.SYSTEM, content=system)] if system else []) + HI
    with DashScopeScriptedServer([{"content": ANSWER}]) as server:  # rejects json_object without "json"
        connection = TongyiChatModelConnection(api_key=KEY, base_url=server.base_url)
        reply = connection.chat(messages, model="qwen-plus", output_schema=schema)

    assert schema.parse(reply.content) == Verdict(score=1, reasons=["reports shipping damage"])
    (request,) = server.requests
    assert request["parameters"]["response_format"] == {"type": "json_object"}
    assert "output_schema" not in request["parameters"]
    first, user = request["input"]["messages"]
    assert user == {"role": "user", "content": "hi"}
    assert first["role"] == "system"
    if system:
        assert first["content"].startswith(system + "\n\n")
    assert json.dumps(Verdict.model_json_schema(), sort_keys=True) in first["content"]
    assert TongyiChatModelConnection.supports_output_schema is True


def test_reasoning_is_extracted_only_when_asked():
    thinking = {"content": "42", "reasoning_content": "6 times 7"}
    with DashScopeScriptedServer([thinking, thinking]) as server:
        connection = TongyiChatModelConnection(api_key=KEY, base_url=server.base_url)
        kept = connection.chat(HI, extract_reasoning=True)
        dropped = connection.chat(HI)
    assert kept.content == "42" and kept.extra_args["reasoning"] == "6 times 7"
    assert "reasoning" not in dropped.extra_args
    assert all("extract_reasoning" not in r["parameters"] for r in server.requests)


def test_setup_sends_0_3_1_fields_and_additional_kwargs():
    setup = TongyiChatModelSetup(
        connection="tongyi", temperature=0.2, extract_reasoning=True, additional_kwargs={"top_p": 0.8}
    )
    assert setup.model_kwargs == {"model": "qwen-plus", "temperature": 0.2, "extract_reasoning": True, "top_p": 0.8}
    with pytest.raises(ValueError):
        TongyiChatModelSetup(connection="tongyi", temperature=2.5)


def test_achat_uses_a_session_per_event_loop():
    with DashScopeScriptedServer() as server:
        server.set_reply_fn(lambda request, index: {"content": f"reply {index}"})
        connection = TongyiChatModelConnection(api_key=KEY, base_url=server.base_url)

        async def ask(n: int) -> List[str]:
            replies = await asyncio.gather(*(connection.achat(HI) for _ in range(n)))
            assert len(connection._async_sessions()) == 1
            return sorted(r.content for r in replies)

        # Two loops in a row, as the local runner's executes: a session kept
        # from the first loop would fail on the second.
        assert len(asyncio.run(ask(4))) == 4
        assert len(connection._async_sessions()) == 0  # closed at the loop's shutdown
        assert asyncio.run(ask(2)) == ["reply 4", "reply 5"]
        connection.close()
    assert len(server.requests) == 6


def _dashscope_error(status: int, code: str, message: str) -> ScriptedError:
    return ScriptedError(status, body={"request_id": "req-1", "code": code, "message": message})


ERRORS = [
    (_dashscope_error(429, "Throttling.RateQuota", "Requests rate limit exceeded"), ModelRateLimited),
    (_dashscope_error(400, "InvalidParameter", "Range of input length should be [1, 30720]"), ModelContextTooLong),
    (_dashscope_error(400, "InvalidParameter", "The tool call is not supported."), ModelBadRequest),
    (_dashscope_error(401, "InvalidApiKey", "Invalid API-key provided."), ModelAuthenticationError),
    (_dashscope_error(500, "InternalError", "An internal error has occured"), ModelServerError),
]


@pytest.mark.parametrize("use_async", [False, True], ids=["chat", "achat"])
@pytest.mark.parametrize("error, expected", ERRORS, ids=[e[1].__name__ + str(i) for i, e in enumerate(ERRORS)])
def test_error_responses_become_model_call_errors(error, expected, use_async):
    with DashScopeScriptedServer([error]) as server:
        connection = TongyiChatModelConnection(api_key=KEY, base_url=server.base_url)
        with pytest.raises(expected) as raised:
            if use_async:
                asyncio.run(connection.achat(HI))
            else:
                connection.chat(HI)
    assert type(raised.value) is expected
    assert raised.value.status == error.status and raised.value.provider == "tongyi"
    assert f"{error.body['code']}: {error.body['message']}" in str(raised.value)
    assert len(server.requests) == 1  # no retry inside the connection


def test_unreachable_server_is_model_unreachable_from_the_sdk_error():
    connection = TongyiChatModelConnection(api_key=KEY, base_url=_closed_port_url(), request_timeout=5)
    with pytest.raises(ModelUnreachable) as sync_raised:
        connection.chat(HI)
    assert isinstance(sync_raised.value.__cause__, requests.ConnectionError)
    with pytest.raises(ModelUnreachable) as async_raised:
        asyncio.run(connection.achat(HI))
    assert isinstance(async_raised.value.__cause__, aiohttp.ClientError)


def test_request_timeout_bounds_each_call():
    with DashScopeScriptedServer([{"content": "late"}, {"content": "late"}], latency_s=1.0) as server:
        connection = TongyiChatModelConnection(api_key=KEY, base_url=server.base_url, request_timeout=0.2)
        with pytest.raises(ModelUnreachable) as sync_raised:
            connection.chat(HI)
        assert isinstance(sync_raised.value.__cause__, requests.Timeout)
        with pytest.raises(ModelUnreachable):
            asyncio.run(connection.achat(HI))
        # Let the server finish its late answers to the closed connections
        # while pytest still captures what its threads print.
        deadline = time.monotonic() + 5
        while len(server.spans) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
    assert len(server.requests) == 2  # a timeout is not retried by the SDK
    assert all("request_timeout" not in r["parameters"] for r in server.requests)


def test_missing_key_fails_before_any_request():
    with DashScopeScriptedServer() as server:
        connection = TongyiChatModelConnection(base_url=server.base_url)
        with pytest.raises(ModelAuthenticationError, match="DASHSCOPE_API_KEY"):
            connection.chat(HI)
    assert server.requests == []


def test_bad_tool_arguments_come_back_as_the_text_the_model_sent():
    bad = {"tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": '{"id": '}}]}
    with DashScopeScriptedServer([bad]) as server:
        connection = TongyiChatModelConnection(api_key=KEY, base_url=server.base_url)
        reply = connection.chat(HI)
    assert reply.tool_calls[0]["function"] == {"name": "lookup", "arguments": '{"id": '}


def test_each_connection_keeps_its_own_base_url():
    default_base = dashscope.base_http_api_url
    with DashScopeScriptedServer([{"content": "from a"}]) as a, DashScopeScriptedServer([{"content": "from b"}]) as b:
        to_a = TongyiChatModelConnection(api_key=KEY, base_url=a.base_url)
        to_b = TongyiChatModelConnection(api_key=KEY, base_url=b.base_url)
        assert to_b.chat(HI).content == "from b"
        assert to_a.chat(HI).content == "from a"
    assert dashscope.base_http_api_url == default_base


def test_tool_description_over_dashscope_limit_is_refused():
    metadata = ToolMetadata(name="lookup", description="x" * 1025, args_schema={"type": "object", "properties": {}})
    with pytest.raises(ValueError, match="'lookup'.*1025"):
        to_dashscope_tool(metadata)
    assert to_dashscope_tool(metadata, skip_length_check=True)["function"]["name"] == "lookup"


def test_messages_to_dashscope_put_one_system_message_first():
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content="be brief"),
        ChatMessage(role=MessageRole.USER, content="hi"),
        ChatMessage(role=MessageRole.SYSTEM, content="skills: none"),
        ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[{
            "id": "req-0-0", "type": "function",
            "function": {"name": "lookup", "arguments": {"q": "x", "n": 2}}, "original_id": "call_0",
        }]),
        ChatMessage(role=MessageRole.TOOL, content="42", extra_args={"tool_call_id": "req-0-0"}),
    ]
    assert to_dashscope_messages(messages) == [
        {"role": "system", "content": "be brief\n\nskills: none"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "req-0-0", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x", "n": 2}'},
        }]},
        {"role": "tool", "content": "42", "tool_call_id": "req-0-0"},
    ]
    with pytest.raises(ValueError, match="tool_call_id"):
        to_dashscope_messages([ChatMessage(role=MessageRole.TOOL, content="42")])


def test_scripted_server_flags_requests_the_reference_refuses():
    """The fixture can fail: a late system message, an unanswered tool
    result, json_object without "json", no key, an unknown parameter."""
    server = DashScopeScriptedServer([{"content": "never sent"}])
    with pytest.raises(AssertionError, match="requests break the provider's API reference") as raised:
        with server:
            response = requests.post(server.base_url + "/services/aigc/text-generation/generation", json={
                "model": "qwen-plus",
                "input": {"messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "system", "content": "late"},
                    {"role": "tool", "content": "42", "tool_call_id": "nobody"},
                ]},
                "parameters": {"result_format": "message", "response_format": {"type": "json_object"}, "colour": 1},
            }, timeout=5)
            assert response.status_code == 400
            assert set(response.json()) == {"request_id", "code", "message"}
    text = str(raised.value)
    for problem in ("Authorization", "must be the first message", "answers no earlier assistant tool call",
                    "contain the word 'json'", "unknown parameter 'colour'"):
        assert problem in text


# -- embeddings ---------------------------------------------------------------------------


def _vector_per_text(request: dict, index: int) -> dict:
    """A vector naming its text (its length) and the request it came in."""
    return {"embeddings": [[float(len(t)), float(index)] for t in request["input"]["texts"]]}


def test_embed_one_text_and_setup_settings():
    with DashScopeScriptedServer() as server:
        server.set_reply_fn(_vector_per_text)
        connection = TongyiEmbeddingModelConnection(api_key=KEY, base_url=server.base_url)
        setup = TongyiEmbeddingModelSetup(connection=connection, text_type="query", dimension=64)
        vector = setup.embed("four")
    assert vector == [4.0, 0.0]
    (exchange,) = server.exchanges
    assert exchange.path == EMBEDDING_PATH and exchange.headers["authorization"] == f"Bearer {KEY}"
    assert exchange.json == {
        "model": "text-embedding-v4",
        "input": {"texts": ["four"]},
        "parameters": {"text_type": "query", "dimension": 64},
    }


@pytest.mark.parametrize("model, sizes", [("text-embedding-v4", [10, 10, 3]), ("text-embedding-v2", [23])])
def test_embed_batches_split_at_the_model_limit_in_input_order(model, sizes):
    texts = ["w" * n for n in range(1, 24)]
    with DashScopeScriptedServer() as server:  # rejects a batch over the model's limit
        server.set_reply_fn(_vector_per_text)
        connection = TongyiEmbeddingModelConnection(api_key=KEY, base_url=server.base_url)
        vectors = connection.embed(texts, model=model)
    assert [len(r["input"]["texts"]) for r in server.requests] == sizes
    assert [v[0] for v in vectors] == [float(n) for n in range(1, 24)]  # despite reversed replies
    assert [int(v[1]) for v in vectors] == [i for i, size in enumerate(sizes) for _ in range(size)]


def test_aembed_and_empty_batch():
    with DashScopeScriptedServer() as server:
        server.set_reply_fn(_vector_per_text)
        connection = TongyiEmbeddingModelConnection(api_key=KEY, base_url=server.base_url)
        assert asyncio.run(connection.aembed(["a", "bb"])) == [[1.0, 0.0], [2.0, 0.0]]
        assert asyncio.run(connection.aembed("ccc")) == [3.0, 1.0]
        assert connection.embed([]) == []
    assert len(server.requests) == 2


def test_embed_errors():
    with DashScopeScriptedServer([_dashscope_error(429, "Throttling", "Requests rate limit exceeded")]) as server:
        connection = TongyiEmbeddingModelConnection(api_key=KEY, base_url=server.base_url)
        with pytest.raises(ModelRateLimited, match="Throttling"):
            connection.embed(["a"])
        with pytest.raises(TypeError, match="#1"):
            connection.embed(["a", 2])  # type: ignore[list-item]
    assert len(server.requests) == 1
    unreachable = TongyiEmbeddingModelConnection(api_key=KEY, base_url=_closed_port_url())
    with pytest.raises(ModelUnreachable):
        unreachable.embed("a")


def test_missing_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "dashscope", None)  # import dashscope now fails
    chat = TongyiChatModelConnection(api_key=KEY, base_url="http://127.0.0.1:9/api/v1")
    with pytest.raises(ImportError, match=r"pip install -e '\.\[tongyi\]'"):
        chat.chat(HI)
    embedding = TongyiEmbeddingModelConnection(api_key=KEY, base_url="http://127.0.0.1:9/api/v1")
    with pytest.raises(ImportError, match=r"pip install -e '\.\[tongyi\]'"):
        embedding.embed("a")
