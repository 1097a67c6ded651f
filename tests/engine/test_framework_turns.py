"""The shared core of the framework integrations (``integrations.frameworks
.durable_turn``), driven by a minimal in-test "framework": a model function
and tools run with ``asyncio.gather``, as agent frameworks run a parallel
tool round. The real frameworks are tested in ``test_framework_*.py``."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.runtime.durability import journal as journal_module
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.integrations.frameworks.conversation import FrameworkConversation
from flink_agents.integrations.frameworks.durable_turn import DurableTurn, current_turn, steering_texts
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.framework_runs import (
    CRASH_MODES, ONE_REQUEST_COMMITS, check_repeated_calls, engine_for, first_model_reply, kinds_by_commit, process,
    progress_engine, recoveries, refuse_writes, run_records,
)
from tests.support import host_runs

CALLS: Counter = Counter()
SEEN_REQUESTS: List[List[Dict[str, Any]]] = []


def _model(history: List[Dict[str, Any]], tools: int) -> Dict[str, Any]:
    """Asks for ``tools`` tool calls (provider ids call_0.. every time), then answers."""
    prompt_at = max(i for i, m in enumerate(history) if m["role"] == "user" and not m.get("steering"))
    turn = history[prompt_at:]
    results = [m["content"] for m in turn if m["role"] == "tool"]
    steering = [m["content"] for m in turn if m.get("steering")]
    if tools and not results:
        return {"content": None, "tool_calls": [
            {"id": f"call_{i}", "name": "double", "arguments": {"n": i}} for i in range(tools)]}
    return {"content": f"sum of {results} steered by {steering}", "tool_calls": []}


async def _fake_framework_run(prompt: str, tools: int, history: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """A framework's agent loop: it knows nothing of the journal, only its
    extension points (the model and the tools, wrapped below)."""
    messages = history + [{"role": "user", "content": prompt}]
    while True:
        turn = current_turn()
        messages += [{"role": "user", "content": t, "steering": True} for t in steering_texts(turn.take_steering())]
        reply = await _journaled_model(list(messages), tools)
        messages.append(reply)
        if not reply["tool_calls"]:
            return messages
        results = await asyncio.gather(*(_journaled_tool(call) for call in reply["tool_calls"]))
        messages += [{"role": "tool", "id": c["id"], "content": r} for c, r in zip(reply["tool_calls"], results)]


async def _journaled_model(messages: List[Dict[str, Any]], tools: int) -> Dict[str, Any]:
    turn = current_turn()

    async def call(index: int) -> Dict[str, Any]:
        CALLS["model"] += 1
        SEEN_REQUESTS.append(messages)
        await asyncio.sleep(0)
        reply = _model(messages, tools)
        reply["tool_calls"] = [dict(c, id=turn.tool_call_id(index, j)) for j, c in enumerate(reply["tool_calls"])]
        reply["role"] = "assistant"
        return reply

    def view(reply: Dict[str, Any]):
        return reply["content"], [(c["id"], c["name"], json.dumps(c["arguments"])) for c in reply["tool_calls"]]

    return await turn.model_request(messages, call, view)


async def _journaled_tool(call: Dict[str, Any]) -> Any:
    turn = current_turn()

    async def run() -> Any:
        CALLS[f"tool:{call['arguments']['n']}"] += 1
        assert current_turn() is None  # inside a journaled body: nothing nested is journaled again
        await asyncio.sleep(0)  # instant tools: the round's results land in one loop turn
        return 2 * call["arguments"]["n"]

    return await turn.tool_call(call["id"], call["name"], call["arguments"], run)


class FakeFrameworkAgent(Agent):
    def __init__(self, tools: int = 0, conversation: FrameworkConversation | None = None) -> None:
        super().__init__()
        self.tools = tools
        self.conversation = conversation

    @action(InputEvent)
    @staticmethod
    async def respond(event: InputEvent, ctx: Any) -> None:
        tools, conversation = _SETTINGS["tools"], _SETTINGS["conversation"]
        history = conversation.history(ctx.short_term_memory) if conversation else []
        with DurableTurn(ctx, "fake", "assistant", prompt=event.input) as turn:
            messages = await _fake_framework_run(event.input, tools, history)
            ids = (turn.run_id, turn.new_id("message"), turn.now().isoformat())
        if conversation:
            conversation.append_turn(ctx.short_term_memory, messages[len(history):])
        ctx.send_event(OutputEvent(output={"answer": messages[-1]["content"], "ids": ids}))


_SETTINGS: Dict[str, Any] = {"tools": 0, "conversation": None}


@pytest.fixture(autouse=True)
def _reset() -> Any:
    CALLS.clear()
    SEEN_REQUESTS.clear()
    _SETTINGS.update(tools=0, conversation=None)
    yield


def _process(store: InMemoryJournalStore, value: Any = "go", key: str = "k") -> LocalDriver:
    return process(FakeFrameworkAgent(), store, value, key)


def test_a_plain_framework_turn_commits_twice_and_a_replay_writes_nothing() -> None:
    store = InMemoryJournalStore()
    driver = _process(store)
    assert store.writes == 2 and CALLS == Counter({"model": 1})
    assert kinds_by_commit(driver.progress) == ONE_REQUEST_COMMITS
    first_output = driver.outputs
    # Replay the run (a restore to before the record): nothing is asked, nothing written.
    CALLS.clear()
    refuse_writes(store)
    replayed = _process(store)
    assert replayed.outputs == first_output and not CALLS


def test_a_round_of_three_instant_parallel_tools_commits_four_times() -> None:
    _SETTINGS["tools"] = 3
    store = InMemoryJournalStore()
    driver = _process(store)
    assert driver.outputs[0]["k"]["answer"] == "sum of [0, 2, 4] steered by []"
    assert CALLS == Counter({"model": 2, "tool:0": 1, "tool:1": 1, "tool:2": 1})
    # start | reply 1 (before the tools start) | the three results (one group
    # commit: they land in one loop turn) | reply 2 with the run's end
    assert store.writes == 4
    commits = kinds_by_commit(driver.progress)
    assert commits[2] == ["model_reply"] and commits[3] == ["tool_result"] * 3
    reply = first_model_reply(driver.progress)
    assert [c["name"] for c in reply["tool_calls"]] == ["double"] * 3


def test_tool_call_ids_are_rewritten_per_request_so_provider_ids_reused_across_turns_pair_right() -> None:
    _SETTINGS["tools"] = 2
    _SETTINGS["conversation"] = FrameworkConversation("fake", "assistant")
    store = InMemoryJournalStore()
    run_records(engine_for(FakeFrameworkAgent(), store), [("k", "one"), ("k", "two")])
    last = SEEN_REQUESTS[-1]
    call_ids = [c["id"] for m in last if m["role"] == "assistant" for c in m["tool_calls"]]
    assert len(call_ids) == 4 == len(set(call_ids))  # call_0, call_1 twice from the provider
    answered = [m["id"] for m in last if m["role"] == "tool"]
    assert answered == call_ids
    assert [m["content"] for m in last if m["role"] == "user"] == ["one", "two"]


@pytest.mark.parametrize("mode", CRASH_MODES)
def test_a_crash_at_every_write_of_a_framework_turn_recovers_without_repeating_completed_calls(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The round's three results in one write, as the 4 writes below count,
    # even on a loaded machine: its group commit waits up to 200 ms, not 5,
    # for the siblings (which land in one loop turn when nothing starves it).
    monkeypatch.setattr(journal_module, "GROUP_COMMIT_DELAY_S", 0.2)
    _SETTINGS["tools"] = 3
    expected_store = InMemoryJournalStore()
    expected = _process(expected_store)
    expected_calls = Counter(CALLS)
    writes = expected_store.writes
    assert writes == 4
    for k, recovered in recoveries(mode, writes, _process, CALLS.clear):
        # The same answer and ids (the clock is the crashed attempt's start, journaled).
        assert [(o["k"]["answer"], o["k"]["ids"][:2]) for o in recovered.outputs] == [
            (o["k"]["answer"], o["k"]["ids"][:2]) for o in expected.outputs], f"crash {mode} {k}"
        check_repeated_calls(mode, k, CALLS, expected_calls)


def test_steering_reaches_the_turn_before_its_next_model_request() -> None:
    _SETTINGS["tools"] = 1
    store = InMemoryJournalStore()
    engine = progress_engine(FakeFrameworkAgent(), store, {"steering.enabled": True})
    driver = LocalDriver()
    original = _model

    def steered(history: List[Dict[str, Any]], tools: int) -> Dict[str, Any]:
        if len(SEEN_REQUESTS) == 1:
            host_runs.steer(engine, driver, "k", "answer in French")  # arrives while the first request runs
        return original(history, tools)

    globals()["_model"] = steered
    try:
        run_records(engine, [("k", "go")], driver)
    finally:
        globals()["_model"] = original
    assert driver.outputs[0]["k"]["answer"] == "sum of [0] steered by ['answer in French']"
    assert [m["content"] for m in SEEN_REQUESTS[1] if m["role"] == "user"] == ["go", "answer in French"]
    assert "steering_consumed" in [r["kind"] for r in driver.progress]


def test_ids_and_clock_come_from_the_record_and_replay_the_same() -> None:
    store = InMemoryJournalStore()
    first = _process(store)
    replayed = _process(store)
    other_key = _process(InMemoryJournalStore(), key="other")
    assert first.outputs == replayed.outputs
    assert first.outputs[0]["k"]["ids"][:2] != other_key.outputs[0]["other"]["ids"][:2]


def test_a_framework_conversation_is_bounded_by_whole_turns() -> None:
    _SETTINGS["tools"] = 1
    conversation = FrameworkConversation("fake", "assistant", max_messages=8)
    _SETTINGS["conversation"] = conversation
    # Each turn: user, assistant (1 call), tool, assistant = 4 messages.
    run_records(engine_for(FakeFrameworkAgent(), InMemoryJournalStore()), [("k", f"q{n}") for n in range(4)])
    # Before the 4th turn's first request, at most 8 stored messages: the
    # whole turns of q1 and q2 (4 messages each), then the new prompt.
    last = SEEN_REQUESTS[-2]
    assert [m["content"] for m in last if m["role"] == "user"] == ["q1", "q2", "q3"]
    assert len(last) == 9


def test_a_turn_outside_an_action_is_refused() -> None:
    with pytest.raises(TypeError, match="needs the ctx an action"):
        DurableTurn(object(), "fake", "assistant")


class SyncActionAgent(Agent):
    @action(InputEvent)
    @staticmethod
    def respond(event: InputEvent, ctx: Any) -> None:
        DurableTurn(ctx, "fake", "assistant")


def test_a_turn_in_a_sync_action_is_refused_naming_the_action() -> None:
    engine = engine_for(SyncActionAgent(), InMemoryJournalStore())
    with pytest.raises(Exception, match="action 'respond' is not async"):
        run_records(engine, [("k", "go")])


def test_steering_messages_of_any_shape_become_non_empty_texts() -> None:
    assert steering_texts([
        "plain", None, "", {"content": "as dict"}, {"text": "as text"},
        {"role": "user", "content": [{"type": "text", "text": "block "}, {"type": "text", "text": "list"}]},
        {"content": 5}, {"note": 1}, 7,
    ]) == ["plain", "as dict", "as text", "block list", '{"content":5}', '{"note":1}', "7"]
