"""LangGraph graphs run durably (``integrations.frameworks.langgraph``): the
real LangGraph + LangChain packages, ``ChatOpenAI`` (chat completions, no
streaming) against the strict scripted OpenAI server, in the in-process
engine (``AgentEngine`` + ``LocalDriver`` + ``InMemoryJournalStore``).
Patterns as in ``tests/engine/test_framework_turns.py``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

import httpx  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler, get_usage_metadata_callback  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.types import interrupt  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from flink_agents.api.agents.agent import Agent  # noqa: E402
from flink_agents.runtime.durability.call_started import is_started  # noqa: E402
from flink_agents.runtime.durability import journal as journal_module  # noqa: E402
from flink_agents.api.decorators import action  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402
from flink_agents.inspection.approvals import decide, list_approvals  # noqa: E402
from flink_agents.integrations.frameworks.langgraph import (  # noqa: E402
    durable_chat_model,
    durable_react_graph,
    durable_tool_node,
    run_durably,
)
from flink_agents.runtime.engine import AgentEngine  # noqa: E402
from flink_agents.runtime.errors import ActionFailed  # noqa: E402
from flink_agents.plan.agent_plan import AgentPlan  # noqa: E402
from flink_agents.runtime.local.driver import LocalDriver  # noqa: E402
from flink_agents.stores.memory_store import InMemoryJournalStore  # noqa: E402
from flink_agents.stores.sqlite_store import SQLiteJournalStore  # noqa: E402
from tests.support.framework_runs import (  # noqa: E402
    CRASH_MODES, OPENAI_USAGE_DETAILS, PRICES, Crash, check_one_request_turn, check_usage, check_repeated_calls, engine_for, first_model_reply, kinds_by_commit,
    process, progress_engine, recoveries, refuse_writes, run_local, run_records, without_langsmith,
)
from tests.support.scripted_openai_server import OpenAIScriptedServer  # noqa: E402
from tests.support import host_runs

CALLS: Counter = Counter()
STEERING = "answer in French"


@tool
async def double(n: int) -> int:
    """Double n."""
    CALLS[f"tool:{n}"] += 1
    await asyncio.sleep(0)  # instant tools: the round's results land in one loop turn
    return 2 * n


def scripted_reply(tools: int):
    """The scripted model: asks for ``tools`` calls of ``double`` (provider
    ids ``call_0``.. every turn), then answers with the turn's results and
    the steering it saw."""

    def reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
        messages = request["messages"]
        prompt_at = max(i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] != STEERING)
        turn = messages[prompt_at:]
        results = [m["content"] for m in turn if m["role"] == "tool"]
        steering = [m["content"] for m in turn if m["role"] == "user" and m["content"] == STEERING]
        if tools and not results:
            return {"content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": "double", "arguments": json.dumps({"n": i})}} for i in range(tools)]}
        return {"content": f"{messages[prompt_at]['content']}: {results} steered by {steering}"}

    return reply


class RootRunId(BaseCallbackHandler):
    """Keeps the graph's root run id (LangChain callbacks' ``run_id``)."""

    def __init__(self) -> None:
        self.run_id: Optional[uuid.UUID] = None

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: Optional[uuid.UUID] = None, **kwargs: Any) -> None:
        if parent_run_id is None:
            self.run_id = run_id


_SETTINGS: Dict[str, Any] = {}


def _model() -> ChatOpenAI:
    """A ChatOpenAI for this record's event loop (its own HTTP client); the
    first request may steer the key (``_SETTINGS["steer"]``)."""

    async def on_request(request: httpx.Request) -> None:
        CALLS["model"] += 1
        steer = _SETTINGS.get("steer")
        if steer and CALLS["model"] == 1:
            steer()  # arrives while the first request runs

    return ChatOpenAI(model="gpt-4o-mini", base_url=_SETTINGS["url"], api_key="k", use_responses_api=False,
                      streaming=False, max_retries=0,
                      http_async_client=httpx.AsyncClient(event_hooks={"request": [on_request]}))


class LangGraphAgent(Agent):
    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        graph = durable_react_graph(_model(), [double] if _SETTINGS["tools"] else [], name="reviewer")
        root = RootRunId()
        state = await run_durably(ctx, graph, event.input, conversation=_SETTINGS.get("conversation"),
                                  conversation_max_messages=_SETTINGS.get("max_messages", 40),
                                  config={"callbacks": [root]})
        messages = state["messages"]
        ctx.send_event(OutputEvent(output={
            "answer": messages[-1].content,
            "ids": [str(root.run_id)] + [m.id for m in messages],
        }))


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing goes to LangSmith (only sent when these are set)."""
    without_langsmith(monkeypatch)


@pytest.fixture(autouse=True)
def _reset() -> Any:
    CALLS.clear()
    _SETTINGS.clear()
    _SETTINGS.update(tools=0)
    yield


@pytest.fixture
def server() -> Any:
    with OpenAIScriptedServer() as srv:
        _SETTINGS["url"] = srv.base_url
        yield srv


def _engine(store: InMemoryJournalStore, **config: Any) -> AgentEngine:
    return progress_engine(LangGraphAgent(), store, config)


def _process(store: InMemoryJournalStore, value: Any = "go", key: str = "k") -> LocalDriver:
    return process(LangGraphAgent(), store, value, key)


def test_a_plain_turn_commits_twice_and_a_replay_writes_and_asks_nothing(server: OpenAIScriptedServer) -> None:
    server.set_reply_fn(scripted_reply(0))
    store = InMemoryJournalStore()
    driver = _process(store)
    assert driver.outputs[0]["k"]["answer"] == "go: [] steered by []"
    assert store.writes == 2 and len(server.requests) == 1
    check_one_request_turn(driver.progress, "go: [] steered by []")
    # Replay on a fresh engine with the same store: nothing asked, nothing written.
    refuse_writes(store)
    replayed = _process(store)
    assert replayed.outputs == driver.outputs and len(server.requests) == 1 and CALLS["model"] == 1


def test_three_parallel_tool_calls_commit_four_times_and_followers_see_them_in_order(
        server: OpenAIScriptedServer) -> None:
    _SETTINGS["tools"] = 3
    server.set_reply_fn(scripted_reply(3))
    store = InMemoryJournalStore()
    driver = _process(store)
    assert driver.outputs[0]["k"]["answer"] == "go: ['0', '2', '4'] steered by []"
    assert CALLS == Counter({"model": 2, "tool:0": 1, "tool:1": 1, "tool:2": 1})
    # start | reply 1 (before the tools start) | the three results (one group
    # commit) | reply 2 with the run's end
    assert store.writes == 4 and len(server.requests) == 2
    commits = kinds_by_commit(driver.progress)
    assert commits[2] == ["model_reply"] and commits[3] == ["tool_result"] * 3
    assert commits[4][0] == "model_reply"
    first = first_model_reply(driver.progress)
    assert [(c["name"], json.loads(c["arguments"])) for c in first["tool_calls"]] == [
        ("double", {"n": i}) for i in range(3)]
    # The provider's call_0.. were rewritten inside the journaled region; the
    # results the server got answer those ids.
    sent_ids = [c["id"] for c in server.requests[1]["messages"][1]["tool_calls"]]
    assert len(set(sent_ids)) == 3 and not any(i.startswith("call_") for i in sent_ids)
    assert [m["tool_call_id"] for m in server.requests[1]["messages"][2:5]] == sent_ids
    # Replay: 0 writes, 0 requests, 0 tool calls, same output.
    CALLS.clear()
    refuse_writes(store)
    replayed = _process(store)
    assert replayed.outputs == driver.outputs and not CALLS and len(server.requests) == 2


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_at_every_write_of_the_tools_turn_repeats_no_completed_call(
        server: OpenAIScriptedServer, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The round's three results in one write, as the 4 writes below count,
    # even on a loaded machine: its group commit waits up to 200 ms, not 5,
    # for the siblings (which land in one loop turn when nothing starves it).
    monkeypatch.setattr(journal_module, "GROUP_COMMIT_DELAY_S", 0.2)
    _SETTINGS["tools"] = 3
    server.set_reply_fn(scripted_reply(3))
    expected_store = InMemoryJournalStore()
    expected = _process(expected_store)
    expected_calls = Counter(CALLS)
    assert expected_store.writes == 4
    crash: Dict[str, Counter] = {}

    def at_crash(durable: List[Any]) -> None:
        crash["ran"] = Counter(CALLS)
        crash["durable"] = Counter(call for call in map(_call_of, durable) if call is not None)

    for k, recovered in recoveries(mode, expected_store.writes, _process, CALLS.clear, at_crash):
        assert [o["k"]["answer"] for o in recovered.outputs] == [o["k"]["answer"] for o in expected.outputs]
        assert recovered.outputs[0]["k"]["ids"] == expected.outputs[0]["k"]["ids"]
        check_repeated_calls(mode, k, CALLS, expected_calls, crash["ran"], crash["durable"])


def _call_of(entry: Any) -> Optional[str]:
    """The ``CALLS`` name of a journaled call outcome: ``model`` for a chat
    call, ``tool:<n>`` for ``double(n)`` (the round's n-th call: its step
    ends with ``-<n>``); None for any other entry or a started mark."""
    if is_started(entry):
        return None
    if entry.function_id.startswith("chat:"):
        return "model"
    if entry.function_id == "tool:double":
        return f"tool:{entry.step.rsplit('-', 1)[1]}"
    return None


def test_steering_sent_during_the_first_request_reaches_the_second_and_stays_in_the_state(
        server: OpenAIScriptedServer) -> None:
    _SETTINGS["tools"] = 1
    server.set_reply_fn(scripted_reply(1))
    store = InMemoryJournalStore()
    engine, driver = _engine(store, **{"steering.enabled": True}), LocalDriver()
    _SETTINGS["steer"] = lambda: host_runs.steer(engine, driver, "k", STEERING)
    run_records(engine, [("k", "go")], driver)
    assert driver.outputs[0]["k"]["answer"] == f"go: ['0'] steered by ['{STEERING}']"
    assert [m["role"] for m in server.requests[0]["messages"]] == ["user"]
    second = server.requests[1]["messages"]
    assert [(m["role"], m["content"]) for m in second if m["role"] == "user"] == [("user", "go"), ("user", STEERING)]
    assert second[-1] == {"role": "user", "content": STEERING}  # after the tool result, before request 2
    # Kept in the state: user, reply (1 call), tool result, steering, answer (+ the root run id).
    assert len(driver.outputs[0]["k"]["ids"]) == 6
    assert "steering_consumed" in [r["kind"] for r in driver.progress]


def test_a_per_key_conversation_reuses_provider_call_ids_and_is_bounded_by_whole_turns(
        server: OpenAIScriptedServer) -> None:
    _SETTINGS.update(tools=1, conversation="per_key", max_messages=8)
    server.set_reply_fn(scripted_reply(1))
    engine, driver = _engine(InMemoryJournalStore()), LocalDriver()

    async def records() -> None:
        for n in range(4):  # each turn: user, assistant (call_0), tool, assistant = 4 messages
            await host_runs.process_async(engine, driver, "k", f"q{n}")

    try:
        asyncio.run(records())
    finally:
        engine.close()
    assert [o["k"]["answer"] for o in driver.outputs] == [f"q{n}: ['{2 * 0}'] steered by []" for n in range(4)]
    # Record 2's first request carries turn 1 whole, then its prompt; the
    # call ids of the two turns differ though the provider said call_0 twice.
    second = server.requests[2]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "assistant", "user"]
    fourth_turn = server.requests[7]["messages"]
    call_ids = [c["id"] for m in fourth_turn if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert len(call_ids) == 3 == len(set(call_ids))
    assert [m["tool_call_id"] for m in fourth_turn if m["role"] == "tool"] == call_ids
    # Before the 4th turn's second request: at most 8 stored messages (turns
    # q1 and q2 whole), then q3's messages.
    assert [m["content"] for m in server.requests[6]["messages"] if m["role"] == "user"] == ["q1", "q2", "q3"]
    assert len(server.requests[6]["messages"]) == 9


def test_ids_come_from_the_record_equal_on_replay_differ_across_records_and_keys(
        server: OpenAIScriptedServer) -> None:
    _SETTINGS["tools"] = 1
    server.set_reply_fn(scripted_reply(1))
    store = InMemoryJournalStore()
    first = _process(store).outputs[0]["k"]["ids"]
    replayed = _process(store).outputs[0]["k"]["ids"]
    other_key = _process(InMemoryJournalStore(), key="other").outputs[0]["other"]["ids"]
    driver = run_records(_engine(InMemoryJournalStore()), [("k", "go"), ("k", "go")])  # then the key's next record
    next_record = driver.outputs[1]["k"]["ids"]
    assert first == replayed and len(first) == 5  # root run id + user, reply, tool result, reply
    assert all(uuid.UUID(i) for i in first)  # no lc_run-- or provider ids
    assert not set(first) & set(other_key) and not set(first) & set(next_record)


def test_the_building_blocks_in_a_graph_of_ones_own(server: OpenAIScriptedServer) -> None:
    """durable_chat_model + durable_tool_node in a user's graph (no steering node)."""
    server.set_reply_fn(scripted_reply(2))
    seen: List[str] = []

    async def audit(request: Any, execute: Any) -> Any:
        seen.append(request.tool_call["id"])  # a user's own wrapper runs inside the journaled call
        return await execute(request)

    class OwnGraphAgent(Agent):
        @action(InputEvent)
        @staticmethod
        async def respond(event: InputEvent, ctx: Any) -> None:
            llm = durable_chat_model(_model()).bind_tools([double])

            async def agent(state: MessagesState) -> Dict[str, Any]:
                return {"messages": [await llm.ainvoke(state["messages"])]}

            def route(state: MessagesState) -> str:
                return "tools" if state["messages"][-1].tool_calls else "__end__"

            graph = StateGraph(MessagesState)
            graph.add_node("agent", agent)
            graph.add_node("tools", durable_tool_node([double], awrap_tool_call=audit))
            graph.add_edge(START, "agent")
            graph.add_conditional_edges("agent", route)
            graph.add_edge("tools", "agent")
            state = await run_durably(ctx, graph.compile(), [HumanMessage("go")], name="own")
            ctx.send_event(OutputEvent(output=state["messages"][-1].content))

    store = InMemoryJournalStore()
    driver = run_records(engine_for(OwnGraphAgent(), store), [("k", "go")])
    assert driver.outputs == [{"k": "go: ['0', '2'] steered by []"}] and store.writes == 4
    assert len(seen) == 2 and CALLS["tool:0"] == CALLS["tool:1"] == 1


class Verdict(BaseModel):
    score: int
    reason: str


def test_typed_output_through_with_structured_output_is_journaled_and_replayed(server: OpenAIScriptedServer) -> None:
    server.set_reply_fn(lambda request, index: {"content": None, "tool_calls": [{
        "id": "call_0", "type": "function",
        "function": {"name": "Verdict", "arguments": json.dumps({"score": 4, "reason": "sturdy"})}}]})

    class Judge(Agent):
        @action(InputEvent)
        @staticmethod
        async def respond(event: InputEvent, ctx: Any) -> None:
            typed = durable_chat_model(_model()).with_structured_output(Verdict)
            verdicts: List[Verdict] = []

            async def judge(state: MessagesState) -> Dict[str, Any]:
                verdicts.append(await typed.ainvoke(state["messages"]))
                return {"messages": []}

            graph = StateGraph(MessagesState)
            graph.add_node("judge", judge)
            graph.add_edge(START, "judge")
            await run_durably(ctx, graph.compile(), event.input, name="judge")
            ctx.send_event(OutputEvent(output=verdicts[0].model_dump()))

    store = InMemoryJournalStore()
    for _ in range(2):  # the second run replays
        driver = run_records(engine_for(Judge(), store), [("k", "a kettle")])
        assert driver.outputs == [{"k": {"score": 4, "reason": "sturdy"}}]
    assert store.writes == 2 and len(server.requests) == 1
    assert server.requests[0]["tool_choice"] == "required"
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["Verdict"]


async def _refused_in_a_turn(graph: Any, value: Any = "go", **kwargs: Any) -> None:
    class Refusing(Agent):
        @action(InputEvent)
        @staticmethod
        async def respond(event: InputEvent, ctx: Any) -> None:
            await run_durably(ctx, graph, value, **kwargs)

    engine = engine_for(Refusing(), InMemoryJournalStore())
    try:
        await host_runs.process_async(engine, LocalDriver(), "k", "go")
    finally:
        engine.close()


def test_what_cannot_be_made_durable_is_refused(server: OpenAIScriptedServer) -> None:
    graph = StateGraph(MessagesState)
    graph.add_node("noop", lambda state: {"messages": []})
    graph.add_edge(START, "noop")
    with pytest.raises(ActionFailed, match="ValueError: run_durably refuses a graph with a checkpointer"):
        asyncio.run(_refused_in_a_turn(graph.compile(checkpointer=InMemorySaver())))
    with pytest.raises(ActionFailed, match="conversation must be None or 'per_key'"):
        asyncio.run(_refused_in_a_turn(graph.compile(), conversation="global"))
    with pytest.raises(ActionFailed, match="TypeError: run_durably needs a compiled LangGraph graph"):
        asyncio.run(_refused_in_a_turn(graph))
    with pytest.raises(TypeError, match="BaseChatModel"):
        durable_chat_model(_model().bind_tools([double]))
    with pytest.raises(TypeError, match="async only"):
        durable_chat_model(_model()).invoke("hi")
    tools_only = StateGraph(MessagesState)
    tools_only.add_node("tools", durable_tool_node([double]))
    tools_only.add_edge(START, "tools")
    with pytest.raises(TypeError, match="called on the sync path"):
        tools_only.compile().invoke({"messages": [AIMessage("", tool_calls=[
            {"name": "double", "args": {"n": 1}, "id": "call_0"}])]})
    assert not server.requests and not CALLS


def test_a_graph_whose_model_and_tools_bypass_the_journal_is_refused(server: OpenAIScriptedServer) -> None:
    """A hand-built graph with a plain chat model and ToolNode journals
    nothing: a failover would ask and act again, so the turn fails."""
    server.set_reply_fn(scripted_reply(1))
    graph = StateGraph(MessagesState)

    async def ask(state: MessagesState) -> Dict[str, Any]:
        return {"messages": [await _model().bind_tools([double]).ainvoke(state["messages"])]}

    graph.add_node("model", ask)
    graph.add_node("tools", ToolNode([double]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    with pytest.raises(ActionFailed, match=r"added 2 model replies and 1 tool results, but only 0 model requests"):
        asyncio.run(_refused_in_a_turn(graph.compile()))
    with pytest.raises(ActionFailed, match="input state has no 'messages'"):
        asyncio.run(_refused_in_a_turn(graph.compile(), value={"topic": "x"}))



def _delegation_reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    """The expert (``gpt-4o``) answers; the lead asks the expert, then
    ``record``, then answers."""
    if request["model"] == "gpt-4o":
        return {"content": "physics"}
    results = sum(1 for m in request["messages"] if m["role"] == "tool")
    if results == 2:
        return {"content": "because"}
    name, args = [("ask_expert", {"question": "why is the sky blue?"}), ("record", {"note": "asked"})][results]
    return {"content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


class DelegatingGraphAgent(Agent):
    """A lead graph whose tool ``ask_expert`` runs an expert graph; answers
    with the usage ``get_usage_metadata_callback()`` saw and the tokens of
    the lead's replies (``usage_metadata``). Its second tool ``record``
    crashes the process when ``_SETTINGS["crash"]`` is set: the expert's
    answer is journaled by then."""

    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        expert = durable_react_graph(_usage_model("gpt-4o"), [], name="expert")

        @tool
        async def ask_expert(question: str) -> str:
            """Ask the expert."""
            CALLS["expert"] += 1
            state = await expert.ainvoke({"messages": [HumanMessage(question)]})
            return state["messages"][-1].content

        @tool
        async def record(note: str) -> str:
            """Record a note."""
            if _SETTINGS.pop("crash", False):
                raise Crash("the process dies in the second tool, the expert's answer journaled")
            return "noted"

        graph = durable_react_graph(_usage_model("gpt-4o-mini"), [ask_expert, record], name="lead")
        with get_usage_metadata_callback() as usage:
            state = await run_durably(ctx, graph, event.input)
        replies = [m.usage_metadata["total_tokens"] for m in state["messages"] if isinstance(m, AIMessage)]
        ctx.send_event(OutputEvent(output={
            "answer": state["messages"][-1].content, "usage": usage.usage_metadata, "reply_tokens": replies,
        }))


def _usage_model(name: str) -> ChatOpenAI:
    return ChatOpenAI(model=name, base_url=_SETTINGS["url"], api_key="k", use_responses_api=False,
                      streaming=False, max_retries=0, http_async_client=httpx.AsyncClient())


def test_the_usage_a_delegated_graph_added_to_the_usage_callback_is_the_same_after_a_crash_and_replay(
    server: OpenAIScriptedServer, tmp_path: Path,
) -> None:
    server.set_reply_fn(_delegation_reply)
    uninterrupted = run_local(DelegatingGraphAgent(), tmp_path / "uninterrupted.db", "langgraph-usage")
    assert uninterrupted["answer"] == "because"
    assert set(uninterrupted["usage"]) == {"gpt-4o-mini", "gpt-4o"}  # the lead's three requests, the expert's one
    assert len(uninterrupted["reply_tokens"]) == 3 and all(uninterrupted["reply_tokens"])
    # Each reply counted once by the callback (not by the wrapped model too).
    assert uninterrupted["usage"]["gpt-4o-mini"]["total_tokens"] == sum(uninterrupted["reply_tokens"])
    assert CALLS["expert"] == 1

    CALLS.clear()
    journal = tmp_path / "journal.db"
    _SETTINGS["crash"] = True
    with pytest.raises(Crash):
        run_local(DelegatingGraphAgent(), journal, "langgraph-usage")
    assert run_local(DelegatingGraphAgent(), journal, "langgraph-usage") == uninterrupted
    assert CALLS["expert"] == 1, "the journaled tool ran again"


def test_usage_of_each_model_request_is_journaled_with_it_counted_once_and_shown_to_followers(
    server: OpenAIScriptedServer,
) -> None:
    reply = scripted_reply(1)
    server.set_reply_fn(lambda request, index: {**reply(request, index), "usage_extra": OPENAI_USAGE_DETAILS})
    _SETTINGS["tools"] = 1
    store = InMemoryJournalStore()
    shown = check_usage([("k", "go")], lambda: _engine(store, **PRICES), "respond", "gpt-4o-mini",
                        cached=2, reasoning=1)
    assert len(shown) == 2 and len(server.requests) == 2  # the replay asked nothing


# -- interrupt(): a node asks a person, the run parks on a durable callback --

class ReviewState(MessagesState):
    decision: Dict[str, Any]
    outcome: str


def review_reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    """The scripted model: echoes what it was asked (the last user message)."""
    asked = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
    return {"content": f"<{asked}>"}


def _review_graph() -> Any:
    """draft (a model request) -> review (a model request, then
    ``interrupt()`` for an approval) -> publish (a model request) when
    approved, else revise (no request)."""
    model = durable_chat_model(_model())

    async def draft(state: ReviewState) -> Dict[str, Any]:
        return {"messages": [await model.ainvoke([HumanMessage(f"draft {state['messages'][0].content}")])]}

    async def review(state: ReviewState) -> Dict[str, Any]:
        draft_text = state["messages"][-1].content
        summary = await model.ainvoke([HumanMessage(f"summarize {draft_text}")])
        decision = interrupt({"type": "approval", "draft": draft_text, "summary": summary.content,
                              "api_key": "sk-live-123"})
        if CRASH_AFTER_DECISION:
            CRASH_AFTER_DECISION.pop()
            raise Crash("process died after the approval, before the graph's end")
        return {"decision": decision}

    async def publish(state: ReviewState) -> Dict[str, Any]:
        reply = await model.ainvoke([HumanMessage(f"publish {state['messages'][-1].content}")])
        return {"messages": [reply], "outcome": f"published {reply.content}"}

    async def revise(state: ReviewState) -> Dict[str, Any]:
        return {"outcome": f"revise: {state['decision']['reason']}"}

    graph = StateGraph(ReviewState)
    for node in (draft, review, publish, revise):
        graph.add_node(node.__name__, node)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "review")
    graph.add_conditional_edges("review", lambda s: "publish" if s["decision"]["approved"] else "revise")
    graph.add_edge("publish", END)
    graph.add_edge("revise", END)
    return graph.compile(name="reviewer")


CRASH_AFTER_DECISION: List[bool] = []


class ReviewAgent(Agent):
    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        state = await run_durably(ctx, _review_graph(), event.input)
        ctx.send_event(OutputEvent(output={"outcome": state["outcome"], "decision": state["decision"]}))


def _pending_approval(path: Path, timeout_s: float = 20.0) -> Dict[str, Any]:
    """The one pending approval, once the run parked on it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = list_approvals(str(path)) if path.exists() else []
        if found:
            (approval,) = found
            return approval
        time.sleep(0.01)
    raise AssertionError(f"no pending approval within {timeout_s} s")


def _review_run(path: Path, reviewer: Optional[Any] = None, **config: Any) -> LocalDriver:
    """One record on a fresh engine over the SQLite journal (a restore to
    before the record); ``reviewer(approval)`` decides from another thread
    while the run waits."""
    engine = AgentEngine(AgentPlan.from_agent(ReviewAgent()),
                         {"callbacks.poll_interval_ms": 10, "callbacks.base_url": "http://approvals.test:9/", **config},
                         job_id="job", store=SQLiteJournalStore(path))
    driver = LocalDriver()

    async def go() -> None:
        async def review() -> None:
            await asyncio.to_thread(reviewer, await asyncio.to_thread(_pending_approval, path))

        await asyncio.gather(host_runs.process_async(engine, driver, "k", "the launch note"),
                             *([review()] if reviewer is not None else []))

    try:
        asyncio.run(go())
    finally:
        engine.close()
    return driver


def _asked(server: OpenAIScriptedServer) -> List[str]:
    return [[m["content"] for m in r["messages"] if m["role"] == "user"][-1] for r in server.requests]


def test_an_interrupt_for_approval_parks_the_graph_until_approved_then_it_takes_the_approved_path(
        server: OpenAIScriptedServer, tmp_path: Path) -> None:
    server.set_reply_fn(review_reply)
    path = tmp_path / "journal.db"
    seen: Dict[str, Any] = {}

    def approve(approval: Dict[str, Any]) -> None:
        seen.update(approval, asked_while_parked=_asked(server))
        seen["outcome"] = decide(str(path), approval["callback_id"], approve=True, reason="ship it", decided_by="ann")

    driver = _review_run(path, approve)

    # Parked after draft and review's own request; the reviewer sees the node
    # and what it asked, the key redacted.
    assert seen["asked_while_parked"] == ["draft the launch note", "summarize <draft the launch note>"]
    assert seen["outcome"] == "accepted" and seen["tool"] == "review"
    assert seen["arguments"] == {"type": "approval", "draft": "<draft the launch note>",
                                 "summary": "<summarize <draft the launch note>>", "api_key": "***"}
    assert driver.outputs == [{"k": {
        "outcome": "published <publish <draft the launch note>>",
        "decision": {"approved": True, "reason": "ship it", "approved_by": "ann"},
    }}]
    # LangGraph ran review again from its start on the resume: its summary
    # request was answered from the first attempt, not asked again.
    assert _asked(server) == ["draft the launch note", "summarize <draft the launch note>",
                              "publish <draft the launch note>"]
    assert [a["state"] for a in list_approvals(str(path), None)] == ["resolved"]


def test_a_rejected_interrupt_takes_the_rejected_path_with_the_reason(
        server: OpenAIScriptedServer, tmp_path: Path) -> None:
    server.set_reply_fn(review_reply)
    path = tmp_path / "journal.db"
    driver = _review_run(path, lambda a: decide(str(path), a["callback_id"], approve=False, reason="too long"))
    assert driver.outputs == [{"k": {"outcome": "revise: too long",
                                     "decision": {"approved": False, "reason": "too long"}}}]
    assert "publish <draft the launch note>" not in _asked(server)  # the approved path never ran
    (rejected,) = list_approvals(str(path), "rejected")
    assert rejected["reason"] == "too long"


def test_a_crash_after_the_approval_replays_without_asking_again_or_repeating_a_model_request(
        server: OpenAIScriptedServer, tmp_path: Path) -> None:
    server.set_reply_fn(review_reply)
    path = tmp_path / "journal.db"
    CRASH_AFTER_DECISION.append(True)
    with pytest.raises(Crash):
        _review_run(path, lambda a: decide(str(path), a["callback_id"], approve=True, reason="ok"))
    (approval,) = list_approvals(str(path), None)
    assert approval["state"] == "resolved" and len(server.requests) == 2  # draft, summary

    # No reviewer: a replay asking again would time out (rejected) after 2 s.
    driver = _review_run(path, **{"approvals.timeout_s": 2})
    assert driver.outputs[0]["k"]["outcome"] == "published <publish <draft the launch note>>"
    assert driver.outputs[0]["k"]["decision"] == {"approved": True, "reason": "ok", "approved_by": "cli"}
    # The replay got the same callback (its ref: same id, asked once) and
    # asked the model only what the first run had not: publish.
    assert [a["callback_id"] for a in list_approvals(str(path), None)] == [approval["callback_id"]]
    assert _asked(server) == ["draft the launch note", "summarize <draft the launch note>",
                              "publish <draft the launch note>"]


@tool
async def ask_human(question: str) -> str:
    """Ask a person."""
    CALLS["ask_human"] += 1
    answer = interrupt({"question": question})  # not an approval: purpose "interrupt"
    return f"the person said {answer['text']}"


class AskingAgent(Agent):
    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        state = await run_durably(ctx, durable_react_graph(_model(), [ask_human], name="asker"), event.input)
        ctx.send_event(OutputEvent(output=state["messages"][-1].content))


def _answer_pending_interrupt(path: Path, body: bytes, seen: Dict[str, Any], timeout_s: float = 20.0) -> None:
    """A person: wait for the run's pending interrupt callback, then resolve it."""
    import sqlite3

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            with contextlib.closing(sqlite3.connect(path)) as db:
                try:
                    rows = db.execute("SELECT callback_id, details FROM callbacks"
                                      " WHERE purpose = 'interrupt' AND state = 'pending'").fetchall()
                except sqlite3.OperationalError:  # no table yet
                    rows = []
            if rows:
                ((callback_id, details),) = rows
                seen.update(json.loads(details), calls_while_parked=CALLS["ask_human"])
                store = SQLiteJournalStore(path)
                try:
                    seen["outcome"] = store.complete(callback_id, "resolved", body, int(time.time() * 1000)).outcome
                finally:
                    store.close()
                return
        time.sleep(0.01)
    raise AssertionError(f"no pending interrupt within {timeout_s} s")


def test_a_tool_that_interrupts_waits_for_the_answer_and_its_result_is_journaled_once(
        server: OpenAIScriptedServer, tmp_path: Path) -> None:
    def reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
        results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        if not results:
            return {"content": None, "tool_calls": [{"id": "call_0", "type": "function", "function": {
                "name": "ask_human", "arguments": json.dumps({"question": "which colour?"})}}]}
        return {"content": f"done: {results}"}

    server.set_reply_fn(reply)
    path = tmp_path / "journal.db"
    seen: Dict[str, Any] = {}

    def run(with_person: bool) -> LocalDriver:
        engine = AgentEngine(AgentPlan.from_agent(AskingAgent()),
                             {"callbacks.poll_interval_ms": 10, "callbacks.base_url": "http://cb.test:9/"},
                             job_id="job", store=SQLiteJournalStore(path))
        driver = LocalDriver()

        async def go() -> None:
            person = [asyncio.to_thread(_answer_pending_interrupt, path, b'{"text": "blue"}', seen)] \
                if with_person else []
            await asyncio.gather(host_runs.process_async(engine, driver, "k", "paint it"), *person)

        try:
            asyncio.run(go())
        finally:
            engine.close()
        return driver

    driver = run(with_person=True)
    assert seen["outcome"] == "accepted" and seen["calls_while_parked"] == 1
    assert (seen["node"], seen["tool"], seen["value"]) == ("tools", "ask_human", {"question": "which colour?"})
    assert driver.outputs == [{"k": "done: ['the person said blue']"}]
    # LangGraph ran the tool again on the resume (interrupt() then returned
    # the answer); its result was journaled then, once.
    assert CALLS["ask_human"] == 2 and len(server.requests) == 2
    # A replay returns the journaled result: the tool does not run, nobody is asked.
    CALLS.clear()
    replayed = run(with_person=False)
    assert replayed.outputs == driver.outputs and CALLS["ask_human"] == 0 and len(server.requests) == 2
