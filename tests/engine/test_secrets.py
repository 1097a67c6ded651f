"""Secrets never print (issue 27, section 2): API keys, tokens, passwords,
header values and DSN passwords are redacted in ``flink-agents plan show``,
``AgentPlan.to_json``, ``ResourceDescriptor``'s repr/str, resources' reprs,
pydantic validation errors, the configuration's repr and its errors; the
rule is ``flink_agents.api.redaction`` (docs/guarantees.md, "Security").

A redacted plan still runs: the plan object (and its pickled form) keeps
the values, so a job authenticates against scripted servers on 127.0.0.1
that check the key (an OpenAI-style chat server and an MCP server checking
an ``Authorization`` header); a secret given as ``secret_from_env`` is only
a reference in the plan and is read where the resource is built. A plan
read back from its JSON holds ``***`` and refuses to build that resource.
"""

from __future__ import annotations

import json
import logging
import pickle
from typing import Any, Dict, List

import cloudpickle
import pytest
from pydantic import ValidationError

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.configuration import ConfigOption, Configuration
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.redaction import (
    REDACTED,
    is_secret_name,
    redact,
    redact_text,
    resolve_secrets,
    secret_from_env,
)
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.cli.main import main
from flink_agents.integrations.chat_models.anthropic.anthropic_chat_model import AnthropicChatModelConnection
from flink_agents.integrations.chat_models.openai.openai_chat_model import OpenAIChatModelConnection
from flink_agents.integrations.mcp import MCPServer
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.execution.resources import ResourceCache
from tests.support.mcp_servers.http_server import McpHttpServer
from tests.support.scripted_http import Exchange
from tests.support.scripted_openai_server import ScriptedChatServer

API_KEY = "sk-live-4f9a1c0ffee"
MCP_TOKEN = "mcp-bearer-77e1d"
DSN_PASSWORD = "pg-pass-5150"
DSN = f"postgresql://agent:{DSN_PASSWORD}@db.internal:5432/journal"
SECRETS = (API_KEY, MCP_TOKEN, DSN_PASSWORD)


def _no_secret_in(text: str) -> None:
    """Neither a secret nor its first 10 characters (pydantic shortens a
    long input to its head and tail) is in ``text``."""
    leaked = [secret for secret in SECRETS if secret[:10] in text]
    assert not leaked, f"secrets printed: {leaked}\n{text}"


def _ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="reviewer", messages=[
        ChatMessage(role=MessageRole.USER, content=json.dumps(event.input)),
    ]))


def _answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={"answer": event.response.content}))


def secrets_agent(model_url: str = "http://127.0.0.1:9/v1", mcp_url: str = "http://127.0.0.1:9/mcp",
                  api_key: Any = API_KEY, agent: Agent | None = None) -> Agent:
    """A chat model connection with an API key, an MCP server with an
    ``Authorization`` header, and an action configured with a PostgreSQL
    DSN holding a password (declared on ``agent``, default a new one)."""
    agent = Agent() if agent is None else agent
    agent.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=model_url, api_key=api_key,
        max_retries=0, timeout_s=20.0,
    ))
    agent.add_resource("reviewer", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="openai", model="gpt-test",
        tools=["stock"],
    ))
    agent.add_resource("warehouse", ResourceType.MCP_SERVER, ResourceDescriptor(
        clazz=ResourceName.MCP_SERVER, endpoint=mcp_url, headers={"Authorization": f"Bearer {MCP_TOKEN}"},
        timeout=20,
    ))
    agent.add_action("ask", [InputEvent], _ask, archive_dsn=DSN)
    agent.add_action("answer", [ChatResponseEvent], _answer)
    return agent


class SecretsAgent(Agent):
    """``secrets_agent`` as a class, for ``flink-agents plan show MODULE:AGENT``."""

    def __init__(self) -> None:
        super().__init__()
        secrets_agent(agent=self)


# -- the rule -----------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "api_key", "apiKey", "x-api-key", "OPENAI_API_KEY", "token", "azure_ad_token", "X-Chroma-Token",
    "password", "journal.postgres.password", "secret", "client_secret", "Authorization", "auth", "private_key",
])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["key", "max_tokens", "tokens", "model", "endpoint", "author", "dsn", "headers"])
def test_names_that_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_hides_secret_names_header_values_and_dsn_passwords() -> None:
    value = {
        "api_key": API_KEY, "unset_token": None, "headers": {"Authorization": f"Bearer {MCP_TOKEN}", "Accept": "x"},
        "env": {"GITHUB_TOKEN": MCP_TOKEN, "PATH": "/bin"}, "dsn": DSN, "nested": [{"password": DSN_PASSWORD}],
        "conninfo": f"host=db password={DSN_PASSWORD} user=agent", "model": "gpt-test",
    }
    shown = redact(value)
    _no_secret_in(repr(shown))
    assert shown["headers"] == {"Authorization": REDACTED, "Accept": REDACTED}
    assert shown["env"]["PATH"] == "/bin" and shown["unset_token"] is None and shown["model"] == "gpt-test"
    assert shown["dsn"] == "postgresql://agent:***@db.internal:5432/journal"
    assert shown["conninfo"] == "host=db password=*** user=agent"
    assert value["api_key"] == API_KEY  # a copy: the value itself is untouched
    assert redact_text(f"401: Authorization: Bearer {MCP_TOKEN}") == "401: Authorization: Bearer ***"


# -- plan show and to_json ----------------------------------------------------------


def test_plan_show_prints_no_secret(capsys: Any) -> None:
    assert main(["plan", "show", f"{__name__}:SecretsAgent"]) == 0
    out = capsys.readouterr().out
    _no_secret_in(out)
    plan = json.loads(out)
    warehouse = plan["resources"]["mcp_server"]["warehouse"]["descriptor"]["arguments"]
    assert warehouse["headers"] == {"Authorization": REDACTED}
    assert plan["resources"]["chat_model_connection"]["openai"]["descriptor"]["arguments"]["api_key"] == REDACTED
    assert plan["actions"]["ask"]["config"]["archive_dsn"] == "postgresql://agent:***@db.internal:5432/journal"


def test_to_json_and_every_serialized_form_hold_no_secret() -> None:
    plan = AgentPlan.from_agent(secrets_agent())
    _no_secret_in(plan.to_json())
    _no_secret_in(plan.model_dump_json())
    _no_secret_in(repr(plan))
    _no_secret_in(str(plan))


def test_the_pickled_plan_keeps_the_secrets() -> None:
    plan = AgentPlan.from_agent(secrets_agent())
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        back = loads(dumps(plan))
        connection = back.resource_spec("openai", ResourceType.CHAT_MODEL_CONNECTION)
        assert connection.descriptor.arguments["api_key"] == API_KEY
        assert back.actions["ask"].config["archive_dsn"] == DSN
        assert back == plan


def test_plans_differing_only_by_a_secret_are_not_equal() -> None:
    assert AgentPlan.from_agent(secrets_agent()) != AgentPlan.from_agent(secrets_agent(api_key="sk-other"))


def test_a_plan_read_back_from_json_refuses_to_build_a_redacted_resource() -> None:
    plan = AgentPlan.from_json(AgentPlan.from_agent(secrets_agent()).to_json())
    with pytest.raises(ValueError, match=r"'openai'.*arguments\.api_key is '\*\*\*'"):
        ResourceCache(plan).get("openai", ResourceType.CHAT_MODEL_CONNECTION)
    with pytest.raises(ValueError, match=r"'warehouse'.*arguments\.headers\.Authorization"):
        ResourceCache(plan).get("warehouse", ResourceType.MCP_SERVER)


# -- reprs --------------------------------------------------------------------------


def test_resource_descriptor_repr_and_str_show_stars() -> None:
    descriptor = ResourceDescriptor(
        clazz=ResourceName.MCP_SERVER, endpoint="http://127.0.0.1:9/mcp", token=MCP_TOKEN,
        headers={"Authorization": f"Bearer {MCP_TOKEN}"}, api_key=API_KEY,
    )
    for text in (repr(descriptor), str(descriptor), f"{descriptor!r}", descriptor.model_dump_json()):
        _no_secret_in(text)
        assert REDACTED in text
    assert descriptor.arguments["token"] == MCP_TOKEN  # the descriptor keeps the value


def test_resource_reprs_hide_header_values_env_tokens_and_url_passwords() -> None:
    server = MCPServer(endpoint=f"http://agent:{DSN_PASSWORD}@127.0.0.1:9/mcp",
                       headers={"Authorization": f"Bearer {MCP_TOKEN}"}, env={"API_TOKEN": API_KEY})
    for text in (repr(server), str(server), server.label):
        _no_secret_in(text)


# -- validation errors --------------------------------------------------------------


def test_a_validation_error_of_an_mcp_server_does_not_show_its_token() -> None:
    with pytest.raises(ValidationError) as failed:
        MCPServer(endpoint="ftp://x", token=MCP_TOKEN)
    _no_secret_in(str(failed.value))
    _no_secret_in(repr(failed.value))
    assert "endpoint must be an http(s) URL" in str(failed.value)
    # (``errors()`` still holds the input, for code that asks for it;
    # ``errors(include_input=False)`` leaves it out: docs/guarantees.md, "Security".)


@pytest.mark.parametrize("build", [
    # a model-level check fails: pydantic would show every argument given
    lambda: OpenAIChatModelConnection(api_key=API_KEY, timeout_s=1, timeout=2),
    # the key itself has the wrong type: pydantic would show it
    lambda: AnthropicChatModelConnection(api_key=[API_KEY]),
    lambda: OpenAIChatModelConnection(api_key={"value": API_KEY}),
])
def test_a_validation_error_of_a_chat_connection_does_not_show_its_key(build: Any) -> None:
    with pytest.raises(ValidationError) as failed:
        build()
    _no_secret_in(str(failed.value))
    _no_secret_in(repr(failed.value))


def test_a_bad_mcp_descriptor_built_by_the_runtime_does_not_show_its_token() -> None:
    agent = Agent()
    agent.add_resource("bad", ResourceType.MCP_SERVER, ResourceDescriptor(
        clazz=ResourceName.MCP_SERVER, token=MCP_TOKEN, endpoint="ftp://x",
    ))
    with pytest.raises(ValidationError) as failed:
        ResourceCache(AgentPlan.from_agent(agent)).get("bad", ResourceType.MCP_SERVER)
    _no_secret_in(str(failed.value))


# -- configuration ------------------------------------------------------------------


def test_the_configuration_repr_hides_dsn_passwords_and_secret_keys() -> None:
    config = Configuration({"journal.postgres.dsn": DSN, "callbacks.ingress.token": MCP_TOKEN, "chat.async": True})
    for text in (repr(config), str(config), repr(config.read_only())):
        _no_secret_in(text)
    assert "db.internal" in repr(config) and "chat.async" in repr(config)
    assert config["journal.postgres.dsn"] == DSN


def test_configuration_errors_do_not_show_secret_values() -> None:
    config = Configuration({"provider.api_key": API_KEY, "callbacks.ingress.token": MCP_TOKEN})
    with pytest.raises(ValueError) as failed:
        config.get_int("provider.api_key")
    _no_secret_in(str(failed.value))
    assert "provider.api_key" in str(failed.value)
    with pytest.raises(ValueError) as failed:
        config.set_int("callbacks.ingress.token", MCP_TOKEN)  # type: ignore[arg-type]
    _no_secret_in(str(failed.value))
    option = ConfigOption("callbacks.ingress.token", str, None, check=lambda v: len(v) > 64, requirement="too short")
    with pytest.raises(ValueError) as failed:
        option.convert(MCP_TOKEN)
    _no_secret_in(str(failed.value))


# -- a redacted plan still runs and authenticates -----------------------------------


class KeyCheckingChatServer(ScriptedChatServer):
    """The scripted OpenAI-style chat server, answering 401 unless the
    request carries ``Authorization: Bearer <key>``."""

    reject_status = 401

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def check(self, exchange: Exchange) -> List[str]:
        problems = super().check(exchange)
        if exchange.method == "POST" and exchange.headers.get("authorization") != f"Bearer {self.key}":
            problems.append("wrong or missing API key")
        return problems


def _model(body: Dict[str, Any], index: int) -> Dict[str, Any]:
    """Round 0: call the MCP tool ``stock``; then answer with its result."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if results:
        return {"role": "assistant", "content": "units: " + ("12" if '"units": 12' in results[0] else "?")}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "stock", "arguments": '{"product_id": "p1"}'}},
    ]}


def _run_local(agent: Agent) -> List[Any]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    out = env.from_list([{"key": "r1", "value": {"product": "p1"}}]).apply(agent).to_list()
    env.execute()
    return out


def test_a_job_of_a_redacted_plan_authenticates_with_the_real_secrets() -> None:
    with KeyCheckingChatServer(API_KEY) as model, McpHttpServer("warehouse", token=MCP_TOKEN, only=["stock"]) as mcp:
        model.set_reply_fn(_model)
        agent = secrets_agent(model.base_url, mcp.url)
        _no_secret_in(AgentPlan.from_agent(agent).to_json())
        outputs = _run_local(agent)
        headers = list(mcp.headers_seen)
    assert outputs == [{"r1": {"answer": "units: 12"}}]
    assert {e.headers["authorization"] for e in model.exchanges} == {f"Bearer {API_KEY}"}
    assert headers and {h.get("authorization") for h in headers} == {f"Bearer {MCP_TOKEN}"}


def test_a_secret_from_the_environment_is_a_reference_in_the_plan(monkeypatch: Any) -> None:
    monkeypatch.setenv("SECRETS_TEST_OPENAI_KEY", API_KEY)
    with KeyCheckingChatServer(API_KEY) as model, McpHttpServer("warehouse", token=MCP_TOKEN, only=["stock"]) as mcp:
        model.set_reply_fn(_model)
        agent = secrets_agent(model.base_url, mcp.url, api_key=secret_from_env("SECRETS_TEST_OPENAI_KEY"))
        plan = AgentPlan.from_agent(agent)
        arguments = plan.resource_spec("openai", ResourceType.CHAT_MODEL_CONNECTION).descriptor.arguments
        assert arguments["api_key"] == {"$secret": "env:SECRETS_TEST_OPENAI_KEY"}  # also in the pickled plan
        assert '"$secret": "env:SECRETS_TEST_OPENAI_KEY"' in plan.to_json()
        outputs = _run_local(agent)
    assert outputs == [{"r1": {"answer": "units: 12"}}]
    assert {e.headers["authorization"] for e in model.exchanges} == {f"Bearer {API_KEY}"}


def test_a_missing_secret_variable_names_the_variable_and_the_argument(monkeypatch: Any) -> None:
    monkeypatch.delenv("SECRETS_TEST_UNSET", raising=False)
    plan = AgentPlan.from_agent(secrets_agent(api_key=secret_from_env("SECRETS_TEST_UNSET")))
    with pytest.raises(ValueError, match=r"'openai': arguments\.api_key: the environment variable SECRETS_TEST_UNSET"):
        ResourceCache(plan).get("openai", ResourceType.CHAT_MODEL_CONNECTION)
    with pytest.raises(ValueError, match="not 'env:NAME'"):
        resolve_secrets({"$secret": "vault:x"})


def test_a_failing_connection_logs_and_raises_no_secret(caplog: Any) -> None:
    """A wrong key: the provider answers 401; neither the error (with its
    causes and traceback) nor any log line at DEBUG holds the key."""
    import traceback

    wrong = "sk-wrong-0badc0de"
    caplog.set_level(logging.DEBUG)
    with KeyCheckingChatServer(API_KEY) as model, McpHttpServer("warehouse", token=MCP_TOKEN, only=["stock"]) as mcp:
        model.set_reply_fn(_model)
        with pytest.raises(ActionFailed) as failed:
            _run_local(secrets_agent(model.base_url, mcp.url, api_key=wrong))
        model.violations.clear()  # the 401 is the point
    text = "".join(traceback.format_exception(failed.value)) + caplog.text
    assert "401" in text
    leaked = [s for s in (wrong, *SECRETS) if s[:10] in text]
    assert not leaked, f"secrets printed: {leaked}"


def test_a_yaml_connection_takes_its_key_by_reference(tmp_path: Any, monkeypatch: Any) -> None:
    from flink_agents.api.yaml.loader import build_agents

    monkeypatch.setenv("SECRETS_TEST_YAML_KEY", API_KEY)
    path = tmp_path / "connections.yaml"
    path.write_text(
        "chat_model_connections:\n"
        "  - name: conn\n"
        "    clazz: openai\n"
        "    base_url: http://127.0.0.1:9/v1\n"
        '    api_key: {$secret: "env:SECRETS_TEST_YAML_KEY"}\n'
    )
    _, shared, _ = build_agents(path)
    agent = Agent()
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, shared[ResourceType.CHAT_MODEL_CONNECTION]["conn"])
    plan = AgentPlan.from_agent(agent)
    _no_secret_in(plan.to_json())
    assert ResourceCache(plan).get("conn", ResourceType.CHAT_MODEL_CONNECTION).api_key == API_KEY
