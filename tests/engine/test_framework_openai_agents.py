"""OpenAI Agents SDK agents run durably (``integrations.frameworks
.openai_agents``): the real ``openai-agents`` package, its
``OpenAIChatCompletionsModel`` over the real ``openai`` client, against the
strict scripted OpenAI server, inside an in-process engine (AgentEngine +
LocalDriver + InMemoryJournalStore)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

import httpx
import pytest

pytest.importorskip("agents")

from agents import (  # noqa: E402
    Agent, FunctionTool, ModelSettings, OpenAIChatCompletionsModel, RunConfig, ToolExecutionConfig, function_tool,
    handoff,
)
from agents.tool import ShellTool  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from flink_agents.api.agents.agent import Agent as FlinkAgent  # noqa: E402
from flink_agents.api.decorators import action  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402
from flink_agents.integrations.frameworks.openai_agents import run_durably  # noqa: E402
from flink_agents.plan.agent_plan import AgentPlan  # noqa: E402
from flink_agents.runtime.engine import AgentEngine  # noqa: E402
from flink_agents.runtime.errors import ActionFailed  # noqa: E402
from flink_agents.runtime.local.driver import LocalDriver  # noqa: E402
from flink_agents.stores.memory_store import InMemoryJournalStore  # noqa: E402
from tests.support.framework_runs import (  # noqa: E402
    CRASH_MODES, OPENAI_USAGE_DETAILS, PRICES, Crash, check_one_request_turn, check_usage, crash_and_recover, crash_at_write, disarm, first_model_reply,
    kinds_by_commit, process, progress_engine, refuse_writes, run_local, run_records,
)
from tests.support.scripted_openai_server import OpenAIScriptedServer  # noqa: E402
from tests.support import host_runs

TOOL_CALLS: Counter = Counter()
SEEN: Dict[str, Any] = {}


@function_tool
async def double(n: int) -> int:
    """Double a number."""
    TOOL_CALLS[f"double:{n}"] += 1
    await asyncio.sleep(0)
    return 2 * n


async def _whoami(tool_context: Any, arguments: str) -> str:
    TOOL_CALLS["whoami"] += 1
    config = tool_context.run_config
    return json.dumps(
        {"trace_id": config.trace_id, "group_id": config.group_id, "tracing_off": config.tracing_disabled})


WHOAMI = FunctionTool(
    name="whoami", description="The run's trace and group ids.",
    params_json_schema={"type": "object", "properties": {}, "additionalProperties": False},
    on_invoke_tool=_whoami,
)


def _tool_calls(*calls: tuple, ids: Optional[List[str]] = None) -> Dict[str, Any]:
    """An assistant reply asking for ``(name, arguments)`` calls, with
    provider ids ``ids`` (default ``call_0``, ``call_1``, ...: what
    providers reuse every turn)."""
    ids = ids or [f"call_{j}" for j in range(len(calls))]
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        for call_id, (name, arguments) in zip(ids, calls)]}


def _answer(text: str) -> Dict[str, Any]:
    return {"role": "assistant", "content": text}


THREE_TOOLS = _tool_calls(("double", {"n": 1}), ("double", {"n": 2}), ("double", {"n": 3}))

# What the action runs: set per test.
SETTINGS: Dict[str, Any] = {}


def _agent(server: OpenAIScriptedServer, tools: Optional[List[Any]] = None, **kwargs: Any) -> Agent:
    client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
    return Agent(
        name="reviewer", instructions="You answer briefly.",
        model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
        tools=list(tools or []), **kwargs,
    )


class OpenAIAgentsAgent(FlinkAgent):
    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        # A fresh agent (and SDK client) per record: an AsyncOpenAI client's
        # connections belong to the loop that opened them, and each
        # host_runs.process below runs on a loop of its own.
        result = await run_durably(ctx, SETTINGS["agent"](), event.input, **SETTINGS.get("kwargs", {}))
        ctx.send_event(OutputEvent(output={"answer": result.final_output, "items": len(result.new_items)}))


@pytest.fixture(autouse=True)
def _reset() -> Any:
    TOOL_CALLS.clear()
    SEEN.clear()
    SETTINGS.clear()
    yield
    SETTINGS.clear()


def _engine(store: InMemoryJournalStore, config: Optional[Dict[str, Any]] = None) -> AgentEngine:
    return progress_engine(OpenAIAgentsAgent(), store, config)


def _process(store: InMemoryJournalStore, value: Any = "go", key: str = "k",
             config: Optional[Dict[str, Any]] = None) -> LocalDriver:
    return process(OpenAIAgentsAgent(), store, value, key, config)


def test_a_plain_turn_commits_twice_and_a_replay_asks_and_writes_nothing() -> None:
    with OpenAIScriptedServer([_answer("fine")]) as server:
        SETTINGS["agent"] = lambda: _agent(server)
        store = InMemoryJournalStore()
        driver = _process(store)
        assert driver.outputs == [{"k": {"answer": "fine", "items": 1}}]
        assert store.writes == 2 and len(server.requests) == 1
        check_one_request_turn(driver.progress, "fine")
        request = server.requests[0]
        assert request["messages"] == [
            {"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "go"}]
        assert request.get("stream") in (None, False)

        refuse_writes(store)
        replayed = _process(store)
        assert replayed.outputs == driver.outputs and len(server.requests) == 1


def test_a_round_of_three_parallel_tools_commits_four_times_and_followers_see_it_in_order() -> None:
    with OpenAIScriptedServer([THREE_TOOLS, _answer("12")]) as server:
        SETTINGS["agent"] = lambda: _agent(server, [double])
        store = InMemoryJournalStore()
        driver = _process(store)
        assert driver.outputs[0]["k"]["answer"] == "12"
        assert TOOL_CALLS == Counter({"double:1": 1, "double:2": 1, "double:3": 1})
        # start | reply 1 (before the tools start) | the three results (they
        # land in one loop turn: one group commit) | reply 2 with the run's end
        assert store.writes == 4 and len(server.requests) == 2
        commits = kinds_by_commit(driver.progress)
        assert commits[2] == ["model_reply"] and commits[3] == ["tool_result"] * 3
        kinds = [r["kind"] for r in driver.progress if r["kind"] in ("model_reply", "tool_result")]
        assert kinds == ["model_reply", "tool_result", "tool_result", "tool_result", "model_reply"]
        first = first_model_reply(driver.progress)
        assert [(c["name"], json.loads(c["arguments"])) for c in first["tool_calls"]] == [
            ("double", {"n": 1}), ("double", {"n": 2}), ("double", {"n": 3})]
        # The second request carries the rewritten ids, each answered.
        messages = server.requests[1]["messages"]
        asked = [c["id"] for c in messages[2]["tool_calls"]]
        assert len(set(asked)) == 3 and not set(asked) & {"call_0", "call_1", "call_2"}
        assert [(m["tool_call_id"], m["content"]) for m in messages[3:]] == list(zip(asked, ["2", "4", "6"]))

        TOOL_CALLS.clear()
        refuse_writes(store)
        replayed = _process(store)
        assert replayed.outputs == driver.outputs and len(server.requests) == 2 and not TOOL_CALLS


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_at_every_write_of_a_tool_turn_recovers_without_repeating_completed_calls(mode: str) -> None:
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(lambda body, index: THREE_TOOLS if len(body["messages"]) == 2 else _answer("12"))
        SETTINGS["agent"] = lambda: _agent(server, [double])
        expected_store = InMemoryJournalStore()
        expected = _process(expected_store)
        writes = expected_store.writes
        assert writes == 4 and len(server.requests) == 2
        for k in range(1, writes + 1):
            TOOL_CALLS.clear()
            asked_before = len(server.requests)
            store = InMemoryJournalStore()
            recovered = crash_and_recover(store, mode, k, lambda: _process(store))
            assert recovered.outputs == expected.outputs, f"crash {mode} {k}"
            tools, requests = sum(TOOL_CALLS.values()), len(server.requests) - asked_before
            if mode == "after_write":
                # Whatever a write made durable is not asked or run again.
                assert (requests, tools) == (2, 3), f"crash after write {k}: {requests} requests, {TOOL_CALLS}"
            else:
                # What the failed write held may run once more, nothing more:
                # each request (by its position in the turn) and each tool.
                asked = Counter(len(body["messages"]) for body in server.requests[asked_before:])
                assert set(asked) == {2, 6} and all(n <= 2 for n in asked.values()), f"crash before write {k}: {asked}"
                assert set(TOOL_CALLS) == {"double:1", "double:2", "double:3"}, TOOL_CALLS
                assert all(count <= 2 for count in TOOL_CALLS.values()), f"crash before write {k}: {TOOL_CALLS}"
                assert requests <= 3 and tools <= 6


def test_steering_sent_during_the_first_request_reaches_the_second_and_the_conversation() -> None:
    with OpenAIScriptedServer() as server:
        SETTINGS["agent"] = lambda: _agent(server, [double])
        SETTINGS["kwargs"] = {"conversation": "per_key"}
        store = InMemoryJournalStore()
        engine = _engine(store, {"steering.enabled": True})
        driver = LocalDriver()

        def reply(body: Dict[str, Any], index: int) -> Dict[str, Any]:
            if index == 0:
                host_runs.steer(engine, driver, "k", "answer in French")  # arrives while request 0 runs
                return _tool_calls(("double", {"n": 1}))
            if index == 1:
                return _answer("deux")
            return _answer("encore")

        server.set_reply_fn(reply)
        try:
            host_runs.process(engine, driver, "k", "go")
            users = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"]
            assert users == ["go", "answer in French"]
            # The steering message comes after the tool round it arrived during.
            assert [m["role"] for m in server.requests[1]["messages"]] == [
                "system", "user", "assistant", "tool", "user"]
            assert "steering_consumed" in [r["kind"] for r in driver.progress]
            # The SDK keeps no trace of it; the stored conversation does.
            host_runs.process(engine, driver, "k", "again")
        finally:
            engine.close()
        roles_users = [(m["role"], m.get("content")) for m in server.requests[2]["messages"] if m["role"] == "user"]
        assert roles_users == [("user", "go"), ("user", "answer in French"), ("user", "again")]
        assert [o["k"]["answer"] for o in driver.outputs] == ["deux", "encore"]


def test_a_per_key_conversation_reuses_provider_call_ids_and_is_bounded_by_whole_turns() -> None:
    with OpenAIScriptedServer() as server:
        def reply(body: Dict[str, Any], index: int) -> Dict[str, Any]:
            last = body["messages"][-1]
            if last["role"] == "user":  # every turn: one call, provider id call_0
                return _tool_calls(("double", {"n": len(body["messages"])}), ids=["call_0"])
            return _answer(f"got {last['content']}")

        server.set_reply_fn(reply)
        SETTINGS["agent"] = lambda: _agent(server, [double])
        # Each turn stores 4 items: user, function_call, function_call_output, assistant message.
        SETTINGS["kwargs"] = {"conversation": "per_key", "conversation_max_messages": 8}
        run_records(_engine(InMemoryJournalStore()), [("k", f"q{n}") for n in range(4)] + [("other", "q-other")])
        assert len(server.requests) == 10
        # Before the 4th turn's first request: the whole turns of q1 and q2, then q3.
        last = server.requests[6]["messages"]
        assert [m["content"] for m in last if m["role"] == "user"] == ["q1", "q2", "q3"]
        assert len(last) == 1 + 8 + 1  # system, two stored turns, the prompt
        # The provider's call_0 of each turn got its own id, each paired with its result.
        asked = [c["id"] for m in last if m["role"] == "assistant" and m.get("tool_calls") for c in m["tool_calls"]]
        answered = [m["tool_call_id"] for m in last if m["role"] == "tool"]
        assert len(asked) == 2 == len(set(asked)) and answered == asked and "call_0" not in asked
        # Another key has its own conversation.
        assert [m["content"] for m in server.requests[8]["messages"] if m["role"] == "user"] == ["q-other"]


def test_the_runs_ids_come_from_the_record_and_tracing_is_off() -> None:
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(
            lambda body, index: _tool_calls(("whoami", {})) if body["messages"][-1]["role"] == "user"
            else _answer(body["messages"][-1]["content"]))
        SETTINGS["agent"] = lambda: _agent(server, [WHOAMI])
        store = InMemoryJournalStore()
        first = _process(store)
        ids = json.loads(first.outputs[0]["k"]["answer"])
        assert ids["trace_id"].startswith("trace_") and len(ids["trace_id"]) == 38 and ids["group_id"]
        assert ids["tracing_off"] is True  # the SDK's exporter would post to api.openai.com
        # The same record in a fresh journal runs the tool again: the same ids.
        again = _process(InMemoryJournalStore())
        assert again.outputs == first.outputs and TOOL_CALLS["whoami"] == 2
        # Replayed: the same; another key, or the key's next record: others.
        assert _process(store).outputs == first.outputs and TOOL_CALLS["whoami"] == 2
        other = json.loads(_process(InMemoryJournalStore(), key="other").outputs[0]["other"]["answer"])
        assert other["trace_id"] != ids["trace_id"] and other["group_id"] != ids["group_id"]
        driver = run_records(_engine(InMemoryJournalStore()), [("k", "go"), ("k", "go")])
        first_ids, second_ids = (json.loads(o["k"]["answer"]) for o in driver.outputs)
        assert first_ids == ids and second_ids["trace_id"] != ids["trace_id"]


def test_what_cannot_be_made_durable_is_refused_before_anything_runs() -> None:
    with OpenAIScriptedServer() as server:
        cases = [
            ({"kwargs": {"conversation": "global"}}, "ValueError: conversation must be None or 'per_key'"),
            ({"kwargs": {"previous_response_id": "resp_1"}}, "ValueError: .*previous_response_id is not supported"),
            ({"kwargs": {"session": object()}}, "ValueError: .*session is not supported"),
            ({"kwargs": {"run_config": RunConfig(tool_execution=ToolExecutionConfig(
                max_function_tool_concurrency=2))}}, "ValueError: .*max_function_tool_concurrency"),
            ({"agent": lambda: _agent(server, [ShellTool(executor=lambda request: "")])},
             "ValueError: .*is a ShellTool; only function tools"),
            ({"agent": lambda: _agent(server).clone(mcp_servers=[object()])}, "ValueError: .*has MCP servers"),
            ({"agent": lambda: "not an agent"}, "TypeError: run_durably needs an agents.Agent"),
        ]
        for case in cases:
            SETTINGS.clear()
            SETTINGS.update({"agent": lambda: _agent(server, [double]), **case[0]})
            with pytest.raises(ActionFailed, match=case[1]):
                _process(InMemoryJournalStore())
        assert server.requests == []


def test_a_replay_that_asks_the_model_something_else_is_refused() -> None:
    with OpenAIScriptedServer([THREE_TOOLS, _answer("12")]) as server:
        SETTINGS["agent"] = lambda: _agent(server, [double], model_settings=ModelSettings(temperature=0.1))
        store = InMemoryJournalStore()

        crash_at_write(store, "after_write", 2)  # after reply 1 is durable
        with pytest.raises(Crash):
            _process(store)
        disarm(store, "after_write")
        assert server.requests[0]["temperature"] == 0.1
        # The replay's agent asks with other settings: told so, not given the old reply.
        SETTINGS["agent"] = lambda: _agent(server, [double], model_settings=ModelSettings(temperature=0.9))
        with pytest.raises(ActionFailed, match="Nondeterminism|replays differently"):
            _process(store)
        assert len(server.requests) == 1


@pytest.mark.parametrize("given_as", ["agent", "handoff"])
def test_agents_reached_by_handoffs_are_journaled_too(given_as: str) -> None:
    script = [_tool_calls(("transfer_to_worker", {})), _tool_calls(("double", {"n": 5})), _answer("10")]
    with OpenAIScriptedServer(script) as server:
        def triage() -> Agent:
            worker = _agent(server, [double]).clone(name="worker", handoff_description="Doubles numbers.")
            return _agent(server).clone(name="triage", handoffs=[worker if given_as == "agent" else handoff(worker)])

        SETTINGS["agent"] = triage
        store = InMemoryJournalStore()
        driver = _process(store)
        assert driver.outputs[0]["k"]["answer"] == "10"
        assert len(server.requests) == 3 and TOOL_CALLS == Counter({"double:5": 1})
        assert store.writes == 5  # start | reply | reply (after the handoff) | the tool's result | reply with the end
        assert [r["model"] for r in driver.progress if r["kind"] == "model_reply"] == ["openai_agents/triage"] * 3
        # The worker got the rewritten handoff call id and its own tool call's id.
        worker_messages = server.requests[2]["messages"]
        assert "call_0" not in json.dumps(worker_messages)
        TOOL_CALLS.clear()
        refuse_writes(store)
        assert _process(store).outputs == driver.outputs and len(server.requests) == 3 and not TOOL_CALLS


def test_an_agent_used_as_a_tool_is_one_journaled_tool_call() -> None:
    script = [_tool_calls(("helper", {"input": "x"})), _answer("helped"), _answer("done: helped")]
    with OpenAIScriptedServer(script) as server:
        def outer() -> Agent:
            helper = _agent(server).clone(name="helper")
            return _agent(server, [helper.as_tool(tool_name="helper", tool_description="Helps.")])

        SETTINGS["agent"] = outer
        SETTINGS["kwargs"] = {"run_config": RunConfig(call_model_input_filter=_count_filter)}
        store = InMemoryJournalStore()
        driver = _process(store, config={"steering.enabled": True})
        assert driver.outputs[0]["k"]["answer"] == "done: helped"
        # start | reply 1 | the helper's whole run (one result) | reply 2 with the end
        assert store.writes == 4 and len(server.requests) == 3
        results = [r for r in driver.progress if r["kind"] == "tool_result"]
        assert [r["tool"] for r in results] == ["helper"] and "helped" in json.dumps(results)
        # The user's filter saw every request, the helper's included.
        assert SEEN["filtered"] == 3
        refuse_writes(store)
        assert _process(store, config={"steering.enabled": True}).outputs == driver.outputs
        assert len(server.requests) == 3


def _count_filter(data: Any) -> Any:
    SEEN["filtered"] = SEEN.get("filtered", 0) + 1
    return data.model_data


class Verdict(BaseModel):
    score: int
    reason: str


def test_a_typed_output_is_asked_with_its_schema_and_replayed_as_the_same_object() -> None:
    with OpenAIScriptedServer([_answer(json.dumps({"score": 2, "reason": "crushed box"}))]) as server:
        SETTINGS["agent"] = lambda: _agent(server, output_type=Verdict)
        store = InMemoryJournalStore()
        driver = _process(store)
        answer = driver.outputs[0]["k"]["answer"]
        assert isinstance(answer, Verdict) and answer == Verdict(score=2, reason="crushed box")
        assert server.requests[0]["response_format"]["type"] == "json_schema"
        refuse_writes(store)
        assert _process(store).outputs == driver.outputs and len(server.requests) == 1


class Rating(BaseModel):
    stars: int
    label: str


async def rate(n: int) -> Rating:
    """Rate a number.

    Args:
        n: The number.
    """
    return Rating(stars=n, label="ok")


def test_a_tools_value_reaches_the_sdk_as_itself_so_the_model_sees_what_it_would_without_the_journal() -> None:
    """The SDK sends the model ``str()`` of a tool's value: a pydantic model
    must not arrive as its JSON dict (``{'stars': 3, ...}``) instead."""
    with OpenAIScriptedServer([_tool_calls(("rate", {"n": 3})), _answer("rated")]) as server:
        SETTINGS["agent"] = lambda: _agent(server, tools=[function_tool(rate)])
        store = InMemoryJournalStore()
        _process(store)
        sent = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
        assert sent == [str(Rating(stars=3, label="ok"))] == ["stars=3 label='ok'"]
        refuse_writes(store)
        _process(store)
        assert len(server.requests) == 2


class UsageAgent(FlinkAgent):
    """Answers with the run's usage (``result.context_wrapper.usage``)."""

    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        result = await run_durably(ctx, SETTINGS["agent"](), event.input)
        usage = result.context_wrapper.usage
        ctx.send_event(OutputEvent(output={
            "answer": result.final_output, "requests": usage.requests, "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens, "per_request": len(usage.request_usage_entries),
        }))


def _delegating_agent(server: OpenAIScriptedServer, crash_at: Optional[int] = None) -> Agent:
    """A lead whose tool ``expert`` is another agent (``as_tool``: its run
    adds to the lead's usage); the client's ``crash_at``-th request crashes
    the process before it is sent."""

    async def on_request(request: httpx.Request) -> None:
        TOOL_CALLS["request"] += 1
        if TOOL_CALLS["request"] == crash_at:
            raise Crash("the process dies at the lead's second request, the expert's answer journaled")

    def model() -> OpenAIChatCompletionsModel:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0,
                             http_client=httpx.AsyncClient(event_hooks={"request": [on_request]}))
        return OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)

    expert = Agent(name="expert", instructions="You know physics.", model=model())
    return Agent(name="lead", instructions="You delegate.", model=model(),
                 tools=[expert.as_tool(tool_name="expert", tool_description="Asks the expert.")])


def test_the_usage_a_delegated_agent_added_is_the_same_after_a_crash_and_replay(tmp_path: Path) -> None:
    script = [_tool_calls(("expert", {"input": "why is the sky blue?"})), _answer("physics"), _answer("because")]
    with OpenAIScriptedServer(list(script)) as server:
        SETTINGS["agent"] = lambda: _delegating_agent(server)
        uninterrupted = run_local(UsageAgent(), tmp_path / "uninterrupted.db", "agents-usage")
    assert uninterrupted["answer"] == "because" and uninterrupted["requests"] == 3  # lead twice, expert once
    assert uninterrupted["per_request"] == 3 and uninterrupted["input_tokens"] > 0

    TOOL_CALLS.clear()
    with OpenAIScriptedServer(list(script)) as server:
        journal = tmp_path / "journal.db"
        SETTINGS["agent"] = lambda: _delegating_agent(server, crash_at=3)
        with pytest.raises(Crash):
            run_local(UsageAgent(), journal, "agents-usage")
        SETTINGS["agent"] = lambda: _delegating_agent(server)
        assert run_local(UsageAgent(), journal, "agents-usage") == uninterrupted
        assert len(server.requests) == 3, "the journaled expert was asked again"


def test_usage_of_each_model_request_is_journaled_with_it_counted_once_and_shown_to_followers() -> None:
    store = InMemoryJournalStore()
    replies = [{**_tool_calls(("double", {"n": 1})), "usage_extra": OPENAI_USAGE_DETAILS},
               {**_answer("fine"), "usage_extra": OPENAI_USAGE_DETAILS}]
    with OpenAIScriptedServer(replies) as server:
        SETTINGS["agent"] = lambda: _agent(server, [double])
        shown = check_usage([("k", "go")], lambda: _engine(store, PRICES), "respond", "gpt-4o-mini",
                            cached=2, reasoning=1)
        assert len(shown) == 2 and len(server.requests) == 2  # the replay asked nothing


@function_tool(needs_approval=True)
def refund(order_id: str) -> str:
    """Refund an order."""
    TOOL_CALLS[f"refund:{order_id}"] += 1
    return f"refunded {order_id}"


def _decide_approval(store: InMemoryJournalStore, state: str, body: bytes, seen: Dict[str, Any]) -> None:
    """A reviewer: wait for the run's pending approval, then decide it."""
    import time

    from flink_agents.stores.callbacks import PENDING

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pending = [r for r in store._callback_rows().values() if r.state == PENDING]
        if pending:
            (record,) = pending
            seen.update(purpose=record.purpose, details=json.loads(record.details), calls=dict(TOOL_CALLS))
            store.complete(record.callback_id, state, body, int(time.time() * 1000))
            return
        time.sleep(0.01)
    raise AssertionError("no pending approval")


@pytest.mark.parametrize("decision", ["resolved", "rejected"])
def test_a_tool_needing_approval_waits_for_a_durable_approval_instead_of_interrupting(decision: str) -> None:
    with OpenAIScriptedServer([_tool_calls(("refund", {"order_id": "A-1"})), _answer("done")]) as server:
        SETTINGS["agent"] = lambda: _agent(server, [refund])
        store = InMemoryJournalStore()
        engine = AgentEngine(AgentPlan.from_agent(OpenAIAgentsAgent()), {"callbacks.poll_interval_ms": 10},
                             job_id="job", store=store)
        driver = LocalDriver()
        seen: Dict[str, Any] = {}
        body = b"not without a receipt" if decision == "rejected" else b"{}"

        async def go() -> None:
            await asyncio.gather(host_runs.process_async(engine, driver, "k", "refund A-1"),
                                 asyncio.to_thread(_decide_approval, store, decision, body, seen))

        try:
            asyncio.run(go())
        finally:
            engine.close()
        assert seen["purpose"] == "approval" and seen["calls"] == {}  # nothing ran before the decision
        assert seen["details"]["tool"] == "refund" and seen["details"]["arguments"] == {"order_id": "A-1"}
        assert driver.outputs[0]["k"]["answer"] == "done"
        tool_message = next(m for m in server.requests[1]["messages"] if m["role"] == "tool")
        if decision == "resolved":
            assert TOOL_CALLS == Counter({"refund:A-1": 1})
            assert tool_message["content"] == "refunded A-1"
        else:
            assert TOOL_CALLS == Counter()
            assert tool_message["content"] == (
                "The call of tool refund was rejected by a reviewer: not without a receipt")
        # A replay (a restore to before the record) neither asks again nor runs the tool again.
        requests = len(server.requests)
        replayed = _process(store, "refund A-1")
        assert replayed.outputs[0]["k"]["answer"] == "done" and len(server.requests) == requests
        assert sum(TOOL_CALLS.values()) == (1 if decision == "resolved" else 0)
