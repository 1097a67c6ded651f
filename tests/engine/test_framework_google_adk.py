"""Google ADK agents run durably (``integrations.frameworks.google_adk``):
the real ``google-adk`` package, its ``AnthropicLlm`` over the real
``anthropic`` SDK against the scripted Anthropic server, in the in-process
engine (``AgentEngine`` + ``LocalDriver`` + ``InMemoryJournalStore``)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytest.importorskip("google.adk")

from anthropic import AsyncAnthropic  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig  # noqa: E402
from google.adk.models.anthropic_llm import AnthropicLlm  # noqa: E402
from google.adk.tools.agent_tool import AgentTool  # noqa: E402
from google.adk.tools.base_toolset import BaseToolset  # noqa: E402
from google.adk.tools.function_tool import FunctionTool  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402

from flink_agents.runtime.execution.context import ActionContext
from flink_agents.api.agents.agent import Agent  # noqa: E402
from flink_agents.api.decorators import action  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402
from flink_agents.integrations.frameworks.google_adk import run_durably  # noqa: E402
from flink_agents.runtime.local.driver import LocalDriver  # noqa: E402
from flink_agents.stores.memory_store import InMemoryJournalStore  # noqa: E402
from tests.support.framework_runs import (  # noqa: E402
    CRASH_MODES, PRICES, THREE_TOOLS_COMMITS, Crash, check_usage, check_one_request_turn, crash_and_recover, engine_for,
    first_model_reply, kinds_by_commit, process, progress_engine, refuse_writes, run_local, run_records,
)
from tests.support.scripted_anthropic_server import AnthropicScriptedServer  # noqa: E402
from tests.support import host_runs  # noqa: E402

CALLS: Counter = Counter()
_SETTINGS: Dict[str, Any] = {}


async def double(n: int, tool_context: ToolContext) -> int:
    """Double n."""
    CALLS[f"tool:{n}"] += 1
    tool_context.state[f"doubled_{n}"] = 2 * n  # journaled with the result, applied again on a replay
    await asyncio.sleep(0)  # instant tools: the round's results land in one loop turn
    return 2 * n


class Calculator(BaseToolset):
    """A toolset listing ``double`` (prefixed: ``calc_double``)."""

    async def get_tools(self, readonly_context: Any = None) -> List[Any]:
        CALLS["list"] += 1
        return [FunctionTool(double)]


def _adk_agent(base_url: str, after_model_callback: Any = None, toolset: bool = False,
               tools: Any = None) -> LlmAgent:
    llm = AnthropicLlm(model="claude-test", max_tokens=256,
                       client=AsyncAnthropic(base_url=base_url, api_key="k", max_retries=0))
    tools = [Calculator(tool_name_prefix="calc")] if toolset else (tools or [double])
    return LlmAgent(name="reviewer", model=llm, instruction="Rate the review.", tools=tools,
                    after_model_callback=after_model_callback)


class AdkAgent(Agent):
    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        agent = _adk_agent(_SETTINGS["url"], _SETTINGS.get("after_model"), _SETTINGS.get("toolset", False))
        events = await run_durably(
            ctx, agent, event.input, conversation=_SETTINGS.get("conversation"),
            conversation_max_messages=_SETTINGS.get("max_messages", 40),
        )
        final = events[-1]
        ctx.send_event(OutputEvent(output={
            "answer": final.content.parts[0].text,
            "ids": [final.invocation_id, final.id, final.timestamp],
            "state": {k: v for e in events for k, v in e.actions.state_delta.items()},
        }))


def _reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    """Asks for ``_SETTINGS["tools"]`` calls of ``double`` (provider ids
    ``call_0``.. every turn) unless the last message carries tool results;
    then answers with the results and the user texts of the request."""
    last = request["messages"][-1]
    blocks = last["content"] if isinstance(last["content"], list) else []
    results = [b["content"] for m in request["messages"][-2:] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    tools = _SETTINGS.get("tools", 0)
    if tools and not any(b.get("type") == "tool_result" for b in blocks) and last["role"] == "user" and not results:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": _SETTINGS.get("tool", "double"),
                                                                 "arguments": {"n": i}}}
            for i in range(tools)]}
    return {"role": "assistant", "content": f"results {results}"}


@pytest.fixture
def server() -> Any:
    CALLS.clear()
    _SETTINGS.clear()
    with AnthropicScriptedServer() as srv:
        srv.set_reply_fn(_reply)
        _SETTINGS["url"] = srv.base_url
        yield srv


def _process(store: InMemoryJournalStore, value: Any = "go", key: str = "k",
             config: Dict[str, Any] | None = None) -> LocalDriver:
    return process(AdkAgent(), store, value, key, config)


def _user_texts(request: Dict[str, Any]) -> List[str]:
    return [b["text"] for m in request["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "text"]


def test_a_plain_turn_commits_twice_and_a_replay_asks_and_writes_nothing(server: AnthropicScriptedServer) -> None:
    store = InMemoryJournalStore()
    driver = _process(store)
    assert driver.outputs[0]["k"]["answer"] == "results []"
    assert store.writes == 2 and len(server.requests) == 1
    check_one_request_turn(driver.progress, "results []")
    # A restore to before the record: nothing asked, nothing written, the same output.
    refuse_writes(store)
    replayed = _process(store)
    assert replayed.outputs == driver.outputs and len(server.requests) == 1


def test_a_round_of_three_parallel_tools_commits_four_times_in_follower_order(
    server: AnthropicScriptedServer,
) -> None:
    _SETTINGS["tools"] = 3
    store = InMemoryJournalStore()
    driver = _process(store)
    assert driver.outputs[0]["k"]["answer"] == "results ['0', '2', '4']"
    assert CALLS == Counter({"tool:0": 1, "tool:1": 1, "tool:2": 1}) and len(server.requests) == 2
    assert driver.outputs[0]["k"]["state"] == {"doubled_0": 0, "doubled_1": 2, "doubled_2": 4}
    # start | reply 1 | the three results (one group commit) | reply 2 with the run's end
    assert store.writes == 4
    assert kinds_by_commit(driver.progress) == THREE_TOOLS_COMMITS
    first = first_model_reply(driver.progress)
    assert [(c["name"], json.loads(c["arguments"])) for c in first["tool_calls"]] == [
        ("double", {"n": 0}), ("double", {"n": 1}), ("double", {"n": 2})]
    # The provider's ids (call_0..) were rewritten: the second request pairs the rewritten ones.
    tool_uses = [b["id"] for b in server.requests[1]["messages"][1]["content"] if b["type"] == "tool_use"]
    assert len(set(tool_uses)) == 3 and not any(i.startswith("call_") for i in tool_uses)
    replayed = _process(store)
    assert replayed.outputs == driver.outputs and len(server.requests) == 2 and sum(CALLS.values()) == 3


def test_the_tools_of_a_toolset_are_journaled_under_their_listed_names(server: AnthropicScriptedServer) -> None:
    _SETTINGS.update(tools=3, toolset=True, tool="calc_double")
    store = InMemoryJournalStore()
    driver = _process(store)
    assert driver.outputs[0]["k"]["answer"] == "results ['0', '2', '4']" and store.writes == 4
    assert [t["name"] for t in server.requests[0]["tools"]] == ["calc_double"]
    tool_results = [r for r in driver.progress if r["kind"] == "tool_result"]
    assert len(tool_results) == 3
    runs = Counter({k: v for k, v in CALLS.items() if k.startswith("tool:")})
    assert runs == Counter({"tool:0": 1, "tool:1": 1, "tool:2": 1})
    # A replay lists the tools again (outside the journal) and runs none of them.
    replayed = _process(store)
    assert replayed.outputs == driver.outputs and len(server.requests) == 2
    assert Counter({k: v for k, v in CALLS.items() if k.startswith("tool:")}) == runs


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_at_every_write_recovers_without_repeating_completed_calls(
    server: AnthropicScriptedServer, mode: str,
) -> None:
    _SETTINGS["tools"] = 3
    expected_store = InMemoryJournalStore()
    expected = _process(expected_store)
    writes = expected_store.writes
    assert writes == 4
    for k in range(1, writes + 1):
        CALLS.clear()
        server.requests.clear()
        store = InMemoryJournalStore()
        recovered = crash_and_recover(store, mode, k, lambda: _process(store))
        # The same answer and ids (the clock is the crashed attempt's start, journaled).
        assert [(o["k"]["answer"], o["k"]["ids"][:2]) for o in recovered.outputs] == [
            (o["k"]["answer"], o["k"]["ids"][:2]) for o in expected.outputs], f"crash {mode} {k}"
        if mode == "after_write":
            # Nothing completed and committed runs again: each tool once, each request once.
            assert CALLS == Counter({"tool:0": 1, "tool:1": 1, "tool:2": 1}), f"crash after write {k}: {CALLS}"
            assert len(server.requests) == 2, f"crash after write {k}"
        else:
            assert all(1 <= n <= 2 for n in CALLS.values()) and len(CALLS) == 3
            assert 2 <= len(server.requests) <= 3, f"crash before write {k}"


def test_steering_reaches_the_next_model_request_and_stays_in_the_turn(server: AnthropicScriptedServer) -> None:
    def two_rounds(request: Dict[str, Any], index: int) -> Dict[str, Any]:
        if index < 2:  # two rounds of one call, call_0 both times, then the answer
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "double", "arguments": {"n": index}}}]}
        return _reply(request, index)

    server.set_reply_fn(two_rounds)
    store = InMemoryJournalStore()
    engine = progress_engine(AdkAgent(), store, {"steering.enabled": True})
    driver = LocalDriver()

    def steer_once(callback_context: Any, llm_response: Any) -> None:
        # Runs on the loop right after the first model request: the message
        # arrives while the turn is between its requests.
        if len(server.requests) == 1:
            host_runs.steer(engine, driver, "k", "answer in French")
        return None

    _SETTINGS["after_model"] = steer_once
    run_records(engine, [("k", "go")], driver)
    assert len(server.requests) == 3 and CALLS == Counter({"tool:0": 1, "tool:1": 1})
    assert _user_texts(server.requests[0]) == ["go"]
    steered = {"role": "user", "content": [{"type": "text", "text": "answer in French"}]}
    # Request 2: after the first tool result, where it was taken.
    assert server.requests[1]["messages"][-1] == steered
    # Request-only, so re-inserted at the same place in the turn's later request.
    assert server.requests[2]["messages"][3] == steered and len(server.requests[2]["messages"]) == 6
    assert _user_texts(server.requests[2]) == ["go", "answer in French"]
    assert [r["kind"] for r in driver.progress].count("steering_consumed") == 1


def test_a_per_key_conversation_carries_whole_turns_and_reused_provider_ids_pair_right(
    server: AnthropicScriptedServer,
) -> None:
    _SETTINGS.update(tools=1, conversation="per_key", max_messages=8)
    # Each turn: user, function call, function response, answer = 4 events.
    driver = run_records(engine_for(AdkAgent(), InMemoryJournalStore()), [("k", f"q{n}") for n in range(4)])
    assert [o["k"]["answer"] for o in driver.outputs] == ["results ['0']"] * 4
    assert len(server.requests) == 8 and not server.violations
    # The 4th record's first request: the whole turns of q1 and q2 (8 events
    # at most), then the new prompt; the provider said call_0 every turn.
    last = server.requests[6]
    assert _user_texts(last) == ["q1", "q2", "q3"] and len(last["messages"]) == 9
    tool_uses = [b["id"] for m in last["messages"] if isinstance(m["content"], list)
                 for b in m["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in last["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b["type"] == "tool_result"]
    assert len(set(tool_uses)) == 2 and results == tool_uses


def test_ids_and_clock_come_from_the_record_and_replay_the_same(server: AnthropicScriptedServer) -> None:
    store = InMemoryJournalStore()
    first = _process(store)
    replayed = _process(store)
    other_key = _process(InMemoryJournalStore(), key="other")
    assert first.outputs == replayed.outputs and len(server.requests) == 2
    invocation, event_id, timestamp = first.outputs[0]["k"]["ids"]
    assert invocation.startswith("e-") and other_key.outputs[0]["other"]["ids"][:2] != [invocation, event_id]
    # The key's next record: other ids.
    driver = run_records(engine_for(AdkAgent(), InMemoryJournalStore()), [("k", "go")] * 2)
    one, two = (o["k"]["ids"] for o in driver.outputs)
    assert one[:2] != two[:2] and one[2] <= two[2]


def test_what_cannot_be_journaled_is_refused(server: AnthropicScriptedServer) -> None:
    class Ctx(ActionContext):  # an action's context, never set up: refusals come before the turn touches it
        def __init__(self) -> None:
            pass

    agent = _adk_agent(server.base_url)

    async def refused(**kwargs: Any) -> None:
        await run_durably(Ctx(), kwargs.pop("agent", agent), "go", **kwargs)

    with pytest.raises(ValueError, match="tool_thread_pool_config"):
        asyncio.run(refused(run_config=RunConfig(tool_thread_pool_config=ToolThreadPoolConfig())))
    with pytest.raises(ValueError, match="conversation must be"):
        asyncio.run(refused(conversation="global"))
    with pytest.raises(TypeError, match="LlmAgent"):
        asyncio.run(refused(agent=object()))
    with pytest.raises(ValueError, match="sub-agents"):
        asyncio.run(refused(agent=LlmAgent(name="boss", model=agent.model, sub_agents=[_adk_agent(server.base_url)])))

    with pytest.raises(TypeError, match="text or a google.genai"):
        asyncio.run(run_durably(Ctx(), agent, 42))
    with pytest.raises(TypeError, match="needs the ctx an action of this runtime gets, got object"):
        asyncio.run(run_durably(object(), agent, "go", conversation="per_key"))
    assert not server.requests


class AdkUsageAgent(Agent):
    """Answers with the usage each event of the run carries (``usage_metadata``)."""

    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        events = await run_durably(ctx, _adk_agent(_SETTINGS["url"], tools=[crashing_double]), event.input)
        ctx.send_event(OutputEvent(output=[
            e.usage_metadata.model_dump(mode="json", exclude_none=True) for e in events if e.usage_metadata]))


async def crashing_double(n: int) -> int:
    """Double n."""
    if _SETTINGS.pop("crash", False):
        raise Crash("the process dies in the tool, the model's first reply journaled")
    return 2 * n


def test_the_usage_of_replayed_model_responses_is_the_same_after_a_crash_and_replay(
    server: AnthropicScriptedServer, tmp_path: Path,
) -> None:
    _SETTINGS.update(tools=1, tool="crashing_double")
    uninterrupted = run_local(AdkUsageAgent(), tmp_path / "uninterrupted.db", "adk-usage")
    assert len(uninterrupted) == 2 and all(u.get("prompt_token_count") for u in uninterrupted)

    _SETTINGS["crash"] = True
    journal = tmp_path / "journal.db"
    with pytest.raises(Crash):
        run_local(AdkUsageAgent(), journal, "adk-usage")
    asked = len(server.requests)
    assert run_local(AdkUsageAgent(), journal, "adk-usage") == uninterrupted
    assert len(server.requests) == asked + 1, "the journaled first reply was asked again"


def _delegation_reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    """The expert answers; the reviewer calls ``_SETTINGS["tool"]`` (the
    expert), then ``record``, then answers."""
    if "You know physics." in json.dumps(request.get("system")):
        return {"role": "assistant", "content": "blue light scatters the most"}
    results = sum(1 for m in request["messages"] if isinstance(m["content"], list)
                  for b in m["content"] if b.get("type") == "tool_result")
    if results == 2:
        return {"role": "assistant", "content": "because"}
    name, args = [(_SETTINGS["tool"], {"request": "why is the sky blue?"}), ("record", {"note": "asked"})][results]
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": name, "arguments": args}}]}


async def record(note: str) -> str:
    """Record a note."""
    if _SETTINGS.pop("crash", False):
        raise Crash("the process dies in the second tool, the expert's answer journaled")
    return "noted"


class AdkDelegationAgent(Agent):
    """A reviewer whose tool runs an expert agent: an ``AgentTool`` (a runner
    of its own) or a function running it with ``tool_context.run_node`` (in
    the reviewer's invocation: its events are the reviewer's run's). Answers
    with each event of the run: author, id and ``usage_metadata``."""

    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        expert = LlmAgent(
            name="expert", description="Asks the expert.", instruction="You know physics.",
            model=AnthropicLlm(model="claude-test", max_tokens=256,
                               client=AsyncAnthropic(base_url=_SETTINGS["url"], api_key="k", max_retries=0)))

        async def ask_expert(request: str, tool_context: ToolContext) -> str:
            """Ask the expert."""
            return await tool_context.run_node(expert, node_input=request)

        tool = AgentTool(expert) if _SETTINGS["tool"] == "expert" else ask_expert
        events = await run_durably(ctx, _adk_agent(_SETTINGS["url"], tools=[tool, record]), event.input)
        ctx.send_event(OutputEvent(output=[
            [e.author, e.id, e.usage_metadata.model_dump(mode="json", exclude_none=True) if e.usage_metadata else None]
            for e in events]))


@pytest.mark.parametrize("tool", ["expert", "ask_expert"])
def test_the_events_and_usage_of_a_delegating_tool_are_the_same_after_a_crash_and_replay(
    server: AnthropicScriptedServer, tmp_path: Path, tool: str,
) -> None:
    server.set_reply_fn(_delegation_reply)
    _SETTINGS["tool"] = tool
    uninterrupted = run_local(AdkDelegationAgent(), tmp_path / "uninterrupted.db", "adk-delegation")
    assert len(server.requests) == 4  # the reviewer three times, the expert once
    authors = [author for author, _, _ in uninterrupted]
    usage = {author: [u for a, _, u in uninterrupted if a == author and u] for author in set(authors)}
    assert len(usage["reviewer"]) == 3
    if tool == "expert":
        # An AgentTool's agent runs in a runner and session of its own: none of
        # its events (nor their usage_metadata) reach the reviewer's run.
        assert "expert" not in authors
    else:
        # run_node runs the expert in the reviewer's invocation: its model
        # response is an event of the reviewer's run, with its usage_metadata.
        assert authors.count("expert") == 1 and len(usage["expert"]) == 1

    _SETTINGS["crash"] = True
    journal = tmp_path / "journal.db"
    with pytest.raises(Crash):
        run_local(AdkDelegationAgent(), journal, "adk-delegation")
    asked = len(server.requests)
    # The same events, ids and usage_metadata, the expert not asked again: a
    # run_node expert's events are journaled with the tool's result and go
    # through the runner again on the replay; the ids asked for inside a tool
    # call (an AgentTool's runner) do not shift the run's later ids.
    assert run_local(AdkDelegationAgent(), journal, "adk-delegation") == uninterrupted
    assert len(server.requests) == asked + 1, "only the reviewer's last request is asked after the crash"


def test_usage_of_each_model_request_is_journaled_with_it_counted_once_and_shown_to_followers(
    server: AnthropicScriptedServer,
) -> None:
    # Anthropic reports cache reads and writes beside input_tokens; ADK's
    # prompt_token_count (and so the usage's input) counts all three.
    server.set_reply_fn(lambda request, index: {
        **_reply(request, index), "usage_extra": {"cache_read_input_tokens": 3, "cache_creation_input_tokens": 4}})
    _SETTINGS["tools"] = 1
    store = InMemoryJournalStore()
    shown = check_usage([("k", "go")], lambda: progress_engine(AdkAgent(), store, PRICES), "respond", "claude-test",
                        cached=3, reasoning=None)
    assert all(r["usage"]["input_tokens"] > 7 for r in shown)
    assert len(shown) == 2 and len(server.requests) == 2  # the replay asked nothing
