"""MCP servers, tools and prompts (issue 17), on real MCP servers written with
the ``mcp`` SDK (``tests/support/mcp_servers``): streamable HTTP on
127.0.0.1 (in a thread) and stdio (a script spawned with ``sys.executable``).

What a user sees: tools listed at first use, values of every content type,
what the model is shown (untrusted-data blocks, image placeholders), prompts,
auth, timeouts, reconnects with a bounded number of retries, and MCP tool
calls journaled like any tool call (a replay does not call the server).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.decorators import action, chat_model_connection, chat_model_setup, mcp_server
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.integrations.mcp import (
    MCPServer,
    MCPServerUnavailable,
    MCPSessionError,
    MCPTimeout,
    MCPTool,
    MCPToolError,
    extract_mcp_content_item,
)
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.plan.errors import PlanError
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.features.untrusted import unwrap_untrusted, wrap_untrusted
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.engine_runs import run_record
from tests.support.mcp_servers.http_server import McpHttpServer
from tests.support.mcp_servers.review_tools import BLOB, INJECTION, PNG_1X1

STDIO_SCRIPT = str(Path(__file__).parents[1] / "support" / "mcp_servers" / "stdio_server.py")
TOKEN = "s3cret-token"


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing catches it)."""


@pytest.fixture
def call_log(tmp_path: Path) -> Path:
    return tmp_path / "calls.log"


def calls(log: Path) -> List[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def http(call_log: Path) -> Any:
    with McpHttpServer("reviews-http", token=TOKEN, call_log=str(call_log)) as server:
        yield server


def stdio_server(call_log: Path, *extra: str, **fields: Any) -> MCPServer:
    env = {"MCP_CALL_LOG": str(call_log), **fields.pop("env", {})}
    return MCPServer(command=sys.executable, args=[STDIO_SCRIPT, *extra], env=env, **fields)


# -- the resource on its own ------------------------------------------------------------


def test_a_server_needs_exactly_one_transport() -> None:
    with pytest.raises(ValueError, match="exactly one of endpoint"):
        MCPServer()
    with pytest.raises(ValueError, match="exactly one of endpoint"):
        MCPServer(endpoint="http://127.0.0.1:1/mcp", command="python")
    with pytest.raises(ValueError, match="http\\(s\\) URL"):
        MCPServer(endpoint="ftp://example/mcp")


def test_a_server_and_a_tool_round_trip_through_json_as_in_0_3_1() -> None:
    import httpx2

    server = MCPServer(endpoint="http://127.0.0.1:1/mcp", auth=httpx2.BasicAuth("ann", "pw"), timeout=5)
    restored = MCPServer.model_validate_json(server.model_dump_json())
    assert (restored.endpoint, restored.timeout, type(restored.auth)) == (server.endpoint, 5, httpx2.BasicAuth)
    metadata = {"name": "add", "description": "Add.", "args_schema": {"type": "object", "properties": {}}}
    tool = MCPTool(metadata=metadata, mcp_server=server)
    assert "mcp_server" not in tool.model_dump()
    assert MCPTool.model_validate(tool.model_dump()).metadata == tool.metadata


def test_http_tools_are_listed_at_first_use_with_the_token_and_headers(http: McpHttpServer) -> None:
    server = MCPServer(endpoint=http.url, token=TOKEN, headers={"X-Tenant": "acme"})
    try:
        assert http.headers_seen == []  # nothing connects before first use
        tools = server.list_tools()
        assert [t.name for t in tools][:3] == ["product_info", "stock", "server_pid"]
        assert all(isinstance(t, MCPTool) for t in tools)
        info = server.get_tool_metadata("product_info")
        assert info.args_schema["required"] == ["product_id"]
        seen = len(http.headers_seen)
        server.list_tools()  # cached: no request
        assert len(http.headers_seen) == seen
        assert server.get_tool("product_info").call(product_id="p1")[0] == "product p1: Trail Runner 2, category shoes"
        assert {h.get("authorization") for h in http.headers_seen} == {f"Bearer {TOKEN}"}
        assert {h.get("x-tenant") for h in http.headers_seen} == {"acme"}
        assert server.connections_opened == 1 and server.session is not None
    finally:
        server.close()
    assert server.session is None


def test_a_wrong_token_is_refused_naming_the_server(http: McpHttpServer) -> None:
    server = MCPServer(endpoint=http.url, token="wrong", max_retries=3)
    try:
        with pytest.raises(MCPSessionError, match=f"MCP server \\({http.url}\\): could not open a session"):
            server.list_tools()
    finally:
        server.close()


def test_every_content_type_has_a_documented_value_and_model_text(http: McpHttpServer) -> None:
    server = MCPServer(endpoint=http.url, token=TOKEN)
    server.bind_resource_name("reviews")
    try:
        tool = {t.name: t for t in server.list_tools()}
        png = base64.b64encode(PNG_1X1).decode()
        blob = base64.b64encode(BLOB).decode()
        stock = {"product_id": "p1", "units": 12, "warehouse": "north"}
        values = {
            "stock": tool["stock"].call(product_id="p1"),
            "chart": tool["chart"].call(),
            "spec_sheet": tool["spec_sheet"].call(),
            "manual_link": tool["manual_link"].call(),
        }
        assert values == {
            "stock": [json.dumps(stock, indent=2), {"type": "structured", "data": stock}],
            "chart": [{"type": "image", "data": png, "mimeType": "image/png"}],
            "spec_sheet": [
                {"type": "resource", "uri": "file:///specs/p1.txt", "mimeType": "text/plain", "text": "weight: 240 g"},
                {"type": "resource", "uri": "file:///specs/p1.bin", "mimeType": "application/octet-stream", "blob": blob},
            ],
            "manual_link": [{"type": "resource_link", "uri": "file:///manuals/p1.pdf", "name": "manual",
                             "mimeType": "application/pdf", "description": None}],
        }
        shown = {name: unwrap_untrusted(tool[name].result_for_model(value)) for name, value in values.items()}
        assert shown == {
            "stock": json.dumps(stock, indent=2),  # the text block; structured content is not repeated
            "chart": f"[image: image/png, {len(PNG_1X1)} bytes]",  # never the base64
            "spec_sheet": "[resource file:///specs/p1.txt (text/plain)]\nweight: 240 g\n"
                          f"[resource file:///specs/p1.bin: application/octet-stream, {len(BLOB)} bytes]",
            "manual_link": "[resource link file:///manuals/p1.pdf (manual, application/pdf)]",
        }
        assert tool["chart"].result_for_model(values["chart"]).startswith('<untrusted-data source="mcp:reviews/chart">')
        with pytest.raises(MCPToolError, match="MCP tool 'broken' of server 'reviews' failed: Error executing tool broken: warehouse database is down"):
            tool["broken"].call()
    finally:
        server.close()


def test_unknown_content_falls_back_to_its_json_form() -> None:
    import mcp.types as types

    audio = types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav")
    assert extract_mcp_content_item(audio) == {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}

    class Other:
        def model_dump(self, **_: Any) -> Dict[str, Any]:
            return {"type": "future_block", "x": 1}

    assert extract_mcp_content_item(Other()) == {"type": "future_block", "x": 1}


def test_a_slow_tool_times_out_and_the_session_goes_on(http: McpHttpServer) -> None:
    # The timeout bounds every request, also the next call's tools/list (the
    # SDK validates results against the listed schemas): 0.3 s was too short
    # for that listing on a loaded CI machine.
    server = MCPServer(endpoint=http.url, token=TOKEN, timeout=1.0)
    try:
        started = time.monotonic()
        with pytest.raises(MCPTimeout, match="did not answer within 1.0 s"):
            server.call_tool("slow", {"seconds": 3.0})
        assert time.monotonic() - started < 2.5
        assert server.call_tool("product_info", {"product_id": "p2"})[0].startswith("product p2")
        assert server.connections_opened == 1
    finally:
        server.close()


def test_prompts_are_filled_by_the_server_and_check_their_arguments(http: McpHttpServer) -> None:
    server = MCPServer(endpoint=http.url, token=TOKEN)
    server.bind_resource_name("reviews")
    try:
        prompts = {p.name: p for p in server.list_prompts()}
        assert sorted(prompts) == ["review_summary", "support_reply"]
        summary = prompts["review_summary"]
        assert summary.format_messages(product="Trail Runner 2", unrelated="x") == [
            ChatMessage(role=MessageRole.USER, content="Summarize the reviews of Trail Runner 2 in a neutral tone.")
        ]
        assert summary.format_string(product="Trail Runner 2", tone="cheerful") == \
            "Summarize the reviews of Trail Runner 2 in a cheerful tone."
        with pytest.raises(ValueError, match="MCP prompt 'review_summary' of server 'reviews' needs argument 'product'"):
            summary.format_messages(tone="dry")
        roles = [m.role for m in prompts["support_reply"].format_messages(customer="Ann")]
        assert roles == [MessageRole.USER, MessageRole.ASSISTANT]
    finally:
        server.close()


def test_a_server_without_prompts_lists_none(call_log: Path) -> None:
    with McpHttpServer("bare", with_prompts=False, call_log=str(call_log)) as bare:
        server = MCPServer(endpoint=bare.url)
        try:
            assert server.list_prompts() == []
            assert "product_info" in [t.name for t in server.list_tools()]
        finally:
            server.close()


# -- stdio: one process per instance, reconnects ----------------------------------------


class _CatcherWithoutFileno:
    """What ``sys.stderr`` is inside PyFlink's thread mode (pemja's
    ``StdErrCatcher``): writable, but no file descriptor for a subprocess."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_a_stdio_server_starts_where_stderr_has_no_file_descriptor(
    call_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stderr", _CatcherWithoutFileno())
    server = stdio_server(call_log)
    try:
        assert "product_info" in [t.name for t in server.list_tools()]
    finally:
        server.close()


def test_a_stdio_command_that_cannot_start_fails_at_once_naming_it() -> None:
    server = MCPServer(command="/nonexistent/mcp-server", max_retries=3)
    started = time.monotonic()
    try:
        with pytest.raises(MCPSessionError, match="FileNotFoundError") as failure:
            server.list_tools()
        assert "/nonexistent/mcp-server" in str(failure.value)
        assert time.monotonic() - started < 2.0, "a command that cannot start is not retried"
    finally:
        server.close()




def test_a_stdio_server_is_spawned_once_per_instance_reconnects_when_it_dies_and_ends_with_close(
    call_log: Path,
) -> None:
    # Each server process dies (exits without answering) on its second counted tool call.
    server = stdio_server(call_log, env={"MCP_EXIT_ON_CALL": "2"}, max_retries=2, retry_backoff_s=0.01)
    try:
        first_pid = int(server.call_tool("server_pid")[0])
        assert server.call_tool("product_info", {"product_id": "a"})[0].startswith("product a")
        assert int(server.call_tool("server_pid")[0]) == first_pid  # one process for all calls
        assert server.connections_opened == 1
        # The process dies under this call: a new one is spawned and the call retried.
        assert server.call_tool("product_info", {"product_id": "b"})[0].startswith("product b")
        second_pid = int(server.call_tool("server_pid")[0])
        assert second_pid != first_pid and server.connections_opened == 2
        # The call in flight when the process died ran there too (at least once).
        assert calls(call_log) == ["reviews product_info"] * 3
    finally:
        server.close()
    deadline = time.monotonic() + 5
    while (_alive(first_pid) or _alive(second_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(first_pid) and not _alive(second_pid), "a stdio server outlived close()"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_server_that_goes_away_mid_session_gives_up_after_max_retries(call_log: Path) -> None:
    down = McpHttpServer("gone", token=TOKEN, call_log=str(call_log)).start()
    server = MCPServer(endpoint=down.url, token=TOKEN, max_retries=2, retry_backoff_s=0.01)
    server.bind_resource_name("flaky")
    try:
        assert server.call_tool("product_info", {"product_id": "a"})[0].startswith("product a")
        down.stop()
        started = time.monotonic()
        with pytest.raises(MCPServerUnavailable, match="MCP server 'flaky' .* unavailable after 3 attempt") as failed:
            server.call_tool("product_info", {"product_id": "b"})
        assert failed.value.attempts == 3
        assert time.monotonic() - started < 3  # backoff 0.01 s, 0.02 s: bounded, not forever
        assert calls(call_log) == ["gone product_info"]
    finally:
        server.close()


# -- in an agent ----------------------------------------------------------------------


def _tool_call(name: str, **arguments: Any) -> Dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _assistant(*calls_: Dict[str, Any]) -> Dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for n, c in enumerate(calls_)
    ]}


def review_agent(endpoint: str, base_url: str, tools: List[str], prompt: str | None = None) -> Agent:
    """Asks the setup ``reviewer`` (OpenAI dialect) offering MCP ``tools``."""

    class McpReviewAgent(Agent):
        @mcp_server
        @staticmethod
        def reviews() -> ResourceDescriptor:
            return ResourceDescriptor(clazz=ResourceName.MCP_SERVER, endpoint=endpoint, token=TOKEN, timeout=5)

        @chat_model_connection
        @staticmethod
        def openai() -> ResourceDescriptor:
            return ResourceDescriptor(clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION,
                                      base_url=base_url, max_retries=0, timeout_s=10.0)

        @chat_model_setup
        @staticmethod
        def reviewer() -> ResourceDescriptor:
            return ResourceDescriptor(clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
                                      connection="openai", model="gpt-test", tools=tools, prompt=prompt)

        @action(InputEvent)
        @staticmethod
        def ask(event: Event, ctx: Any) -> None:
            ctx.send_event(ChatRequestEvent(
                model="reviewer", messages=[ChatMessage(role=MessageRole.USER, content=str(event.input))],
                prompt_args={"product": "Trail Runner 2"},
            ))

        @action(ChatResponseEvent)
        @staticmethod
        def answer(event: Event, ctx: Any) -> None:
            ctx.send_event(OutputEvent(output=event.response.content))

    return McpReviewAgent()


def test_a_chat_model_calls_mcp_tools_and_sees_their_results_as_untrusted_data(
    http: McpHttpServer, scripted_chat_server: Any, call_log: Path
) -> None:
    scripted_chat_server.replies.extend([
        _assistant(_tool_call("product_info", product_id="p1"), _tool_call("chart"),
                   _tool_call("inject"), _tool_call("broken")),
        {"role": "assistant", "content": "Trail Runner 2 is in stock."},
    ])
    agent = review_agent(http.url, scripted_chat_server.base_url, ["product_info", "chart", "inject", "broken"])
    driver = run_record(agent, InMemoryJournalStore(), "how is p1?")
    assert driver.outputs == [{"k": "Trail Runner 2 is in stock."}]
    first, second = scripted_chat_server.requests
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert sorted(offered) == ["broken", "chart", "inject", "product_info"]
    assert offered["product_info"]["parameters"]["properties"]["product_id"]["type"] == "string"  # its inputSchema
    results = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert results[0] == wrap_untrusted("product p1: Trail Runner 2, category shoes", "mcp:reviews/product_info")
    assert results[1] == wrap_untrusted(f"[image: image/png, {len(PNG_1X1)} bytes]", "mcp:reviews/chart")
    assert unwrap_untrusted(results[2]) == INJECTION and results[2].count("</untrusted-data>") == 1
    assert results[3] == "Error: " + wrap_untrusted(
        "MCPToolError: MCP tool 'broken' of server 'reviews' failed: Error executing tool broken: warehouse database is down", "mcp:reviews/broken")
    # Each called once (concurrently: in any order).
    assert sorted(calls(call_log)) == ["reviews-http broken", "reviews-http chart", "reviews-http inject",
                                       "reviews-http product_info"]


def test_an_mcp_prompt_is_the_setups_prompt(http: McpHttpServer, scripted_chat_server: Any) -> None:
    scripted_chat_server.replies.append({"role": "assistant", "content": "ok"})
    agent = review_agent(http.url, scripted_chat_server.base_url, [], prompt="review_summary")
    assert run_record(agent, InMemoryJournalStore(), "go").outputs == [{"k": "ok"}]
    sent = [(m["role"], m["content"]) for m in scripted_chat_server.requests[0]["messages"]]
    assert ("user", "Summarize the reviews of Trail Runner 2 in a neutral tone.") in sent


def test_names_no_server_offers_fail_at_first_use_listing_what_they_offer(
    call_log: Path, scripted_chat_server: Any
) -> None:
    with McpHttpServer("bare", token=TOKEN, with_prompts=False, call_log=str(call_log)) as bare:
        # Compiles (the servers are not asked at compile time) ...
        agent = review_agent(bare.url, scripted_chat_server.base_url, ["product_info", "no_such_tool"])
        AgentPlan.from_agent(agent)
        assert bare.headers_seen == []
        # ... and fails on first use, naming what the servers offer.
        with pytest.raises(ActionFailed, match="none of its MCP servers offers it .*'reviews': \\['product_info'"):
            run_record(agent, InMemoryJournalStore(), "x")
        prompt_agent = review_agent(bare.url, scripted_chat_server.base_url, [], prompt="review_summary")
        with pytest.raises(ActionFailed, match="prompt resource 'review_summary'.*offered: \\{'reviews': \\[\\]\\}"):
            run_record(prompt_agent, InMemoryJournalStore(), "x")


def test_an_action_gets_mcp_tools_and_prompts_by_name(http: McpHttpServer, call_log: Path) -> None:
    async def use(event: Event, ctx: Any) -> None:
        tool = ctx.get_resource("product_info", ResourceType.TOOL)
        prompt = ctx.get_resource("review_summary", ResourceType.PROMPT)
        ctx.send_event(OutputEvent(output={
            "tool": [type(tool).__name__, tool.tool_type().value, (await tool.acall(product_id="p3"))[0]],
            "prompt": prompt.format_string(product="p3"),
        }))

    agent = Agent()
    agent.add_resource("reviews", ResourceType.MCP_SERVER,
                       ResourceDescriptor(clazz=ResourceName.MCP_SERVER, endpoint=http.url, token=TOKEN))
    agent.add_action("use", [InputEvent], use)
    assert run_record(agent, InMemoryJournalStore(), "x").outputs == [{"k": {
        "tool": ["MCPTool", "mcp", "product p3: Trail Runner 2, category shoes"],
        "prompt": "Summarize the reviews of p3 in a neutral tone.",
    }}]


def test_without_mcp_servers_an_unknown_tool_is_a_plan_error() -> None:
    agent = Agent()
    agent.add_resource("reviewer", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="c", model="m", tools=["product_info"]))
    with pytest.raises(PlanError, match="refers to tools 'product_info'"):
        AgentPlan.from_agent(agent)


def local_product_info(product_id: str) -> str:
    """A local tool named like an MCP tool."""
    return f"local {product_id}"


def _tool_agent(*servers: str, local: bool = False) -> Agent:
    """Sends its own ToolRequestEvent for product_info; outputs the response."""
    agent = Agent()
    for n, url in enumerate(servers):
        agent.add_resource(f"server{n}", ResourceType.MCP_SERVER,
                           ResourceDescriptor(clazz=ResourceName.MCP_SERVER, endpoint=url, token=TOKEN))
    if local:
        agent.add_resource("product_info", ResourceType.TOOL, local_product_info)

    def request(event: Event, ctx: Any) -> None:
        ctx.send_event(ToolRequestEvent(model="none", offered_tools=["product_info"], tool_calls=[
            {"id": "c1", "type": "function", "function": {"name": "product_info", "arguments": {"product_id": "p7"}}}
        ]))

    def respond(event: Event, ctx: Any) -> None:
        ctx.durable_execute(after_tool)  # journaled: the tool's result is durable before it runs
        response = ToolResponseEvent.from_event(event)
        ctx.send_event(OutputEvent(output={"responses": response.responses, "errors": response.errors}))

    agent.add_action("request", [InputEvent], request)
    agent.add_action("respond", [ToolResponseEvent], respond)
    return agent


CRASH = {"after_tool": False}


def after_tool() -> None:
    """The journaled call after the tool call; crashes the process once."""
    if CRASH["after_tool"]:
        CRASH["after_tool"] = False
        raise Crash("process died after the tool call")


def test_an_mcp_tool_call_is_journaled_and_a_replay_does_not_call_the_server(
    http: McpHttpServer, call_log: Path
) -> None:
    store = InMemoryJournalStore()
    CRASH["after_tool"] = True
    with pytest.raises(Crash):
        run_record(_tool_agent(http.url), store, "x")
    assert calls(call_log) == ["reviews-http product_info"]
    driver = run_record(_tool_agent(http.url), store, "x")  # a restore to before the record
    # The user-facing value, as extract_mcp_content_item gives it.
    text = "product p7: Trail Runner 2, category shoes"
    assert driver.outputs == [{"k": {"responses": {"c1": [text, {"type": "structured", "data": {"result": text}}]},
                                     "errors": {}}}]
    assert calls(call_log) == ["reviews-http product_info"]  # not called again
    functions = [entry.function_id for run in store._runs.values() for (entry, _) in run.values()]
    assert functions.count("tool:product_info") == 1


def test_a_local_tool_wins_over_an_mcp_tool_of_the_same_name(http: McpHttpServer, call_log: Path) -> None:
    CRASH["after_tool"] = False
    driver = run_record(_tool_agent(http.url, local=True), InMemoryJournalStore(), "x")
    assert driver.outputs == [{"k": {"responses": {"c1": "local p7"}, "errors": {}}}]
    assert calls(call_log) == []


def test_a_name_two_servers_offer_is_refused_naming_both(http: McpHttpServer, call_log: Path) -> None:
    CRASH["after_tool"] = False
    with McpHttpServer("second", token=TOKEN) as second:
        driver = run_record(_tool_agent(http.url, second.url), InMemoryJournalStore(), "x")
    (output,) = driver.outputs
    assert "offered by more than one MCP server: 'server0', 'server1'" in output["k"]["errors"]["c1"]
    assert calls(call_log) == []
