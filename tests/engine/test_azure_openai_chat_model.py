"""The Azure OpenAI chat model over the real ``openai`` SDK (``AzureOpenAI``,
``AsyncAzureOpenAI``), against a scripted server that checks each request
against Azure OpenAI's reference (deployment path, api-version, auth header,
chat-completions body)."""
from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

import openai
import pytest
from pydantic import BaseModel


from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.chat_models.errors import (
    ModelAuthenticationError,
    ModelBadRequest,
    ModelContextTooLong,
    ModelRateLimited,
)


from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceName

from flink_agents.integrations.chat_models.azure.azure_openai_chat_model import (
    AzureOpenAIChatModelConnection,
    AzureOpenAIChatModelSetup,
)
from tests.support.notify_tool import (  # noqa: F401 (clear_notified: an autouse fixture)
    NOTIFIED,
    NOTIFY_RESULT,
    clear_notified,
)
from tests.support.provider_agent import ReviewAgent
from tests.support.scripted_http import ScriptedError
from tests.support.scripted_openai_server import AzureOpenAIScriptedServer, openai_error_body

API_VERSION = "2024-10-21"
DEPLOYMENT = "reviews-gpt4o"


@pytest.fixture(autouse=True)
def _no_azure_environment(monkeypatch):
    for name in ("AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN", "OPENAI_API_VERSION", "AZURE_OPENAI_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


def _connection(server: AzureOpenAIScriptedServer, **fields: Any) -> AzureOpenAIChatModelConnection:
    options: Dict[str, Any] = {"api_key": "azure-key", "api_version": API_VERSION, "max_retries": 0, **fields}
    return AzureOpenAIChatModelConnection(azure_endpoint=server.base_url, **options)


def test_requests_name_the_deployment_version_and_key_sync_and_async():
    with AzureOpenAIScriptedServer([{"content": "sync"}, {"content": "async"}]) as server:
        connection = _connection(server)
        try:
            sync_reply = connection.chat([ChatMessage(content="hi")], model=DEPLOYMENT,
                                         model_of_azure_deployment="gpt-4o")
            async_reply = asyncio.run(connection.achat([ChatMessage(content="hi")], model=DEPLOYMENT))
        finally:
            connection.close()
    assert (sync_reply.content, async_reply.content) == ("sync", "async")
    assert server.deployments == [DEPLOYMENT, DEPLOYMENT]
    for exchange in server.exchanges:
        assert exchange.path == f"/openai/deployments/{DEPLOYMENT}/chat/completions"
        assert exchange.query["api-version"] == [API_VERSION]
        assert exchange.headers["api-key"] == "azure-key"
        assert "authorization" not in exchange.headers
    # The deployment's model names the token metrics; else the model Azure reports.
    assert sync_reply.extra_args["model_name"] == "gpt-4o"
    assert async_reply.extra_args["model_name"] == DEPLOYMENT  # the scripted server echoes the body's model
    assert sync_reply.extra_args["usage"]["prompt_tokens"] == 1


def test_entra_id_token_instead_of_a_key():
    issued: List[str] = []

    def token_provider() -> str:
        issued.append(f"token-{len(issued)}")
        return issued[-1]

    with AzureOpenAIScriptedServer([{"content": "a"}, {"content": "b"}, {"content": "c"}]) as server:
        by_token = _connection(server, api_key=None, azure_ad_token="static-token")
        by_provider = _connection(server, api_key=None, azure_ad_token_provider=token_provider)
        try:
            by_token.chat([ChatMessage(content="hi")], model=DEPLOYMENT)
            by_provider.chat([ChatMessage(content="hi")], model=DEPLOYMENT)
            asyncio.run(by_provider.achat([ChatMessage(content="hi")], model=DEPLOYMENT))
        finally:
            by_token.close()
            by_provider.close()
    headers = [e.headers for e in server.exchanges]
    assert [h["authorization"] for h in headers] == ["Bearer static-token", "Bearer token-0", "Bearer token-1"]
    assert not any("api-key" in h for h in headers)


def test_settings_from_the_environment_and_clear_errors(monkeypatch):
    with AzureOpenAIScriptedServer([{"content": "ok"}]) as server:
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", "env-key")
        monkeypatch.setenv("OPENAI_API_VERSION", "2024-06-01")
        monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.base_url)
        connection = AzureOpenAIChatModelConnection(max_retries=0)
        try:
            assert connection.chat([ChatMessage(content="hi")], model=DEPLOYMENT).content == "ok"
        finally:
            connection.close()
    (exchange,) = server.exchanges
    assert exchange.headers["api-key"] == "env-key" and exchange.query["api-version"] == ["2024-06-01"]

    monkeypatch.delenv("OPENAI_API_VERSION")
    with pytest.raises(ModelBadRequest, match="api_version is not set .*OPENAI_API_VERSION"):
        AzureOpenAIChatModelConnection().chat([ChatMessage(content="hi")], model=DEPLOYMENT)
    monkeypatch.delenv("AZURE_OPENAI_API_KEY")
    with pytest.raises(ModelAuthenticationError, match="no credentials: set api_key .*AZURE_OPENAI_API_KEY"):
        AzureOpenAIChatModelConnection(api_version=API_VERSION).chat([ChatMessage(content="hi")], model=DEPLOYMENT)
    with pytest.raises(ValueError, match=r"one of .*not \['api_key', 'azure_ad_token'\]"):
        AzureOpenAIChatModelConnection(api_key="k", azure_ad_token="t", api_version=API_VERSION).chat(
            [ChatMessage(content="hi")], model=DEPLOYMENT)
    with pytest.raises(ValueError, match="model name"):
        AzureOpenAIChatModelConnection(api_key="k", api_version=API_VERSION).chat([ChatMessage(content="hi")])


def test_setup_settings_reach_the_body():
    setup = AzureOpenAIChatModelSetup(
        connection="azure", model=DEPLOYMENT, model_of_azure_deployment="gpt-4o", temperature=0.3,
        max_tokens=50, logprobs=True, additional_kwargs={"seed": 11, "top_p": 0.9},
    )
    with AzureOpenAIScriptedServer([{"content": "ok"}]) as server:
        connection = _connection(server)
        setup.get_resource = lambda name, type: connection
        try:
            reply = setup.chat([ChatMessage(content="hi")])
        finally:
            connection.close()
    (body,) = server.requests
    assert {k: body[k] for k in ("model", "temperature", "max_tokens", "logprobs", "seed", "top_p")} == {
        "model": DEPLOYMENT, "temperature": 0.3, "max_tokens": 50, "logprobs": True, "seed": 11, "top_p": 0.9,
    }
    assert "model_of_azure_deployment" not in body and "additional_kwargs" not in body
    assert reply.extra_args["model_name"] == "gpt-4o"

    clashing = AzureOpenAIChatModelSetup(connection="azure", model=DEPLOYMENT, additional_kwargs={"temperature": 1})
    clashing.get_resource = lambda name, type: AzureOpenAIChatModelConnection(api_key="k", api_version=API_VERSION,
                                                                              azure_endpoint="http://127.0.0.1:9")
    with pytest.raises(ValueError, match=r"additional_kwargs must not set \['temperature'\]"):
        clashing.chat([ChatMessage(content="hi")])


class Verdict(BaseModel):
    score: int


def test_structured_output_sends_a_json_schema_response_format():
    with AzureOpenAIScriptedServer([{"content": '{"score": 4}'}]) as server:
        connection = _connection(server)
        try:
            reply = connection.chat([ChatMessage(content="rate it")], model=DEPLOYMENT,
                                    output_schema=OutputSchema(output_schema=Verdict))
        finally:
            connection.close()
    assert reply.content == '{"score": 4}'
    assert server.requests[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "schema": Verdict.model_json_schema(), "strict": False},
    }


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ScriptedError(401, "Access denied due to invalid subscription key"), ModelAuthenticationError),
        (ScriptedError(429, "Requests to the ChatCompletions_Create Operation have exceeded the rate limit"),
         ModelRateLimited),
        (ScriptedError(400, "Too much input for this deployment", body=openai_error_body(
            400, "Too much input for this deployment", code="context_length_exceeded", param="messages")),
         ModelContextTooLong),
    ],
    ids=["401", "429", "context_length_exceeded"],
)
def test_errors_are_classified_as_azure(error: ScriptedError, expected: type):
    with AzureOpenAIScriptedServer([error, error]) as server:
        connection = _connection(server)
        try:
            with pytest.raises(expected) as raised:
                connection.chat([ChatMessage(content="hi")], model=DEPLOYMENT)
            with pytest.raises(expected) as raised_async:
                asyncio.run(connection.achat([ChatMessage(content="hi")], model=DEPLOYMENT))
        finally:
            connection.close()
    for exc in (raised.value, raised_async.value):
        assert (exc.provider, exc.status) == ("azure", error.status)
        assert error.message in str(exc)
        assert isinstance(exc.__cause__, openai.APIStatusError)


def _review_agent(endpoint: str) -> ReviewAgent:
    """The shared review agent over an Azure OpenAI connection to the test's server."""
    return ReviewAgent(
        "azure",
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.AZURE_OPENAI_CONNECTION,
            azure_endpoint=endpoint, api_key="azure-key", api_version=API_VERSION, max_retries=0, timeout=10.0,
        ),
        ResourceDescriptor(
            clazz=ResourceName.ChatModel.AZURE_OPENAI_SETUP,
            connection="azure", model=DEPLOYMENT, model_of_azure_deployment="gpt-4o",
            tools=["notify_shipping_manager"],
        ),
    )


def test_tool_call_loop_through_an_agent():
    review = {"id": "B07", "review": "The parcel was soaked and the lamp is broken."}
    call = {"id": "call_0", "type": "function",
            "function": {"name": "notify_shipping_manager", "arguments": json.dumps(review)}}
    replies = [{"role": "assistant", "content": None, "tool_calls": [call]}, {"content": "notified"}]
    with AzureOpenAIScriptedServer(replies) as server:
        env = AgentsExecutionEnvironment.get_execution_environment()
        out = env.from_list([{"key": "B07", "value": review}]).apply(_review_agent(server.base_url)).to_list()
        env.execute()
    assert out == [{"B07": {"answer": "notified"}}]
    assert NOTIFIED == [review]
    assert server.deployments == [DEPLOYMENT, DEPLOYMENT]
    first, second = server.requests
    assert first["tools"][0]["function"]["name"] == "notify_shipping_manager"
    assistant, tool_result = second["messages"][-2:]
    assert tool_result["role"] == "tool"
    assert tool_result["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert tool_result["content"] == NOTIFY_RESULT
