"""A job whose plan's JSON is redacted still authenticates on the PyFlink
mini-cluster (issue 27): the plan travels to the worker pickled, with the
real API key and the MCP server's ``Authorization`` header, while its JSON
form holds ``***`` (docs/guarantees.md, "Security")."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.plan.agent_plan import AgentPlan
from tests.support.mcp_servers.http_server import McpHttpServer
from tests.engine.test_secrets import KeyCheckingChatServer

cloudpickle.register_pickle_by_value(sys.modules[__name__])

API_KEY = "sk-e2e-live-91c3"
MCP_TOKEN = "mcp-e2e-bearer-0d2"


def _ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="reviewer", messages=[
        ChatMessage(role=MessageRole.USER, content=json.dumps(event.input)),
    ]))


def _answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={"key": ctx.key, "answer": event.response.content}))


def _key(record: Dict[str, Any]) -> str:
    return record["id"]


def _model(body: Dict[str, Any], index: int) -> Dict[str, Any]:
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if results:
        return {"role": "assistant", "content": "units: " + ("12" if '"units": 12' in results[0] else "?")}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "stock", "arguments": '{"product_id": "p1"}'}},
    ]}


def _agent(model_url: str, mcp_url: str) -> Agent:
    agent = Agent()
    agent.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=model_url, api_key=API_KEY,
        max_retries=0, timeout_s=20.0,
    ))
    agent.add_resource("reviewer", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="openai", model="gpt-test", tools=["stock"],
    ))
    agent.add_resource("warehouse", ResourceType.MCP_SERVER, ResourceDescriptor(
        clazz=ResourceName.MCP_SERVER, endpoint=mcp_url, headers={"Authorization": f"Bearer {MCP_TOKEN}"}, timeout=20,
    ))
    agent.add_action("ask", [InputEvent], _ask)
    agent.add_action("answer", [ChatResponseEvent], _answer)
    return agent


@pytest.mark.timeout(300)
def test_a_redacted_plan_authenticates_on_the_mini_cluster(tmp_path: Path) -> None:
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    with KeyCheckingChatServer(API_KEY) as model, McpHttpServer("warehouse", token=MCP_TOKEN, only=["stock"]) as mcp:
        model.set_reply_fn(_model)
        agent = _agent(model.base_url, mcp.url)
        text = AgentPlan.from_agent(agent).to_json()
        assert API_KEY not in text and MCP_TOKEN not in text
        config = Configuration()
        config.set_string("restart-strategy.type", "none")
        config.set_string("python.executable", sys.executable)
        env = StreamExecutionEnvironment.get_execution_environment(config)
        env.set_parallelism(1)
        agents_env = AgentsExecutionEnvironment.get_execution_environment(
            env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
        )
        stream = (
            agents_env.from_datastream(env.from_collection([{"id": "r1"}, {"id": "r2"}]), _key)
            .apply(agent)
            .to_datastream()
        )
        with stream.execute_and_collect("secrets-e2e") as collected:
            outputs = sorted(collected, key=lambda o: o["key"])
        headers = list(mcp.headers_seen)

    assert outputs == [{"key": "r1", "answer": "units: 12"}, {"key": "r2", "answer": "units: 12"}]
    assert {e.headers["authorization"] for e in model.exchanges} == {f"Bearer {API_KEY}"}
    assert headers and {h.get("authorization") for h in headers} == {f"Bearer {MCP_TOKEN}"}
