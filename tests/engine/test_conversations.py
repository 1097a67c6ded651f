"""Per-key conversations of the built-in chat action: turns across records,
bounds and compaction, provider ids reused across turns, replay after a crash."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from typing import Any, Dict, List, Sequence, Tuple

import pytest
from pydantic import ValidationError

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.features.conversation import (
    compact,
    conversation_path,
    estimate_tokens,
    pairing_problems,
    turn_tokens,
    validate_bounds,
)
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.execution.state import KeyState
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs

SYSTEM = "Answer briefly."
CALLS: Counter = Counter()  # what really ran, across engines and attempts
REQUESTS: List[List[Dict[str, Any]]] = []  # the messages of every model call, in order
_LOCK = threading.Lock()


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing may catch it)."""


@pytest.fixture(autouse=True)
def _reset():
    CALLS.clear()
    REQUESTS.clear()
    yield
    CALLS.clear()
    REQUESTS.clear()


# -- an in-process model ------------------------------------------------------------
#
# A user message "t3/2" asks for turn t3 with 2 tool calls (none if no "/n").
# The model asks for the calls (every turn with the provider ids call_0,
# call_1, ...), then answers with the results it got for this turn.

def _turn_name(messages: Sequence[ChatMessage]) -> Tuple[str, int]:
    user = next(m for m in reversed(messages) if m.role == MessageRole.USER)
    name, _, count = user.content.partition("/")
    return name, int(count or 0)


class TurnConnection(BaseChatModelConnection):
    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        with _LOCK:
            CALLS["model"] += 1
            REQUESTS.append([m.model_dump(mode="json") for m in messages])
        name, count = _turn_name(messages)
        last = messages[-1]
        if last.role == MessageRole.USER and count:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": {"q": f"{name}#{i}"}}}
                for i in range(count)
            ])
        results = []
        for message in reversed(messages):
            if message.role != MessageRole.TOOL:
                break
            results.insert(0, message.content)
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"answer to {name}: {results}")


class TurnSetup(BaseChatModelSetup):
    pass


def lookup(q: str) -> str:
    """Look something up."""
    with _LOCK:
        CALLS["tool"] += 1
    return f"found {q}"


def on_input(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="chat", messages=[
        ChatMessage(role=MessageRole.SYSTEM, content=SYSTEM),
        ChatMessage(role=MessageRole.USER, content=str(event.input)),
    ]))


def on_response(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={
        "answer": event.response.content,
        "fields": ctx.short_term_memory.get_field_names(),
    }))


def turn_agent(conversation: str = "per_key", **bounds: Any) -> Agent:
    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input)
    agent.add_action("on_response", [ChatResponseEvent], on_response)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=TurnConnection))
    agent.add_resource("chat", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=TurnSetup, connection="conn", tools=["lookup"], conversation=conversation, **bounds,
    ))
    agent.add_resource("lookup", ResourceType.TOOL, lookup)
    return agent


def _run_env(agent: Agent, records: List[Dict[str, Any]]) -> List[Dict[Any, Any]]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    out = env.from_list(records).apply(agent).to_list()
    env.execute()
    return out


def _process(
    agent: Agent,
    records: List[Tuple[Any, Any]],
    store: InMemoryJournalStore | None = None,
    driver: LocalDriver | None = None,
) -> LocalDriver:
    """Run ``records`` in order on a new engine; the resources are closed on
    the engine's own loop."""
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store or InMemoryJournalStore())
    driver = driver or LocalDriver()

    async def go() -> None:
        try:
            for key, value in records:
                await host_runs.process_async(engine, driver, key, value)
        finally:
            engine.close()

    asyncio.run(go())
    return driver


def _stored(driver: LocalDriver, key: Any, setup: str = "chat") -> List[List[Dict[str, Any]]] | None:
    value = driver.states[key].short_term_memory.get(conversation_path(setup))
    return None if value is None else value["turns"]


def _brief(messages: Sequence[Dict[str, Any]]) -> List[Tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


def _request_for(user_text: str) -> List[Dict[str, Any]]:
    """The first model request whose newest user message is ``user_text``."""
    for request in REQUESTS:
        users = [m["content"] for m in request if m["role"] == "user"]
        if users and users[-1] == user_text:
            return request
    raise AssertionError(f"no request for {user_text!r}")


def _strict_problems(messages: Sequence[Dict[str, Any]], tool_id: Any) -> List[str]:
    """What a strict provider rejects: an assistant message's tool calls must
    be answered by the tool messages right after it, each call exactly once;
    a tool message must answer a call of that assistant message; ids are
    unique within the request. ``tool_id(message)`` reads a tool message's
    call id."""
    problems: List[str] = []
    seen: set = set()
    open_calls: Dict[str, int] = {}
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            call_id = tool_id(message)
            if call_id not in open_calls:
                problems.append(f"#{index}: tool result {call_id!r} answers no open call")
            elif open_calls[call_id]:
                problems.append(f"#{index}: second result for {call_id!r}")
            else:
                open_calls[call_id] = 1
            continue
        missing = [c for c, answered in open_calls.items() if not answered]
        if missing:
            problems.append(f"#{index}: calls {missing} have no result before the next message")
        open_calls = {}
        for call in message.get("tool_calls") or []:
            if call["id"] in seen:
                problems.append(f"#{index}: call id {call['id']!r} used twice in one request")
            seen.add(call["id"])
            open_calls[call["id"]] = 0
    missing = [c for c, answered in open_calls.items() if not answered]
    if missing:
        problems.append(f"end: calls {missing} have no result")
    return problems


def _runtime_tool_id(message: Dict[str, Any]) -> Any:
    return (message.get("extra_args") or {}).get("tool_call_id")


# -- turns across records --------------------------------------------------------


def test_records_of_one_key_form_one_conversation_and_keys_stay_apart():
    out = _run_env(turn_agent(), [
        {"key": "a", "value": "q1"},
        {"key": "b", "value": "p1"},
        {"key": "a", "value": "q2"},
        {"key": "b", "value": "p2"},
        {"key": "a", "value": "q3"},
    ])
    assert [o["a"]["answer"] for o in out if "a" in o] == ["answer to q1: []", "answer to q2: []", "answer to q3: []"]
    # The third request of "a": its instructions first, then turns 1 and 2, then turn 3.
    assert _brief(_request_for("q3")) == [
        ("system", SYSTEM),
        ("user", "q1"), ("assistant", "answer to q1: []"),
        ("user", "q2"), ("assistant", "answer to q2: []"),
        ("user", "q3"),
    ]
    # "b" has its own conversation: nothing of "a" in it.
    assert _brief(_request_for("p2")) == [
        ("system", SYSTEM), ("user", "p1"), ("assistant", "answer to p1: []"), ("user", "p2"),
    ]
    assert _brief(_request_for("p1")) == [("system", SYSTEM), ("user", "p1")]
    # The runtime's entry is hidden from the user's view of memory.
    assert all(next(iter(o.values()))["fields"] == [] for o in out)


def test_conversation_none_keeps_each_request_alone():
    driver = _process(turn_agent("none"), [("a", "q1"), ("a", "q2/1"), ("a", "q3")])
    assert _brief(_request_for("q3")) == [("system", SYSTEM), ("user", "q3")]
    assert [len(r) for r in REQUESTS] == [2, 2, 4, 2]  # q2's second call carries its own tool round only
    assert driver.states["a"].short_term_memory == {}


def test_the_stored_conversation_holds_the_turns_without_instructions():
    driver = _process(turn_agent(), [("k", "t1/2"), ("k", "t2")])
    turns = _stored(driver, "k")
    assert [_brief(t) for t in turns] == [
        [("user", "t1/2"), ("assistant", ""), ("tool", "found t1#0"), ("tool", "found t1#1"),
         ("assistant", "answer to t1: ['found t1#0', 'found t1#1']")],
        [("user", "t2"), ("assistant", "answer to t2: []")],
    ]
    # Runtime ids in the history; the provider's kept as original_id.
    calls = turns[0][1]["tool_calls"]
    assert [c["original_id"] for c in calls] == ["call_0", "call_1"]
    assert [c["id"] for c in calls] == [_runtime_tool_id(m) for m in turns[0][2:4]]
    assert not {"call_0", "call_1"} & {c["id"] for c in calls}
    # Turn 2's model call saw turn 1 whole, tool round included.
    assert _brief(_request_for("t2"))[1:-1] == _brief(turns[0])


def on_input_twice(event: InputEvent, ctx: Any) -> None:
    for text in ("x", "y"):
        ctx.send_event(ChatRequestEvent(model="chat", messages=[ChatMessage(content=text)]))


def test_turns_that_end_while_another_runs_are_kept_too():
    """Three requests in one run: "r1/1" waits for its tool while "x" and
    "y" end; its turn is appended to what is stored when it ends."""
    agent = turn_agent()
    agent.add_action("twice", [InputEvent], on_input_twice)
    driver = _process(agent, [("k", "r1/1")])
    assert [t[0]["content"] for t in _stored(driver, "k")] == ["x", "y", "r1/1"]


def test_the_conversation_expires_with_the_memory_ttl():
    now = [1000.0]
    driver = LocalDriver(memory_ttl_s=60, clock=lambda: now[0])
    _process(turn_agent(), [("k", "t1")], driver=driver)
    now[0] += 30
    _process(turn_agent(), [("k", "t2")], driver=driver)  # a turn renews the memory
    assert [t[0]["content"] for t in _stored(driver, "k")] == ["t1", "t2"]
    now[0] += 61
    _process(turn_agent(), [("k", "t3")], driver=driver)
    assert _brief(_request_for("t3")) == [("system", SYSTEM), ("user", "t3")]
    assert [t[0]["content"] for t in _stored(driver, "k")] == ["t3"]


# -- bounds and compaction ---------------------------------------------------------------

# Turn sizes in messages: "/n" adds an assistant call message and n results.
TURNS = ["t1/1", "t2/2", "t3", "t4/2", "t5/1", "t6", "t7/3", "t8"]


def _longest_suffix(turns: List[List[Dict[str, Any]]], fits: Any) -> List[List[Dict[str, Any]]]:
    """The longest run of newest turns that ``fits``; the newest turn alone if none."""
    for start in range(len(turns)):
        if fits(turns[start:]):
            return turns[start:]
    return turns[-1:]


def _check_bounded_run(fits: Any, **bounds: Any) -> int:
    """Run TURNS with ``bounds``; after every turn the stored history must be
    the longest whole-turn suffix of the unbounded history that ``fits``.
    Returns how many turns were dropped in total."""
    full = _process(turn_agent(conversation_max_messages=1000), [("k", t) for t in TURNS])
    all_turns = _stored(full, "k")
    assert len(all_turns) == len(TURNS)
    REQUESTS.clear()

    driver = LocalDriver()
    store = InMemoryJournalStore()
    dropped = 0
    for n, text in enumerate(TURNS, start=1):
        _process(turn_agent(**bounds), [("k", text)], store=store, driver=driver)
        stored = _stored(driver, "k")
        expected = _longest_suffix(all_turns[:n], fits)
        assert stored == expected, f"after turn {n}"
        dropped = n - len(stored)
        history = [m for t in stored for m in t]
        assert history[0]["role"] == "user"
        assert pairing_problems(history) == []
        assert _strict_problems(history, _runtime_tool_id) == []
        # What the model saw in this turn's first call: the history kept by
        # the turn before, then this turn's message.
        if n > 1:
            previous = _longest_suffix(all_turns[: n - 1], fits)
            assert _request_for(text)[1:-1] == [m for t in previous for m in t]
    return dropped


def test_the_message_bound_drops_whole_oldest_turns():
    dropped = _check_bounded_run(lambda turns: sum(len(t) for t in turns) <= 9, conversation_max_messages=9)
    assert dropped >= 5  # the bound did bite


@pytest.mark.parametrize("max_tokens", [70, 20])
def test_the_token_bound_drops_whole_oldest_turns(max_tokens: int):
    # 20 tokens is below every turn: only the newest turn stays, whole.
    dropped = _check_bounded_run(
        lambda turns: sum(turn_tokens(t) for t in turns) <= max_tokens,
        conversation_max_tokens=max_tokens,
    )
    assert dropped == len(TURNS) - 1 if max_tokens == 20 else dropped >= 5


def _msg(role: str, content: str = "", calls: Sequence[str] = (), answers: str | None = None) -> Dict[str, Any]:
    message: Dict[str, Any] = {"role": role, "content": content, "tool_calls": [], "extra_args": {}}
    if calls:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "f", "arguments": {}}} for c in calls
        ]
    if answers is not None:
        message["extra_args"] = {"tool_call_id": answers}
    return message


def _turn(name: str, calls: int = 0) -> List[Dict[str, Any]]:
    turn = [_msg("user", name)]
    if calls:
        ids = [f"{name}-{i}" for i in range(calls)]
        turn.append(_msg("assistant", calls=ids))
        turn.extend(_msg("tool", "r", answers=i) for i in ids)
    turn.append(_msg("assistant", f"answer {name}"))
    return turn


def test_compact_keeps_the_newest_whole_turns_within_the_message_bound():
    turns = [_turn("a"), _turn("b", 2), _turn("c", 3), _turn("d")]  # 2, 5, 6, 2 messages
    assert compact(turns, 8) == turns[2:]
    assert compact(turns, 7) == turns[3:]  # 6 + 2 > 7: the call of "c" stays with its results or goes whole
    assert compact(turns, 15) == turns
    assert compact(turns, 14) == turns[1:]
    assert compact([], 2) == []


def test_compact_the_example_of_the_docs():
    """docs/conversations.md, "Bounds and compaction": max 9 messages."""
    sizes = {"t1": 1, "t2": 2, "t3": 0, "t4": 2, "t5": 6, "t6": 8}  # tool calls per turn
    expected = [["t1"], ["t1", "t2"], ["t2", "t3"], ["t3", "t4"], ["t5"], ["t6"]]
    stored: List[List[Dict[str, Any]]] = []
    for (name, calls), names in zip(sizes.items(), expected):
        stored = compact(stored + [_turn(name, calls)], 9)
        assert [t[0]["content"] for t in stored] == names, name
    assert len(stored[0]) == 11


def test_compact_keeps_a_single_oversized_turn_whole():
    big = _turn("big", 6)  # 9 messages
    assert compact([_turn("a"), big], 4) == [big]
    assert compact([big], 2) == [big]
    assert compact([_turn("a"), big], 40, max_tokens=1) == [big]


def test_compact_applies_both_bounds():
    turns = [_turn("a" * 40), _turn("b"), _turn("c")]
    tokens = [turn_tokens(t) for t in turns]
    assert compact(turns, 100, max_tokens=sum(tokens)) == turns
    assert compact(turns, 100, max_tokens=sum(tokens) - 1) == turns[1:]
    assert compact(turns, 4, max_tokens=sum(tokens)) == turns[1:]
    assert compact(turns, 2, max_tokens=sum(tokens)) == turns[2:]


def test_compact_never_splits_a_call_from_its_result():
    turns = [_turn(f"t{i}", i % 4) for i in range(12)]
    for bound in range(2, 40):
        kept = compact(turns, bound)
        history = [m for t in kept for m in t]
        assert pairing_problems(history) == [], bound
        assert history[0]["role"] == "user"
        assert kept == turns[len(turns) - len(kept):]  # a suffix of whole turns
        assert len(history) <= bound or len(kept) == 1


def test_estimate_tokens():
    assert estimate_tokens(_msg("user", "")) == 4
    assert estimate_tokens(_msg("user", "abcdefgh")) == 2 + 4
    assert estimate_tokens(_msg("user", "abcdefghi")) == 3 + 4  # ceil
    # Name "lookup" (6) and arguments '{"q":"x"}' (9): ceil(15 / 4) + 4.
    call = _msg("assistant", calls=["id"])
    call["tool_calls"][0]["function"] = {"name": "lookup", "arguments": {"q": "x"}}
    assert estimate_tokens(call) == 4 + 4
    assert turn_tokens([_msg("user", "abcd"), _msg("assistant", "abcd")]) == 10


def test_bounds_are_validated():
    validate_bounds(2, None)
    validate_bounds(40, 1)
    with pytest.raises(ValueError, match="conversation_max_messages must be an integer of at least 2"):
        validate_bounds(1, None)
    with pytest.raises(ValueError, match="conversation_max_tokens"):
        validate_bounds(10, 0)
    with pytest.raises(ValueError, match="at least 2"):
        compact([_turn("a")], 1)
    with pytest.raises(ValidationError, match="conversation_max_messages must be at least 2"):
        TurnSetup(connection="conn", conversation_max_messages=1)
    with pytest.raises(ValidationError, match="conversation_max_tokens must be at least 1"):
        TurnSetup(connection="conn", conversation="per_key", conversation_max_tokens=0)
    with pytest.raises(ValidationError, match="per_key"):
        TurnSetup(connection="conn", conversation="forever")
    setup = TurnSetup(connection="conn")
    assert (setup.conversation, setup.conversation_max_messages, setup.conversation_max_tokens) == ("none", 40, None)


def test_pairing_problems_and_paths():
    assert pairing_problems(_turn("a", 2)) == []
    orphan = [_msg("tool", "r", answers="x"), _msg("user", "q")]
    assert pairing_problems(orphan) == ["message 0: tool result for 'x' answers no earlier call"]
    assert pairing_problems([_msg("assistant", calls=["c"])]) == ["tool call 'c' has no result"]
    twice = _turn("a", 1)
    twice.insert(3, _msg("tool", "r", answers="a-0"))
    assert pairing_problems(twice) == ["message 3: call 'a-0' gets a second result"]
    assert pairing_problems(_turn("a", 1) + _turn("a", 1))[0] == "message 5: tool call id 'a-0' is used again"
    assert conversation_path("chat") == "_flink_agents.conversations.chat"
    assert conversation_path("my.chat%") == "_flink_agents.conversations.my%2Echat%25"


# -- provider ids reused across turns, against a strict OpenAI-compatible server -------------


class LookupAgent(Agent):
    def __init__(self, base_url: str) -> None:
        super().__init__()
        self.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION,
            base_url=base_url, max_retries=0, timeout_s=10.0,
        ))
        self.add_resource("chat", ResourceType.CHAT_MODEL, ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
            connection="openai", model="gpt-test", tools=["lookup"], conversation="per_key",
        ))
        self.add_resource("lookup", ResourceType.TOOL, lookup)
        self.add_action("on_input", [InputEvent], on_input)
        self.add_action("on_response", [ChatResponseEvent], on_response)


def test_reused_provider_ids_across_turns_pair_every_call_with_its_own_result(scripted_chat_server):
    server = scripted_chat_server
    rejected: List[str] = []

    def reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
        messages = request["messages"]
        problems = _strict_problems(messages, lambda m: m.get("tool_call_id"))
        if problems:
            rejected.append(f"request #{index}: {problems}")
            raise ValueError(f"invalid tool call history: {problems}")
        last = messages[-1]
        if last["role"] == "tool":
            return {"role": "assistant", "content": f"answer: {last['content']}"}
        # Every turn: a call with the id "call_0", as providers do.
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_0", "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"q": last["content"]})},
        }]}

    server.set_reply_fn(reply)
    texts = [f"r{n}" for n in range(5)]
    driver = _process(LookupAgent(server.base_url), [("k", t) for t in texts])

    assert rejected == []
    assert [o["k"]["answer"] for o in driver.outputs] == [f"answer: found {t}" for t in texts]
    assert CALLS["tool"] == 5 and len(server.requests) == 10
    # The last request carries all five turns: five distinct runtime ids, each
    # answered once, by its own turn's result.
    final = server.requests[-1]["messages"]
    calls = [c for m in final if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    results = {m["tool_call_id"]: m["content"] for m in final if m["role"] == "tool"}
    assert len({c["id"] for c in calls}) == 5 and "call_0" not in results
    assert [results[c["id"]] for c in calls] == [f"found {json.loads(c['function']['arguments'])['q']}" for c in calls]
    assert [json.loads(c["function"]["arguments"])["q"] for c in calls] == texts
    stored = _stored(driver, "k")
    assert [t[1]["tool_calls"][0]["original_id"] for t in stored] == ["call_0"] * 5


# -- replay after a crash ------------------------------------------------------------------------

RECORDS = [("k", "t1/2"), ("k", "t2/2"), ("k", "t3/1")]


def test_a_crash_in_turn_two_replays_to_the_same_conversation_without_repeating_calls():
    # Reference: no crash. Count what turn 2 writes and calls.
    store = InMemoryJournalStore()
    driver = _process(turn_agent(), RECORDS[:1], store=store)
    writes_before, calls_before = store.writes, Counter(CALLS)
    _process(turn_agent(), RECORDS[1:2], store=store, driver=driver)
    turn_two_writes = store.writes - writes_before
    turn_two_calls = Counter(CALLS) - calls_before
    assert turn_two_calls == Counter({"model": 2, "tool": 2})
    _process(turn_agent(), RECORDS[2:], store=store, driver=driver)
    expected_outputs, expected_turns = driver.outputs, _stored(driver, "k")
    assert turn_two_writes >= 3

    for k in range(1, turn_two_writes + 1):
        CALLS.clear()
        store = InMemoryJournalStore()
        driver = _process(turn_agent(), RECORDS[:1], store=store)
        checkpoint = driver.states["k"].to_json()  # taken after turn 1
        crash_at = store.writes + k

        crashed_write: list = []

        def crash(entries, crash_at=crash_at, store=store):
            if store.writes == crash_at:
                crashed_write.extend(entries)
                raise Crash(f"crash at write {crash_at}")

        before_crash = Counter(CALLS)
        store.after_append = crash
        with pytest.raises(Crash):
            _process(turn_agent(), RECORDS[1:2], store=store, driver=driver)
        store.after_append = None

        # Recover from the checkpoint: keyed state as after turn 1.
        restored = LocalDriver()
        restored.states["k"] = KeyState.from_json(checkpoint)
        restored.outputs = list(driver.outputs[:1])
        _process(turn_agent(), RECORDS[1:], store=store, driver=restored)
        assert restored.outputs == expected_outputs, f"crash at write {k} of turn 2"
        assert _stored(restored, "k") == expected_turns, f"crash at write {k} of turn 2"
        # Each call of turn 2 ran once in total, the crashed attempt's
        # included, except one in flight at the crash: when write 3 holds
        # one tool result of the round of two (they landed apart, not within
        # the journal's group-commit delay), its sibling was still running.
        turn_two_and_three = Counter(CALLS) - before_crash
        tool_results = [e for e in crashed_write if e.function_id.startswith("tool:")]
        in_flight = Counter({"tool": 1}) if k == 3 and len(tool_results) == 1 else Counter()
        assert turn_two_and_three == turn_two_calls + Counter({"model": 2, "tool": 1}) + in_flight, (
            f"crash at write {k}")


def test_a_bad_conversation_bound_fails_at_compile_time_naming_setup_and_field() -> None:
    """Not when the first record runs: a Flink job would be submitted first."""
    from flink_agents.plan.compiler import PlanError
    from tests.support.chat_turn import ChatSetup, ChatTurnAgent
    from tests.engine.test_progress import ThreeToolsModel

    agent = ChatTurnAgent(ThreeToolsModel)
    agent._resources[ResourceType.CHAT_MODEL]["model"] = ResourceDescriptor(
        clazz=ChatSetup, connection="conn", conversation="per_key", conversation_max_messages=1,
    )
    with pytest.raises(PlanError, match=r"'model'.*at least 2.*conversation_max_messages=1"):
        AgentPlan.from_agent(agent)
