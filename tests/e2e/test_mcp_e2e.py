"""An agent on the PyFlink mini-cluster whose chat model calls MCP tools of two
real MCP servers (issue 17): one over stdio (spawned by the worker, once),
one over streamable HTTP on 127.0.0.1 with a bearer token (in this process),
declared on the environment (``add_resource``).

The model is the scripted OpenAI-compatible server: for each review it asks
for ``product_info`` and ``chart`` (stdio server) and ``stock`` (HTTP
server), then answers with the tool results it was shown. The outputs carry
what the model saw (untrusted-data blocks, the image placeholder), and the
servers' call logs count each tool call once per record; the stdio server
process was started once for the whole job.
"""

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
from flink_agents.runtime.features.untrusted import wrap_untrusted
from tests.support.mcp_servers.http_server import McpHttpServer
from tests.support.mcp_servers.review_tools import PNG_1X1

cloudpickle.register_pickle_by_value(sys.modules[__name__])

STDIO_SCRIPT = str(Path(__file__).parents[1] / "support" / "mcp_servers" / "stdio_server.py")
TOKEN = "e2e-token"


def _ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="reviewer", messages=[
        ChatMessage(role=MessageRole.USER, content=json.dumps(event.input)),
    ]))


def _answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={"key": ctx.key, "shown": json.loads(event.response.content)}))


def _key(record: Dict[str, Any]) -> str:
    return record["id"]


def _model(body: Dict[str, Any], index: int) -> Dict[str, Any]:
    """Round 0: ask for the three MCP tools; then answer with their results."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if results:
        return {"role": "assistant", "content": json.dumps(results)}
    review = json.loads(next(m["content"] for m in body["messages"] if m["role"] == "user"))
    calls = [("product_info", {"product_id": review["product"]}), ("chart", {}), ("stock", {"product_id": review["product"]})]
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        for n, (name, arguments) in enumerate(calls)
    ]}


def mcp_agent(model_url: str, logs: Path) -> Agent:
    """The stdio server ``catalog`` is the agent's; ``warehouse`` (HTTP) comes from the environment."""
    agent = Agent()
    agent.add_resource("catalog", ResourceType.MCP_SERVER, ResourceDescriptor(
        clazz=ResourceName.MCP_SERVER, command=sys.executable,
        args=[STDIO_SCRIPT, "--name", "catalog", "--only", "product_info,chart"],
        env={"MCP_CALL_LOG": str(logs / "stdio-calls.log"), "MCP_START_LOG": str(logs / "stdio-starts.log")},
        timeout=20,
    ))
    agent.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=model_url, max_retries=0, timeout_s=20.0,
    ))
    agent.add_resource("reviewer", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="openai", model="gpt-test",
        tools=["product_info", "chart", "stock"],
    ))
    agent.add_action("ask", [InputEvent], _ask)
    agent.add_action("answer", [ChatResponseEvent], _answer)
    return agent


@pytest.mark.timeout(300)
def test_an_agent_on_the_mini_cluster_calls_tools_of_a_stdio_and_an_http_mcp_server(
    scripted_chat_server: Any, tmp_path: Path
) -> None:
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    scripted_chat_server.set_reply_fn(_model)
    logs = tmp_path / "logs"
    logs.mkdir()
    records = [{"id": f"r{i}", "product": f"p{i}", "text": "great shoes"} for i in range(3)]
    with McpHttpServer("warehouse", token=TOKEN, call_log=str(logs / "http-calls.log"), only=["stock"]) as http:
        config = Configuration()
        config.set_string("restart-strategy.type", "none")
        config.set_string("python.executable", sys.executable)
        env = StreamExecutionEnvironment.get_execution_environment(config)
        env.set_parallelism(1)
        agents_env = AgentsExecutionEnvironment.get_execution_environment(
            env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
        )
        agents_env.add_resource("warehouse", ResourceType.MCP_SERVER, ResourceDescriptor(
            clazz=ResourceName.MCP_SERVER, endpoint=http.url, token=TOKEN, timeout=20,
        ))
        stream = (
            agents_env.from_datastream(env.from_collection(records), _key)
            .apply(mcp_agent(scripted_chat_server.base_url, logs))
            .to_datastream()
        )
        with stream.execute_and_collect("mcp-e2e") as collected:
            outputs = sorted(collected, key=lambda o: o["key"])
        headers = list(http.headers_seen)

    assert [o["key"] for o in outputs] == ["r0", "r1", "r2"]
    for i, output in enumerate(outputs):
        product_info, chart, stock = output["shown"]
        assert product_info == wrap_untrusted(f"product p{i}: Trail Runner 2, category shoes", "mcp:catalog/product_info")
        assert chart == wrap_untrusted(f"[image: image/png, {len(PNG_1X1)} bytes]", "mcp:catalog/chart")
        stock_json = json.dumps({"product_id": f"p{i}", "units": 12, "warehouse": "north"}, indent=2)
        assert stock == wrap_untrusted(stock_json, "mcp:warehouse/stock")
    # Offered to the model with their input schemas.
    first = scripted_chat_server.requests[0]
    assert {t["function"]["name"] for t in first["tools"]} == {"product_info", "chart", "stock"}
    # Each tool called once per record; the stdio server started once for the job.
    stdio_calls = (logs / "stdio-calls.log").read_text().splitlines()
    assert sorted(stdio_calls) == sorted(["catalog product_info", "catalog chart"] * 3)
    assert (logs / "http-calls.log").read_text().splitlines() == ["warehouse stock"] * 3
    assert len((logs / "stdio-starts.log").read_text().splitlines()) == 1
    assert headers and {h.get("authorization") for h in headers} == {f"Bearer {TOKEN}"}
    assert len(scripted_chat_server.requests) == 6
