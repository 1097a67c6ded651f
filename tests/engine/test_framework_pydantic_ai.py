"""Pydantic AI agents run durably inside actions
(``integrations.frameworks.pydantic_ai``): the real framework with its
``OpenAIChatModel`` over the real ``openai`` SDK against the strict scripted
OpenAI server, in the in-process engine (``AgentEngine`` + ``LocalDriver``
+ ``InMemoryJournalStore``)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any, Dict, List

import pytest

pytest.importorskip("pydantic_ai")

from pydantic import BaseModel  # noqa: E402
from pydantic_ai import Agent as PydanticAgent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

from flink_agents.runtime.execution.context import ActionContext
from flink_agents.runtime.durability import journal as journal_module  # noqa: E402
from flink_agents.api.agents.agent import Agent  # noqa: E402
from flink_agents.api.decorators import action  # noqa: E402
from flink_agents.api.events.event import InputEvent, OutputEvent  # noqa: E402
from flink_agents.integrations.frameworks.pydantic_ai import request_digest, run_durably  # noqa: E402
from flink_agents.runtime.engine import AgentEngine  # noqa: E402
from flink_agents.runtime.local.driver import LocalDriver  # noqa: E402
from flink_agents.stores.memory_store import InMemoryJournalStore  # noqa: E402
from tests.support.framework_runs import (  # noqa: E402
    CRASH_MODES, OPENAI_USAGE_DETAILS, PRICES, THREE_TOOLS_COMMITS, Crash, check_one_request_turn, check_repeated_calls, crash_and_recover,
    check_usage, first_model_reply, kinds_by_commit, process, progress_engine, refuse_writes, run_records,
)
from tests.support.scripted_openai_server import OpenAIScriptedServer  # noqa: E402
from tests.support import host_runs  # noqa: E402

CALLS: Counter = Counter()
SETTINGS: Dict[str, Any] = {}


class Verdict(BaseModel):
    score: int
    reasons: List[str]


def _tool_calls(n: int, ids: bool = True) -> Dict[str, Any]:
    """A reply asking for ``double(n=i)`` for i < n (ids ``call_i``: a
    provider reusing its ids every turn)."""
    return {"role": "assistant", "content": None, "tool_calls": [
        dict({"id": f"call_{i}"} if ids else {}, type="function",
             function={"name": "double", "arguments": json.dumps({"n": i})})
        for i in range(n)]}


def _answer(text: str) -> Dict[str, Any]:
    return {"role": "assistant", "content": text}


def _agent(base_url: str) -> PydanticAgent:
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=base_url, api_key="test-key"))
    agent = PydanticAgent(model, name="reviewer", instructions="Answer briefly.")

    @agent.tool_plain
    async def double(n: int) -> int:
        """Twice n."""
        CALLS[f"tool:{n}"] += 1
        if SETTINGS.get("crash_in_tool") == n:
            SETTINGS["crash_in_tool"] = None
            await asyncio.sleep(0.05)  # the other tools finish (and commit) first
            raise Crash(f"crash while tool {n} runs")
        await asyncio.sleep(0)  # instant tools: the round's results land in one loop turn
        return 2 * n

    return agent


class PydanticAIAgent(Agent):
    """Runs ``SETTINGS["agent"]`` for each record, durably."""

    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        SETTINGS["loop"] = asyncio.get_running_loop()
        result = await run_durably(ctx, SETTINGS["agent"], event.input, **SETTINGS.get("kwargs", {}))
        messages = result.all_messages()
        output = result.output.model_dump() if isinstance(result.output, BaseModel) else result.output
        ctx.send_event(OutputEvent(output={"answer": output, "run_id": messages[-1].run_id,
                                           "conversation_id": messages[-1].conversation_id}))


@pytest.fixture(autouse=True)
def _reset() -> Any:
    CALLS.clear()
    SETTINGS.clear()
    yield
    SETTINGS.clear()


def _engine(store: InMemoryJournalStore, config: Dict[str, Any] | None = None) -> AgentEngine:
    return progress_engine(PydanticAIAgent(), store, config)


def _process(store: InMemoryJournalStore, value: Any = "go", key: str = "k", config: Dict[str, Any] | None = None):
    return process(PydanticAIAgent(), store, value, key, config)


def test_a_plain_turn_commits_twice_and_a_replay_writes_and_asks_nothing() -> None:
    store = InMemoryJournalStore()
    with OpenAIScriptedServer([_answer("fine")]) as server:
        SETTINGS["agent"] = _agent(server.base_url)
        driver = _process(store)
        assert store.writes == 2 and len(server.requests) == 1
        assert driver.outputs[0]["k"]["answer"] == "fine"
        check_one_request_turn(driver.progress, "fine")
        # Replay the record on a fresh engine: nothing written, nothing asked.
        refuse_writes(store)
        replayed = _process(store)
        assert len(server.requests) == 1 and replayed.outputs == driver.outputs


def test_a_round_of_three_parallel_tools_commits_four_times_and_followers_see_it_in_order() -> None:
    store = InMemoryJournalStore()
    with OpenAIScriptedServer([_tool_calls(3), _answer("0, 2 and 4")]) as server:
        SETTINGS["agent"] = _agent(server.base_url)
        driver = _process(store)
        assert driver.outputs[0]["k"]["answer"] == "0, 2 and 4"
        assert CALLS == Counter({"tool:0": 1, "tool:1": 1, "tool:2": 1}) and len(server.requests) == 2
        # start | reply 1 (committed before the tools start) | the three results | reply 2 with the end
        assert store.writes == 4
        assert kinds_by_commit(driver.progress) == THREE_TOOLS_COMMITS
        first = first_model_reply(driver.progress)
        assert [(c["name"], json.loads(c["arguments"])) for c in first["tool_calls"]] == [
            ("double", {"n": i}) for i in range(3)]
        results = [r for r in driver.progress if r["kind"] == "tool_result"]
        assert sorted(r["result"]["result"] for r in results) == [0, 2, 4]
        # The second request carries the three results under the turn's ids.
        sent_calls = [c["id"] for m in server.requests[1]["messages"] if m["role"] == "assistant"
                      for c in m["tool_calls"]]
        answered = [m["tool_call_id"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
        assert sent_calls == answered and len(set(sent_calls)) == 3
        assert all(i.startswith("fa") for i in sent_calls)  # the turn's ids, not the provider's call_0..2
        # Replay: no request, no tool, no write, the same output.
        CALLS.clear()
        writes = store.writes
        replayed = _process(store)
        assert store.writes == writes and not CALLS and len(server.requests) == 2
        assert replayed.outputs == driver.outputs


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_at_every_write_of_a_tool_turn_recovers_without_repeating_completed_calls(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The round's three results in one write, as the 4 writes below count,
    # even on a loaded machine: its group commit waits up to 200 ms, not 5,
    # for the siblings (which land in one loop turn when nothing starves it).
    monkeypatch.setattr(journal_module, "GROUP_COMMIT_DELAY_S", 0.2)
    script = [_tool_calls(3), _answer("0, 2 and 4")]
    with OpenAIScriptedServer(script) as reference:
        SETTINGS["agent"] = _agent(reference.base_url)
        expected_store = InMemoryJournalStore()
        expected = _process(expected_store)
    expected_calls = Counter(CALLS)
    assert expected_store.writes == 4
    for k in range(1, expected_store.writes + 1):
        CALLS.clear()
        store = InMemoryJournalStore()
        with OpenAIScriptedServer(script * 2) as server:
            SETTINGS["agent"] = _agent(server.base_url)
            recovered = crash_and_recover(store, mode, k, lambda: _process(store))
            requests = [len([m for m in r["messages"] if m["role"] == "tool"]) for r in server.requests]
        assert [o["k"]["answer"] for o in recovered.outputs] == [o["k"]["answer"] for o in expected.outputs]
        assert [o["k"]["run_id"] for o in recovered.outputs] == [o["k"]["run_id"] for o in expected.outputs]
        # After the write: whatever was committed is replayed, each request and
        # tool ran once. Before it: the write had not committed, its calls may
        # run again (at most once more).
        check_repeated_calls(mode, k, CALLS, expected_calls)
        if mode == "after_write":
            assert requests == [0, 3], f"crash after write {k}: {requests}"
        else:
            assert requests.count(0) <= 2 and requests.count(3) <= 2 and len(requests) >= 2


def test_a_crash_while_a_tool_runs_repeats_only_that_tool_and_what_follows() -> None:
    store = InMemoryJournalStore()
    with OpenAIScriptedServer([_tool_calls(3), _answer("0, 2 and 4")] * 2) as server:
        SETTINGS["agent"] = _agent(server.base_url)
        SETTINGS["crash_in_tool"] = 2
        with pytest.raises(Crash):
            _process(store)
        recovered = _process(store)
        assert recovered.outputs[0]["k"]["answer"] == "0, 2 and 4"
        # Tool 2 ran twice (it crashed); tools 0 and 1 finished before and replayed.
        assert CALLS == Counter({"tool:0": 1, "tool:1": 1, "tool:2": 2})
        assert len(server.requests) == 2


def test_steering_sent_while_the_first_request_runs_reaches_the_next_requests_through_the_history() -> None:
    store = InMemoryJournalStore()
    engine = _engine(store, {"steering.enabled": True})
    driver = LocalDriver()

    def reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
        if index == 0:  # on the server's thread, while request 0 is in flight
            SETTINGS["loop"].call_soon_threadsafe(host_runs.steer, engine, driver, "k", "answer in French")
        return _tool_calls(1) if index < 2 else _answer("zéro")

    with OpenAIScriptedServer() as server:
        server.set_reply_fn(reply)
        SETTINGS["agent"] = _agent(server.base_url)
        run_records(engine, [("k", "go")], driver)
    assert driver.outputs[0]["k"]["answer"] == "zéro"
    # Request 1: after the first tool result. Request 2: still there, once
    # (kept in the run's history, not re-added).
    assert [m["role"] for m in server.requests[1]["messages"]] == ["system", "user", "assistant", "tool", "user"]
    for request in server.requests[1:]:
        assert [m["content"] for m in request["messages"] if m["role"] == "user"] == ["go", "answer in French"]
    assert "steering_consumed" in [r["kind"] for r in driver.progress]


def test_a_per_key_conversation_carries_history_bounded_by_whole_turns_with_reused_provider_ids() -> None:
    # Each turn: request (prompt), response (call_0), request (tool result), response (answer) = 4 messages.
    script = [_tool_calls(1), _answer("a0"), _tool_calls(1), _answer("a1"), _tool_calls(1), _answer("a2")]
    store = InMemoryJournalStore()
    engine = _engine(store)
    with OpenAIScriptedServer(script) as server:
        SETTINGS["agent"] = _agent(server.base_url)
        SETTINGS["kwargs"] = {"conversation": "per_key", "conversation_max_messages": 4}
        driver = run_records(engine, [("k", value) for value in ("q0", "q1", "q2")])
    assert [o["k"]["answer"] for o in driver.outputs] == ["a0", "a1", "a2"]
    # The second turn's first request: turn q0 whole, then q1.
    second = server.requests[2]["messages"]
    assert [m["content"] for m in second if m["role"] == "user"] == ["q0", "q1"]
    # The third turn's first request: only the newest whole turn (q1) is kept (4 messages), then q2.
    third = server.requests[4]["messages"]
    assert [m["content"] for m in third if m["role"] == "user"] == ["q1", "q2"]
    # call_0 every turn from the provider: the history's calls carry distinct ids, each paired with its result.
    final = server.requests[5]["messages"]
    calls = [c["id"] for m in final if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert len(calls) == 2 == len(set(calls))
    assert [m["tool_call_id"] for m in final if m["role"] == "tool"] == calls
    # The same conversation id for the key, a new run id per record.
    assert len({o["k"]["conversation_id"] for o in driver.outputs}) == 1
    assert len({o["k"]["run_id"] for o in driver.outputs}) == 3


def test_a_typed_output_is_journaled_in_the_response_and_replays() -> None:
    final = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "final_result", "arguments": json.dumps({"score": 4, "reasons": ["fast"]})}}]}
    store = InMemoryJournalStore()
    with OpenAIScriptedServer([final]) as server:
        SETTINGS["agent"] = _agent(server.base_url)
        SETTINGS["kwargs"] = {"output_type": Verdict}
        driver = _process(store)
        replayed = _process(store)
        assert len(server.requests) == 1 and store.writes == 2
    assert driver.outputs[0]["k"]["answer"] == {"score": 4, "reasons": ["fast"]} and replayed.outputs == driver.outputs
    reply = first_model_reply(driver.progress)
    assert [c["name"] for c in reply["tool_calls"]] == ["final_result"]


def test_an_invalid_typed_answer_is_asked_again_and_both_requests_replay() -> None:
    def final(arguments: Dict[str, Any]) -> Dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "final_result", "arguments": json.dumps(arguments)}}]}

    store = InMemoryJournalStore()
    with OpenAIScriptedServer([final({"score": "high"}), final({"score": 5, "reasons": ["ok"]})]) as server:
        SETTINGS["agent"] = _agent(server.base_url)
        SETTINGS["kwargs"] = {"output_type": Verdict}
        driver = _process(store)
        writes = store.writes
        replayed = _process(store)
        assert len(server.requests) == 2 and store.writes == writes == 3
    assert driver.outputs[0]["k"]["answer"] == {"score": 5, "reasons": ["ok"]} and replayed.outputs == driver.outputs
    # Pydantic AI's validation error went back to the model as the retry of the rewritten call.
    retry = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert len(retry) == 1 and "score" in retry[0]["content"] and retry[0]["tool_call_id"].startswith("fa")


def test_run_ids_are_equal_across_a_replay_and_differ_across_records_and_keys() -> None:
    with OpenAIScriptedServer([_answer("x")] * 4) as server:
        SETTINGS["agent"] = _agent(server.base_url)
        store = InMemoryJournalStore()
        first = _process(store)
        replayed = _process(store)
        other_key = _process(InMemoryJournalStore(), key="other")
        # Two records of key k on one host: seq 0, then seq 1.
        driver = run_records(_engine(InMemoryJournalStore()), [("k", "go"), ("k", "again")])
    ids = first.outputs[0]["k"]
    assert replayed.outputs[0]["k"] == ids
    assert other_key.outputs[0]["other"]["run_id"] != ids["run_id"]
    assert other_key.outputs[0]["other"]["conversation_id"] != ids["conversation_id"]
    assert driver.outputs[0]["k"]["run_id"] == ids["run_id"]  # the same record (job, key, seq)
    assert driver.outputs[1]["k"]["run_id"] != ids["run_id"]
    assert driver.outputs[1]["k"]["conversation_id"] == ids["conversation_id"]


def test_the_digest_leaves_out_timestamps_usage_and_provider_ids() -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.usage import RequestUsage
    import datetime

    def messages(when: datetime.datetime, response_id: str) -> list:
        return [ModelRequest(parts=[UserPromptPart("hi", timestamp=when)], timestamp=when),
                ModelResponse(parts=[TextPart("yo")], timestamp=when, provider_response_id=response_id,
                              usage=RequestUsage(input_tokens=len(response_id)))]

    now = datetime.datetime.now(datetime.timezone.utc)
    a = request_digest(messages(now, "r1"), None, ModelRequestParameters())
    b = request_digest(messages(now + datetime.timedelta(seconds=5), "r22"), None, ModelRequestParameters())
    assert a == b and a["messages"][0]["parts"] == [{"part_kind": "user-prompt", "content": "hi"}]


def test_bad_arguments_are_refused_with_a_clear_error() -> None:
    SETTINGS["agent"] = _agent("http://127.0.0.1:9/v1")
    for kwargs, match in (({"conversation": "global"}, "conversation must be"),
                          ({"run_id": "r"}, "sets run_id itself"),
                          ({"event_stream_handler": print}, "event_stream_handler"),
                          ({"conversation": "per_key", "message_history": []}, "do not pass both")):
        SETTINGS["kwargs"] = kwargs
        with pytest.raises(Exception, match=match):
            _process(InMemoryJournalStore())
    # Tools added per run are not wrapped when the capability binds: Pydantic AI refuses them.
    from pydantic_ai import FunctionToolset

    extra = FunctionToolset()

    @extra.tool_plain
    def triple(n: int) -> int:
        return 3 * n

    SETTINGS["kwargs"] = {"toolsets": [extra]}
    with pytest.raises(Exception, match="FunctionToolset cannot be added at runtime with Flink Agents"):
        _process(InMemoryJournalStore())
    nameless = PydanticAgent(OpenAIChatModel("m", provider=OpenAIProvider(base_url="http://127.0.0.1:9/v1",
                                                                          api_key="k")))
    class Ctx(ActionContext):  # an action's context, never set up: refusals come before the turn touches it
        def __init__(self) -> None:
            pass

    with pytest.raises(ValueError, match="needs the agent's name"):
        asyncio.run(run_durably(Ctx(), nameless, "go"))
    with pytest.raises(TypeError, match="needs a pydantic_ai.Agent"):
        asyncio.run(run_durably(Ctx(), object(), "go"))
    with pytest.raises(TypeError, match="needs the ctx an action of this runtime gets, got object"):
        asyncio.run(run_durably(object(), nameless, "go", conversation="per_key"))


def test_usage_of_each_model_request_is_journaled_with_it_counted_once_and_shown_to_followers() -> None:
    store = InMemoryJournalStore()
    replies = [{**_tool_calls(1), "usage_extra": OPENAI_USAGE_DETAILS},
               {**_answer("fine"), "usage_extra": OPENAI_USAGE_DETAILS}]
    with OpenAIScriptedServer(replies) as server:
        SETTINGS["agent"] = _agent(server.base_url)
        shown = check_usage([("k", "go")], lambda: _engine(store, PRICES), "respond", "gpt-4o-mini",
                            cached=2, reasoning=1)
        assert len(shown) == 2 and len(server.requests) == 2  # the replay asked nothing
