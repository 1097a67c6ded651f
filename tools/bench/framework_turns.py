"""Framework turns run durably against the same agents run directly.

For each agent-framework integration (``flink_agents/integrations/
frameworks/``: Pydantic AI, OpenAI Agents SDK, LangGraph, Google ADK), N
records (default 40 over 4 keys) of one turn each: a model request that
asks for three parallel calls of an instant tool (``double``), then the
final answer. The model is a scripted server on 127.0.0.1 answering every
request after L (default 20 ms): the strict OpenAI one
(``tests/support/scripted_openai_server.py``) for the first three, the
Anthropic one (``scripted_anthropic_server.py``, ADK's ``AnthropicLlm``) for
ADK. The server runs in a thread of this process.

Printed side by side in one run, per framework, the same agent (built per
event loop with ``PerLoop``) in an ``async`` action of the in-process engine
(``AgentEngine`` + ``LocalDriver``, journal in an SQLite file in a temp
dir, ``synchronous=FULL``):

* direct: the plain framework call (``agent.run``, ``Runner.run``,
  ``graph.ainvoke``, ADK's ``Runner.run_async``), no ``run_durably``;
* durable: the same agent through ``run_durably``;
* replay: the durable records again on a fresh engine over the same journal
  (a restore to before them): no request, no tool, no write expected;
  its row's ratio is replay/direct.

Records of one key run one after another, the keys concurrently (one task
per key on one event loop). Columns: wall seconds, durable/direct, journal
writes per turn (SQLite commits / N; the direct mode's engine writes are
printed below the table) and model requests per turn at the server. One
untimed record per mode first warms each framework up (imports, schemas). The
LangGraph graph is ``durable_react_graph`` in both modes: outside a turn its
model and tool wrappers pass straight through. Not a test: run it, read
the figures.

    PYTHONPATH=. .venv/bin/python tools/bench/framework_turns.py
    PYTHONPATH=. .venv/bin/python tools/bench/framework_turns.py --records 80 --keys 8 --latency-ms 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from _common import machine, records

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.integrations.frameworks.per_loop import PerLoop
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores import SQLiteJournalStore
from tests.support.framework_runs import LANGSMITH_VARIABLES
from tests.support.scripted_anthropic_server import AnthropicScriptedServer
from tests.support.scripted_openai_server import OpenAIScriptedServer
from tests.support import host_runs

for _name in LANGSMITH_VARIABLES:  # nothing goes to LangSmith
    os.environ.pop(_name, None)
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

TOOLS = 3


def _calls(arguments: Callable[[int], Any]) -> Dict[str, Any]:
    """A reply asking for ``double(n=i)``, i < 3 (ids ``call_i``, reused every turn)."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "double", "arguments": arguments(i)}}
        for i in range(TOOLS)]}


def openai_reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    """Tool calls unless the turn (after the last user message) has tool results; then the answer."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
    if not results:
        return _calls(lambda i: json.dumps({"n": i}))
    return {"role": "assistant", "content": f"results {results}"}


def anthropic_reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    last = request["messages"][-1]
    blocks = last["content"] if isinstance(last["content"], list) else []
    results = [b.get("content") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return _calls(lambda i: {"n": i})
    return {"role": "assistant", "content": f"results {results}"}


async def _double(n: int) -> int:
    await asyncio.sleep(0)  # instant: the round's results land in one loop turn
    return 2 * n


# -- the four frameworks: (build the agent, run it directly, run it durably) ------------

class Framework:
    name = ""
    server_class: Any = OpenAIScriptedServer
    reply = staticmethod(openai_reply)

    def __init__(self, url: str) -> None:
        self.url = url

    def build(self) -> Any:
        raise NotImplementedError

    async def direct(self, agent: Any, text: str) -> str:
        raise NotImplementedError

    async def durable(self, ctx: Any, agent: Any, text: str) -> str:
        raise NotImplementedError


class PydanticAI(Framework):
    name = "pydantic_ai"

    def build(self) -> Any:
        from openai import AsyncOpenAI
        from pydantic_ai import Agent as PydanticAgent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        # A client of its own: without one, the provider shares a cached HTTP
        # client across loops (the first loop's, closed with it).
        client = AsyncOpenAI(base_url=self.url, api_key="bench-key", max_retries=0)
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
        agent = PydanticAgent(model, name="reviewer", instructions="Answer briefly.")

        @agent.tool_plain
        async def double(n: int) -> int:
            """Twice n."""
            return await _double(n)

        return agent

    async def direct(self, agent: Any, text: str) -> str:
        return (await agent.run(text)).output

    async def durable(self, ctx: Any, agent: Any, text: str) -> str:
        from flink_agents.integrations.frameworks.pydantic_ai import run_durably

        return (await run_durably(ctx, agent, text)).output


class OpenAIAgents(Framework):
    name = "openai_agents"

    def build(self) -> Any:
        from agents import Agent as SdkAgent
        from agents import OpenAIChatCompletionsModel, function_tool
        from openai import AsyncOpenAI

        @function_tool
        async def double(n: int) -> int:
            """Double a number."""
            return await _double(n)

        client = AsyncOpenAI(base_url=self.url, api_key="bench-key", max_retries=0)
        return SdkAgent(name="reviewer", instructions="You answer briefly.",
                        model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client), tools=[double])

    async def direct(self, agent: Any, text: str) -> str:
        from agents import RunConfig, Runner

        # Tracing off, as run_durably turns it off (the exporter would post to api.openai.com).
        return (await Runner.run(agent, text, run_config=RunConfig(tracing_disabled=True))).final_output

    async def durable(self, ctx: Any, agent: Any, text: str) -> str:
        from flink_agents.integrations.frameworks.openai_agents import run_durably

        return (await run_durably(ctx, agent, text)).final_output


class LangGraph(Framework):
    name = "langgraph"

    def build(self) -> Any:
        import httpx
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI

        from flink_agents.integrations.frameworks.langgraph import durable_react_graph

        @tool
        async def double(n: int) -> int:
            """Double n."""
            return await _double(n)

        model = ChatOpenAI(model="gpt-4o-mini", base_url=self.url, api_key="bench-key", use_responses_api=False,
                           streaming=False, max_retries=0,
                           http_async_client=httpx.AsyncClient())  # not the shared cached one
        return durable_react_graph(model, [double], name="reviewer")

    async def direct(self, graph: Any, text: str) -> str:
        from langchain_core.messages import HumanMessage

        return (await graph.ainvoke({"messages": [HumanMessage(text)]}))["messages"][-1].content

    async def durable(self, ctx: Any, graph: Any, text: str) -> str:
        from flink_agents.integrations.frameworks.langgraph import run_durably

        return (await run_durably(ctx, graph, text))["messages"][-1].content


class GoogleADK(Framework):
    name = "google_adk"
    server_class = AnthropicScriptedServer
    reply = staticmethod(anthropic_reply)

    def build(self) -> Any:
        from anthropic import AsyncAnthropic
        from google.adk.agents import LlmAgent
        from google.adk.models.anthropic_llm import AnthropicLlm

        async def double(n: int) -> int:
            """Double n."""
            return await _double(n)

        llm = AnthropicLlm(model="claude-test", max_tokens=256,
                           client=AsyncAnthropic(base_url=self.url, api_key="bench-key", max_retries=0))
        return LlmAgent(name="reviewer", model=llm, instruction="Rate the review.", tools=[double])

    async def direct(self, agent: Any, text: str) -> str:
        from google.adk.apps import App
        from google.adk.runners import Runner
        from google.adk.sessions import InMemorySessionService
        from google.genai import types

        sessions = InMemorySessionService()
        session = await sessions.create_session(app_name="bench", user_id="user")
        runner = Runner(app=App(name="bench", root_agent=agent), session_service=sessions)
        events = [e async for e in runner.run_async(
            user_id="user", session_id=session.id, new_message=types.Content(role="user", parts=[types.Part(text=text)]))]
        return events[-1].content.parts[0].text

    async def durable(self, ctx: Any, agent: Any, text: str) -> str:
        from flink_agents.integrations.frameworks.google_adk import run_durably

        return (await run_durably(ctx, agent, text))[-1].content.parts[0].text


FRAMEWORKS = {f.name: f for f in (PydanticAI, OpenAIAgents, LangGraph, GoogleADK)}


# -- one mode over N records -----------------------------------------------------------

def _flink_agent(framework: Framework, durable: bool) -> Agent:
    agents = PerLoop(framework.build)  # one agent (and SDK client) per event loop

    async def respond(event: InputEvent, ctx: Any) -> None:
        agent = await agents.get()
        text = f"review {event.input['n']}"
        if durable:
            answer = await framework.durable(ctx, agent, text)
        else:
            answer = await framework.direct(agent, text)
        ctx.send_event(OutputEvent(output=answer))

    return Agent().add_action("respond", [InputEvent], respond)


def run_mode(framework: Framework, durable: bool, journal: Path, inputs: List[dict], server: Any) -> Dict[str, Any]:
    """Process ``inputs`` on a fresh engine over the SQLite journal at
    ``journal``: wall seconds, writes, requests at ``server``, outputs."""
    store = SQLiteJournalStore(journal)
    engine = AgentEngine(AgentPlan.from_agent(_flink_agent(framework, durable)), {}, job_id="bench", store=store)
    driver = LocalDriver()
    by_key: Dict[str, List[dict]] = {}
    for record in inputs:
        by_key.setdefault(record["key"], []).append(record)

    async def one_key(key: str, values: List[dict]) -> None:
        for value in values:  # one after another within the key
            await host_runs.process_async(engine, driver, key, value)

    async def all_keys() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(one_key(k, v) for k, v in by_key.items()))  # keys concurrently
        return time.perf_counter() - started

    requests, writes = len(server.requests), store.writes
    try:
        wall = asyncio.run(all_keys())
        writes = store.writes - writes
    finally:
        engine.close()
        store.close()
    outputs = [v for o in driver.outputs for v in o.values()]
    if len(outputs) != len(inputs) or not all(isinstance(o, str) and o.startswith("results") for o in outputs):
        raise SystemExit(f"{framework.name}: unexpected outputs {outputs[:3]} ({len(outputs)} of {len(inputs)})")
    return {"wall": wall, "writes": writes, "requests": len(server.requests) - requests, "outputs": outputs}


def measure(name: str, inputs: List[dict], latency_s: float, tmp: Path) -> Dict[str, Dict[str, Any]]:
    cls = FRAMEWORKS[name]
    with cls.server_class(latency_s=latency_s) as server:
        server.set_reply_fn(cls.reply)
        framework = cls(server.base_url)
        # Warm-up, untimed: one record per mode (imports, schemas, lazy set-up).
        warm = [{"key": "warm", "n": 0}]
        run_mode(framework, False, tmp / f"{name}-warm-direct.sqlite", warm, server)
        run_mode(framework, True, tmp / f"{name}-warm-durable.sqlite", warm, server)
        direct = run_mode(framework, False, tmp / f"{name}-direct.sqlite", inputs, server)
        journal = tmp / f"{name}-durable.sqlite"
        durable = run_mode(framework, True, journal, inputs, server)
        replay = run_mode(framework, True, journal, inputs, server)
    if replay["outputs"] != durable["outputs"]:
        raise SystemExit(f"{name}: the replay's outputs differ from the durable run's")
    return {"direct": direct, "durable": durable, "replay": replay}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=40)
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                        help="comma-separated, of: " + ", ".join(FRAMEWORKS))
    args = parser.parse_args()
    names = [n.strip() for n in args.frameworks.split(",") if n.strip()]
    unknown = [n for n in names if n not in FRAMEWORKS]
    if unknown:
        raise SystemExit(f"unknown frameworks {unknown}; known: {list(FRAMEWORKS)}")
    inputs = records(args.records, args.keys)
    n = len(inputs)
    print(machine())
    print(f"{n} records over {args.keys} keys (keys concurrent, records of a key in order), one turn each: "
          f"{TOOLS} parallel instant tools then the answer; model latency {args.latency_ms:.0f} ms per request; "
          "SQLite journal (synchronous=FULL) in a temp dir")
    results: Dict[str, Dict[str, Dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="framework_turns_") as tmp:
        for name in names:
            results[name] = measure(name, inputs, args.latency_ms / 1000.0, Path(tmp))

    header = f"{'framework':<16}{'direct s':>10}{'durable s':>11}{'durable/direct':>16}" \
             f"{'journal writes/turn':>21}{'requests/turn':>15}"
    print(header)
    print("-" * len(header))
    for name in names:
        r = results[name]
        direct, durable, replay = r["direct"], r["durable"], r["replay"]
        print(f"{name:<16}{direct['wall']:>10.2f}{durable['wall']:>11.2f}{durable['wall'] / direct['wall']:>16.2f}"
              f"{durable['writes'] / n:>21.2f}{durable['requests'] / n:>15.2f}")
        print(f"{'  replay':<16}{'':>10}{replay['wall']:>11.2f}{replay['wall'] / direct['wall']:>16.2f}"
              f"{replay['writes'] / n:>21.2f}{replay['requests'] / n:>15.2f}")
    print("-" * len(header))
    print("direct mode per turn (the engine alone, no run_durably): journal writes "
          + ", ".join(f"{name} {results[name]['direct']['writes'] / n:.2f}" for name in names)
          + "; requests " + ", ".join(f"{name} {results[name]['direct']['requests'] / n:.2f}" for name in names))
    bound = (n / args.keys) * 2 * args.latency_ms / 1000.0
    print(f"bound from the model alone: {n // args.keys} turns per key x 2 requests x {args.latency_ms:.0f} ms "
          f"= {bound:.2f} s")


if __name__ == "__main__":
    main()
