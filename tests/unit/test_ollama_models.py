"""The Ollama chat and embedding models over the real ``ollama`` SDK (sync
and async clients), against the scripted Ollama server."""
from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Dict, List

import httpx
import ollama
import pytest
from pydantic import BaseModel


from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.errors import (
    ModelBadRequest,
    ModelContextTooLong,
    ModelOverloaded,
    ModelRateLimited,
    ModelResponseError,
    ModelServerError,
    ModelUnreachable,
)


from flink_agents.api.resource import ResourceDescriptor, ResourceName

from flink_agents.integrations.chat_models.ollama_chat_model import (
    OllamaChatModelConnection,
    OllamaChatModelSetup,
    to_ollama_messages,
)
from flink_agents.integrations.embedding_models.local.ollama_embedding_model import (
    OllamaEmbeddingModelConnection,
    OllamaEmbeddingModelSetup,
)
from tests.support.notify_tool import (  # noqa: F401 (clear_notified: an autouse fixture)
    NOTIFIED,
    NOTIFY,
    NOTIFY_RESULT,
    clear_notified,
)
from tests.support.provider_agent import ReviewAgent, run_local
from tests.support.ports import free_port
from tests.support.scripted_http import ScriptedError
from tests.support.scripted_ollama_server import CHAT_PATH, EMBED_PATH, OllamaScriptedServer

REVIEW = {"id": "B01", "review": "The box was crushed and the shoes arrived damaged."}
ANSWER = '{"score": 1, "reasons": ["reports shipping damage"]}'
HI = [ChatMessage(role=MessageRole.USER, content="hi")]
NOTIFY_TOOL_SPEC = {
    "type": "function",
    "function": {
        "name": "notify_shipping_manager",
        "description": "Tell the shipping manager about a damaged delivery.",
        "parameters": {
            "type": "object",
            "required": ["id", "review"],
            "properties": {
                "id": {"type": "string", "description": "The product id."},
                "review": {"type": "string", "description": "The customer's review."},
            },
        },
    },
}


@pytest.fixture(autouse=True)
def _no_ollama_env(monkeypatch):
    """The SDK reads OLLAMA_API_KEY (an Authorization header) and OLLAMA_HOST."""
    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)


def _closed_port_url() -> str:
    port = free_port()
    return f"http://127.0.0.1:{port}"


def _tool_call(arguments: Any, call_id: str = "call_0") -> Dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": call_id, "type": "function", "function": {"name": "notify_shipping_manager", "arguments": arguments},
    }]}


# -- chat: one call --------------------------------------------------------------------


def test_plain_answer_usage_and_request_body():
    with OllamaScriptedServer([{"role": "assistant", "content": "Hello from llama"}]) as server:
        connection = OllamaChatModelConnection(base_url=server.base_url, request_timeout=5)
        try:
            messages = [ChatMessage(role=MessageRole.SYSTEM, content="be brief"), *HI]
            reply = connection.chat(messages, model="llama3.2", temperature=0.2, num_ctx=4096, keep_alive="10m",
                                    seed=7, logprobs=None)
        finally:
            connection.close()

    assert reply.role == MessageRole.ASSISTANT and reply.content == "Hello from llama" and reply.tool_calls == []
    sent = server.sent[0]
    assert reply.extra_args == {
        "usage": {"prompt_tokens": sent["prompt_eval_count"], "completion_tokens": sent["eval_count"]},
        "model_name": "llama3.2",
        "stop_reason": "stop",
    }
    (exchange,) = server.exchanges
    assert exchange.path == CHAT_PATH and "authorization" not in exchange.headers
    assert exchange.json == {
        "model": "llama3.2",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "tools": [],
        "stream": False,
        "keep_alive": "10m",
        "options": {"temperature": 0.2, "num_ctx": 4096, "seed": 7},
    }


def test_async_clients_follow_the_event_loop():
    """``achat`` uses an ``ollama.AsyncClient`` per loop: the connection
    survives successive ``asyncio.run`` calls, as the local runner makes
    them, and each client is closed with its loop."""
    with OllamaScriptedServer() as server:
        server.set_reply_fn(lambda body, index: {"content": f"reply {index}"})
        connection = OllamaChatModelConnection(base_url=server.base_url)

        async def many(n: int) -> List[str]:
            replies = await asyncio.gather(*(connection.achat(HI, model="llama3.2") for _ in range(n)))
            assert connection._pool().async_count() == 1
            return [r.content for r in replies]

        first = asyncio.run(many(8))
        assert connection._pool().async_count() == 0  # closed by asyncio.run's shutdown
        second = asyncio.run(many(2))
        connection.close()
    assert sorted(first) == [f"reply {n}" for n in range(8)]
    assert sorted(second) == ["reply 8", "reply 9"]
    assert all(body["stream"] is False for body in server.requests)


def test_structured_output_is_asked_with_format():
    class Verdict(BaseModel):
        score: int
        reasons: List[str]

    with OllamaScriptedServer([{"content": ANSWER}]) as server:
        connection = OllamaChatModelConnection(base_url=server.base_url)
        setup = OllamaChatModelSetup(connection="ollama", model="llama3.1")
        setup.get_resource = lambda name, type_: connection
        reply = setup.chat(HI, output_schema=Verdict)
        connection.close()

    assert reply.content == ANSWER
    (body,) = server.requests
    assert body["format"] == OutputSchema(Verdict).json_schema()
    assert body["format"]["required"] == ["score", "reasons"]
    assert body["messages"] == [{"role": "user", "content": "hi"}]  # no schema instruction in the prompt
    assert OllamaChatModelConnection.supports_output_schema


def test_setup_fields_reach_the_request_and_thinking_becomes_reasoning():
    replies = [
        {"content": "Positive.", "thinking": "the customer is happy"},
        {"content": "<think>short review</think>Positive."},
        {"content": "<think>short review</think>Positive."},
    ]
    with OllamaScriptedServer(replies) as server:
        connection = OllamaChatModelConnection(base_url=server.base_url)

        def setup(**fields: Any) -> OllamaChatModelSetup:
            made = OllamaChatModelSetup(connection="ollama", model="qwen3", **fields)
            made.get_resource = lambda name, type_: connection
            return made

        thought = setup(think="high", keep_alive=0, temperature=0.1, num_ctx=8192,
                        additional_kwargs={"top_p": 0.9, "logprobs": True}).chat(HI)
        inline = setup().chat(HI)
        kept = setup(extract_reasoning=False).chat(HI)
        connection.close()

    assert (thought.content, thought.extra_args["reasoning"]) == ("Positive.", "the customer is happy")
    assert (inline.content, inline.extra_args["reasoning"]) == ("Positive.", "short review")
    assert kept.content == "<think>short review</think>Positive." and "reasoning" not in kept.extra_args
    first, second, _ = server.requests
    assert {k: first[k] for k in ("think", "keep_alive", "logprobs", "options")} == {
        "think": "high", "keep_alive": 0, "logprobs": True,
        "options": {"temperature": 0.1, "num_ctx": 8192, "top_p": 0.9},
    }
    # Defaults: 0.3.1's temperature and context window; think and keep_alive left to the server.
    assert second["options"] == {"temperature": 0.75, "num_ctx": 2048}
    assert "think" not in second and "keep_alive" not in second


# -- chat: an agent's tool-call loop ---------------------------------------------------


def _review_agent(base_url: str) -> ReviewAgent:
    """The shared review agent over an Ollama connection to the test's server."""
    return ReviewAgent(
        "ollama",
        ResourceDescriptor(clazz=ResourceName.ChatModel.OLLAMA_CONNECTION, base_url=base_url, request_timeout=10),
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.OLLAMA_SETUP, connection="ollama", model="llama3.2", temperature=0.0,
            keep_alive="30m", tools=["notify_shipping_manager"],
        ),
    )


def test_tool_call_loop_through_the_local_runner():
    with OllamaScriptedServer([_tool_call(REVIEW), {"role": "assistant", "content": ANSWER}]) as server:
        out = run_local(_review_agent(server.base_url), [{"key": "B01", "value": REVIEW}])

    assert out == [{"B01": {"answer": ANSWER}}]
    assert NOTIFIED == [REVIEW]
    first, second = server.requests
    assert first == {
        "model": "llama3.2",
        "messages": [{"role": "user", "content": json.dumps(REVIEW)}],
        "tools": [NOTIFY_TOOL_SPEC],
        "stream": False,
        "keep_alive": "30m",
        "options": {"temperature": 0.0, "num_ctx": 2048},
    }
    # Ollama's shapes: the call without an id (the SDK leaves out the empty
    # content), the result named by its tool, matched by order.
    assert second["messages"] == [
        first["messages"][0],
        {"role": "assistant", "tool_calls": [{"function": {"name": "notify_shipping_manager", "arguments": REVIEW}}]},
        {"role": "tool", "content": NOTIFY_RESULT, "tool_name": "notify_shipping_manager"},
    ]
    assert second["tools"] == first["tools"]


def test_reply_tool_calls_get_positional_provider_ids():
    two_calls = {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "notify_shipping_manager", "arguments": REVIEW}},
        {"type": "function", "function": {"name": "lookup", "arguments": {}}},
    ]}
    with OllamaScriptedServer([two_calls]) as server:
        connection = OllamaChatModelConnection(base_url=server.base_url)
        reply = connection.chat(HI, tools=[NOTIFY], model="llama3.2")
        connection.close()
    assert reply.tool_calls == [
        {"id": "ollama-0", "type": "function", "original_id": "ollama-0",
         "function": {"name": "notify_shipping_manager", "arguments": REVIEW}},
        {"id": "ollama-1", "type": "function", "original_id": "ollama-1",
         "function": {"name": "lookup", "arguments": {}}},
    ]


def test_messages_to_ollama_name_each_tool_result_by_its_call():
    messages = [
        ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[
            {"id": "req-0-0", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x"}},
             "original_id": "ollama-0"},
            {"id": "req-0-1", "type": "function", "function": {"name": "ping", "arguments": "{}"},
             "original_id": "ollama-1"},
        ]),
        ChatMessage(role=MessageRole.TOOL, content="42", extra_args={"tool_call_id": "req-0-0"}),
        ChatMessage(role=MessageRole.TOOL, content="pong", extra_args={"tool_call_id": "req-0-1"}),
        ChatMessage(role=MessageRole.TOOL, content="?", extra_args={"tool_call_id": "unknown"}),
    ]
    assert to_ollama_messages(messages) == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "lookup", "arguments": {"q": "x"}}},
            {"function": {"name": "ping", "arguments": {}}},
        ]},
        {"role": "tool", "content": "42", "tool_name": "lookup"},
        {"role": "tool", "content": "pong", "tool_name": "ping"},
        {"role": "tool", "content": "?"},
    ]
    bad = ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
        {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "[1]"}}])
    with pytest.raises(ValueError, match="'lookup'"):
        to_ollama_messages([bad])


def test_a_retryable_error_is_retried_by_the_agents_error_strategy():
    """The SDK does not retry; a 503 fails the chat action with
    ``ModelOverloaded`` (retryable), and the ``retry`` strategy asks again."""
    replies = [ScriptedError(503, "server busy"), _tool_call(REVIEW), {"content": ANSWER}]
    with OllamaScriptedServer(replies) as server:
        retry = {"error-handling-strategy": "retry", "max-retries": 2, "retry-wait-interval": 0}
        out = run_local(_review_agent(server.base_url), [{"key": "B01", "value": REVIEW}], retry)
    assert out == [{"B01": {"answer": ANSWER}}]
    assert len(server.requests) == 3 and server.requests[0] == server.requests[1]


# -- errors ----------------------------------------------------------------------------


ERRORS = [
    (404, "model 'llama9' not found, try pulling it first", ModelBadRequest),
    (400, "invalid options: num_ctx", ModelBadRequest),
    (400, "the input length exceeds the context length", ModelContextTooLong),
    (429, "too many requests", ModelRateLimited),
    (500, "llama runner process has terminated", ModelServerError),
    (503, "server busy, please try again", ModelOverloaded),
]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_http_errors_become_model_call_errors(asynchronous: bool):
    with OllamaScriptedServer([ScriptedError(status, message) for status, message, _ in ERRORS]) as server:
        connection = OllamaChatModelConnection(base_url=server.base_url)
        for status, message, error_class in ERRORS:
            with pytest.raises(error_class) as raised:
                if asynchronous:
                    asyncio.run(connection.achat(HI, model="llama9"))
                else:
                    connection.chat(HI, model="llama9")
            error = raised.value
            assert (error.status, error.provider, error.args[0]) == (status, "ollama", message)
            assert isinstance(error.__cause__, ollama.ResponseError)
            assert error.retryable == (status >= 429)
        connection.close()
    assert len(server.requests) == len(ERRORS)  # the SDK does not retry


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_unreachable_server_and_timeout(asynchronous: bool):
    def call(connection: OllamaChatModelConnection) -> Any:
        if asynchronous:
            return asyncio.run(connection.achat(HI, model="llama3.2"))
        return connection.chat(HI, model="llama3.2")

    with pytest.raises(ModelUnreachable) as refused:
        call(OllamaChatModelConnection(base_url=_closed_port_url(), request_timeout=2))
    assert isinstance(refused.value.__cause__, ConnectionError) and refused.value.retryable

    with OllamaScriptedServer([{"content": "too late"}], latency_s=1.0) as server:
        with pytest.raises(ModelUnreachable, match="timed out") as late:
            call(OllamaChatModelConnection(base_url=server.base_url, request_timeout=0.2))
    assert isinstance(late.value.__cause__, httpx.TimeoutException)


def test_tool_call_arguments_that_are_not_an_object_are_a_response_error():
    malformed = {
        "model": "llama3.2", "created_at": "2025-01-01T00:00:00Z", "done": True, "done_reason": "stop",
        "message": {"role": "assistant", "content": "",
                    "tool_calls": [{"function": {"name": "lookup", "arguments": '{"q": "x"}'}}]},
    }
    with OllamaScriptedServer([ScriptedError(200, body=malformed)]) as server:
        connection = OllamaChatModelConnection(base_url=server.base_url)
        with pytest.raises(ModelResponseError, match="arguments") as raised:
            connection.chat(HI, model="llama3.2")
        connection.close()
    assert not raised.value.retryable


def test_missing_model_is_a_clear_error():
    with pytest.raises(ValueError, match="model name"):
        OllamaChatModelConnection(base_url=_closed_port_url()).chat(HI)
    with pytest.raises(ValueError, match="model name"):
        OllamaEmbeddingModelConnection(base_url=_closed_port_url()).embed("hi")


# -- embeddings ------------------------------------------------------------------------


def test_embed_one_text_and_a_batch_in_one_request():
    replies = [{"embeddings": [[0.1, 0.2, 0.3]]}, {"embeddings": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}]
    with OllamaScriptedServer(replies) as server:
        connection = OllamaEmbeddingModelConnection(server.base_url, 5)
        setup = OllamaEmbeddingModelSetup(connection="ollama", model="nomic-embed-text", keep_alive="1m",
                                          dimensions=3, additional_kwargs={"num_ctx": 512})
        setup.get_resource = lambda name, type_: connection
        one = setup.embed("why is the sky blue?")
        batch = setup.embed(("a", "b", "c"))
        connection.close()

    assert one == [0.1, 0.2, 0.3]
    assert batch == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert [e.path for e in server.exchanges] == [EMBED_PATH, EMBED_PATH]
    common = {"model": "nomic-embed-text", "truncate": True, "keep_alive": "1m", "dimensions": 3,
              "options": {"num_ctx": 512}}
    assert server.requests == [{**common, "input": "why is the sky blue?"}, {**common, "input": ["a", "b", "c"]}]


def test_aembed_uses_an_async_client_per_loop():
    with OllamaScriptedServer() as server:
        server.set_reply_fn(lambda body, index: {"embeddings": [[float(index), 1.0]] * (
            len(body["input"]) if isinstance(body["input"], list) else 1)})
        connection = OllamaEmbeddingModelConnection(base_url=server.base_url)

        async def both() -> tuple:
            one = await connection.aembed("x", model="all-minilm")
            return one, await connection.aembed(["x", "y"], model="all-minilm", truncate=False)

        one, batch = asyncio.run(both())
        assert connection._pool().async_count() == 0
        again = asyncio.run(connection.aembed(["z"], model="all-minilm"))
        connection.close()
    assert one == [0.0, 1.0] and batch == [[1.0, 1.0], [1.0, 1.0]] and again == [[2.0, 1.0]]
    assert server.requests == [
        {"model": "all-minilm", "input": "x"},
        {"model": "all-minilm", "input": ["x", "y"], "truncate": False},
        {"model": "all-minilm", "input": ["z"]},
    ]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_embedding_errors(asynchronous: bool):
    replies = [ScriptedError(404, "model 'nomic' not found"), {"embeddings": [[1.0]]}]
    with OllamaScriptedServer(replies) as server:
        connection = OllamaEmbeddingModelConnection(base_url=server.base_url)

        def embed(text: Any) -> Any:
            if asynchronous:
                return asyncio.run(connection.aembed(text, model="nomic"))
            return connection.embed(text, model="nomic")

        with pytest.raises(ModelBadRequest, match="not found") as missing:
            embed("a")
        assert isinstance(missing.value.__cause__, ollama.ResponseError) and missing.value.status == 404
        with pytest.raises(ModelResponseError, match="1 embeddings for 2 input texts"):
            embed(["a", "b"])
        with pytest.raises(TypeError, match="#1"):
            embed(["a", 2])
        assert embed([]) == []
        connection.close()
    assert len(server.requests) == 2
    with pytest.raises(ModelUnreachable):
        OllamaEmbeddingModelConnection(base_url=_closed_port_url()).embed("a", model="nomic")


# -- packaging and the fixture ---------------------------------------------------------


def test_missing_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ollama", None)  # import ollama now raises ImportError
    with pytest.raises(ImportError, match=r"OllamaChatModelConnection.*pip install -e '\.\[ollama\]'"):
        OllamaChatModelConnection(base_url=_closed_port_url()).chat(HI, model="llama3.2")
    with pytest.raises(ImportError, match=r"OllamaEmbeddingModelConnection.*pip install -e '\.\[ollama\]'"):
        OllamaEmbeddingModelConnection(base_url=_closed_port_url()).embed("a", model="nomic")


def test_the_scripted_server_refuses_what_ollamas_reference_does_not_allow():
    bad_bodies = [
        (CHAT_PATH, {"model": "m", "messages": [], "stream": True}, "stream must be false"),
        (CHAT_PATH, {"messages": [], "stream": False}, "model"),
        (CHAT_PATH, {"model": "m", "messages": [{"role": "developer", "content": "x"}], "stream": False}, "role"),
        (CHAT_PATH, {"model": "m", "stream": False, "messages": [
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}]},
         "arguments must be a JSON object"),
        (CHAT_PATH, {"model": "m", "stream": False, "messages": [
            {"role": "tool", "content": "42", "tool_call_id": "c1"}]}, "unknown field 'tool_call_id'"),
        (CHAT_PATH, {"model": "m", "messages": [], "stream": False, "max_tokens": 5}, "unknown field 'max_tokens'"),
        (EMBED_PATH, {"model": "m", "input": [1, 2]}, "input must be"),
    ]
    with OllamaScriptedServer() as server:
        for path, body, problem in bad_bodies:
            response = httpx.post(server.base_url + path, json=body)
            assert response.status_code == 400 and problem in response.json()["error"], (body, response.text)
        violations = list(server.violations)
        server.violations.clear()  # expected here; leaving the block would fail on them
    assert len(violations) >= len(bad_bodies)
    assert any("unknown field 'id'" in v for v in violations)
