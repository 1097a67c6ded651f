"""Engine contract: dispatch, per-key order, memory scoping, failures, the
built-in chat/tool loop, context services, ids and keyed state.

Runs through the local runner (``from_list(...).apply(agent).to_list()``) and,
where a test needs to see keyed state or interleave records, through
``AgentEngine`` with a driver. Engine tests that touch keyed state run on two
drivers: the local one (state kept as objects) and one that serializes state
on every store, as the Flink driver does.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any, Callable, Dict, List, Sequence

import pytest
from pydantic import BaseModel

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.decorators import action
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.events.tool_event import ToolResponseEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.plan import AgentPlan
from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed, StateSchemaError
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.execution.memory import OBJECT
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from tests.support import host_runs

# --- helpers -----------------------------------------------------------------


class StepEvent(Event):
    text: str = ""


class OrphanEvent(Event):
    """Nobody listens to it."""


class Review(BaseModel):
    text: str
    stars: int = 0


class JsonDriver(KeyedDriver):
    """Serializes state on every store, so ``load`` returns a fresh copy (as a
    Flink driver does); the engine must not rely on object identity."""

    def __init__(self) -> None:
        self.texts: Dict[Any, str] = {}
        self.outputs: List[Dict[Any, Any]] = []

    @property
    def states(self) -> Dict[Any, KeyState]:
        return {k: KeyState.from_json(t) for k, t in self.texts.items()}

    def load(self, key: Any) -> KeyState | None:
        text = self.texts.get(key)
        return None if text is None else KeyState.from_json(text)

    def store(self, key: Any, state: KeyState) -> None:
        self.texts[key] = state.to_json()

    def emit(self, key: Any, output: Any) -> None:
        self.outputs.append({key: output})

    def emit_error(self, key: Any, error: Dict[str, Any]) -> None:
        self.outputs.append({key: ("error", error)})


@pytest.fixture(params=["local", "json"])
def driver(request) -> KeyedDriver:
    return LocalDriver() if request.param == "local" else JsonDriver()


def run_local(agent: Agent, records: List[Dict[str, Any]], **config: Any):
    """Run ``agent`` on the local runner; return (outputs, counters)."""
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update(config)
    outputs = env.from_list(records).apply(agent).to_list()
    counters = env.execute()
    return outputs, counters[0]


def by_key(outputs: List[Dict[Any, Any]]) -> Dict[Any, List[Any]]:
    grouped: Dict[Any, List[Any]] = {}
    for item in outputs:
        ((key, value),) = item.items()
        grouped.setdefault(key, []).append(value)
    return grouped


def emit_input(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.input))


# --- dispatch ----------------------------------------------------------------


def test_actions_run_for_event_classes_and_type_strings_along_a_custom_event_chain():
    def on_input(event, ctx):
        ctx.send_event(StepEvent(text=event.input.upper()))

    def on_step(event, ctx):
        assert isinstance(event, StepEvent)
        ctx.send_event(OutputEvent(output=f"{event.text}!"))

    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input)
    agent.add_action("on_step", [StepEvent.EVENT_TYPE], on_step)

    outputs, _ = run_local(agent, [{"key": "k", "value": "hi"}, {"k": "j", "v": "yo"}])

    assert by_key(outputs) == {"k": ["HI!"], "j": ["YO!"]}


def test_two_actions_on_one_event_both_run_in_plan_order():
    log: List[str] = []

    def make(name: str):
        def act(event, ctx):
            log.append(f"{name}:{event.input}")

        return act

    agent = Agent()
    agent.add_action("zeta", [InputEvent], make("zeta"))
    agent.add_action("alpha", [InputEvent], make("alpha"))

    run_local(agent, [{"key": "k", "value": 1}, {"key": "k", "value": 2}])

    assert log == ["zeta:1", "alpha:1", "zeta:2", "alpha:2"]


def test_an_event_nobody_listens_to_is_counted_as_unhandled():
    def on_input(event, ctx):
        ctx.send_event(OrphanEvent())
        ctx.send_event(OutputEvent(output=event.input))

    agent = Agent().add_action("on_input", [InputEvent], on_input)

    outputs, counters = run_local(agent, [{"key": "a", "value": 1}, {"key": "b", "value": 2}])

    assert sorted(map(str, outputs)) == ["{'a': 1}", "{'b': 2}"]
    assert counters["unhandled_events"] == 2
    assert counters["records"] == 2
    assert counters["outputs"] == 2
    assert counters["actions"] == 2


# --- per-key order and queueing ----------------------------------------------


def _in_flight_trace(log: List[tuple]) -> List[set]:
    """The set of (key, n) running after each log entry."""
    running: set = set()
    trace = []
    for kind, key, n in log:
        (running.add if kind == "start" else running.remove)((key, n))
        trace.append(set(running))
    return trace


def test_records_of_a_key_run_one_at_a_time_in_order_while_keys_overlap():
    log: List[tuple] = []

    async def work(event, ctx):
        log.append(("start", ctx.key, event.input["n"]))
        await asyncio.sleep(event.input["delay_s"])
        log.append(("end", ctx.key, event.input["n"]))
        ctx.send_event(OutputEvent(output=event.input["n"]))

    agent = Agent().add_action("work", [InputEvent], work)
    delays = {"a": [0.03, 0.0, 0.01], "b": [0.0, 0.02, 0.0]}
    records = [
        {"key": key, "value": {"n": n, "delay_s": delays[key][n]}}
        for n in range(3)
        for key in ("a", "b")
    ]

    outputs, _ = run_local(agent, records)

    assert by_key(outputs) == {"a": [0, 1, 2], "b": [0, 1, 2]}
    for key in ("a", "b"):
        own = [(kind, n) for kind, k, n in log if k == key]
        assert own == [("start", 0), ("end", 0), ("start", 1), ("end", 1), ("start", 2), ("end", 2)]
    trace = _in_flight_trace(log)
    for running in trace:
        keys = [k for k, _ in running]
        assert len(keys) == len(set(keys)), f"two records of one key overlapped: {running}"
    assert any({k for k, _ in running} == {"a", "b"} for running in trace), "keys never overlapped"


def test_a_record_arriving_while_its_key_is_busy_waits_for_the_running_one(driver):
    log: List[tuple] = []

    async def work(event, ctx):
        assert isinstance(event.input, Review)  # a queued input comes back as the user's model
        log.append(("start", event.input.text))
        await asyncio.sleep(0.01)
        log.append(("end", event.input.text))
        ctx.send_event(OutputEvent(output=event.input.text))

    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("work", [InputEvent], work)))

    async def main():
        await asyncio.gather(
            host_runs.process_async(engine, driver, "k", Review(text="first")),
            host_runs.process_async(engine, driver, "k", Review(text="second")),
        )

    asyncio.run(main())

    assert log == [("start", "first"), ("end", "first"), ("start", "second"), ("end", "second")]
    assert driver.outputs == [{"k": "first"}, {"k": "second"}]
    state = driver.states["k"]
    assert (state.next_seq, state.pending, state.runs_finished) == (2, [], 2)


def test_a_queued_record_sits_in_keyed_state_until_the_key_is_free(driver):
    log: List[str] = []
    gates: Dict[str, asyncio.Event] = {}

    async def work(event, ctx):
        log.append(f"start {event.input}")
        gates["started"].set()
        await gates["release"].wait()
        log.append(f"end {event.input}")

    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("work", [InputEvent], work)))

    async def main():
        gates.update(started=asyncio.Event(), release=asyncio.Event())
        first = asyncio.ensure_future(host_runs.process_async(engine, driver, "k", "r0"))
        await gates["started"].wait()
        second = asyncio.ensure_future(host_runs.process_async(engine, driver, "k", "r1"))
        await asyncio.sleep(0.05)  # the key is busy: r1 waits

        assert log == ["start r0"] and not second.done()
        assert [(p.seq, p.value) for p in driver.states["k"].pending] == [(0, "r0"), (1, "r1")]
        gates["release"].set()
        await first
        await second

    asyncio.run(main())

    assert log == ["start r0", "end r0", "start r1", "end r1"]
    assert driver.states["k"].pending == []


# --- memory scoping ----------------------------------------------------------


def test_short_term_memory_persists_per_key_and_is_isolated_between_keys():
    def count(event, ctx):
        seen = ctx.short_term_memory.get("count") or 0
        ctx.short_term_memory.set("count", seen + 1)
        ctx.short_term_memory.set("history", (ctx.short_term_memory.get("history") or []) + [event.input])
        ctx.send_event(OutputEvent(output=(seen + 1, ctx.short_term_memory.get("history"))))

    agent = Agent().add_action("count", [InputEvent], count)
    records = [{"key": k, "value": v} for k, v in [("a", "x"), ("a", "y"), ("b", "z"), ("a", "w")]]

    outputs, _ = run_local(agent, records)

    assert by_key(outputs) == {
        "a": [(1, ["x"]), (2, ["x", "y"]), (3, ["x", "y", "w"])],
        "b": [(1, ["z"])],
    }


def test_sensory_memory_is_shared_within_a_run_and_cleared_between_records():
    def on_input(event, ctx):
        before = ctx.sensory_memory.get("seen")
        ctx.sensory_memory.set("seen", event.input)
        ctx.send_event(StepEvent(text=str(before)))

    def on_step(event, ctx):
        ctx.send_event(OutputEvent(output=(event.text, ctx.sensory_memory.get("seen"))))

    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input)
    agent.add_action("on_step", [StepEvent], on_step)

    outputs, _ = run_local(agent, [{"key": "k", "value": 1}, {"key": "k", "value": 2}])

    assert by_key(outputs) == {"k": [("None", 1), ("None", 2)]}


def _failing_agent(ran: List[str]) -> Agent:
    def first(event, ctx):
        ctx.short_term_memory.set("first", event.input)
        ctx.send_event(StepEvent(text=event.input))

    def second(event, ctx):
        ctx.short_term_memory.set("second", event.text)
        ctx.short_term_memory.set("first", "overwritten by a failed action")
        ctx.send_event(OutputEvent(output="must not be emitted"))
        ctx.send_event(OrphanEvent())
        if event.text == "explode":
            raise ValueError("boom")

    def orphan_listener(event, ctx):
        ran.append("orphan_listener")

    agent = Agent()
    agent.add_action("first", [InputEvent], first)
    agent.add_action("explode", [StepEvent], second)
    agent.add_action("orphan_listener", [OrphanEvent], orphan_listener)
    return agent


def test_a_failing_action_loses_its_memory_writes_and_its_events():
    ran: List[str] = []
    driver = LocalDriver()
    engine = AgentEngine(AgentPlan.from_agent(_failing_agent(ran)))

    with pytest.raises(ActionFailed) as failed:
        host_runs.process(engine, driver, "k", "explode")

    assert (failed.value.key, failed.value.seq, failed.value.action) == ("k", 0, "explode")
    assert isinstance(failed.value.cause, ValueError)
    memory = driver.states["k"].short_term_memory
    # A failed run is all-or-nothing: neither the failed action's writes nor
    # those of the action that finished before it in the same run remain.
    assert memory == {}
    assert driver.outputs == []
    assert ran == []


def test_execute_raises_action_failed_naming_key_record_and_action():
    ran: List[str] = []
    records = [{"key": "k", "value": "fine"}, {"key": "k", "value": "explode"}]
    env = AgentsExecutionEnvironment.get_execution_environment()
    outputs = env.from_list(records).apply(_failing_agent(ran)).to_list()

    with pytest.raises(ActionFailed, match=r"action 'explode' failed on key 'k', record #1: ValueError: boom"):
        env.execute()

    assert outputs == [{"k": "must not be emitted"}]  # from record #0 only
    assert ran == ["orphan_listener"]  # record #0 only


# --- the built-in chat model and tool actions --------------------------------


class Script:
    """Replies of a scripted model, in order (the last one repeats), and what
    the model was sent."""

    def __init__(self, replies: Sequence[ChatMessage]) -> None:
        self.replies = list(replies)
        self.received: List[List[ChatMessage]] = []
        self.tools: List[List[str]] = []
        self.kwargs: List[Dict[str, Any]] = []


_SCRIPTS: Dict[str, Script] = {}


class ScriptedConnection(BaseChatModelConnection):
    """A test-only, in-process chat model answering from ``_SCRIPTS[script]``."""

    script: str

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        script = _SCRIPTS[self.script]
        script.received.append([m.model_copy(deep=True) for m in messages])
        script.tools.append([t.name for t in tools or []])
        script.kwargs.append(dict(kwargs))
        return script.replies.pop(0) if len(script.replies) > 1 else script.replies[0]


@pytest.fixture
def script(request):
    """Factory: ``script(replies)`` registers a script and returns (name, Script)."""
    names: List[str] = []

    def make(replies: Sequence[ChatMessage]):
        name = f"{request.node.name}-{len(names)}"
        names.append(name)
        _SCRIPTS[name] = Script(replies)
        return name, _SCRIPTS[name]

    yield make
    for name in names:
        _SCRIPTS.pop(name, None)


def tool_call(call_id: str, name: str, **arguments: Any) -> ChatMessage:
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        tool_calls=[{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    )


def answer(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def _ask(event, ctx):
    text, prompt_args = event.input if isinstance(event.input, list) else (event.input, {})
    request = ChatRequestEvent(
        model="llm", messages=[ChatMessage(role=MessageRole.USER, content=text)], prompt_args=prompt_args
    )
    ctx.send_event(request)
    ctx.send_event(OutputEvent(output={"request_id": str(request.id)}))


def _on_chat_response(event, ctx):
    ctx.send_event(OutputEvent(output={"answer": event.response.content, "request_id": str(event.request_id)}))


def chat_agent(script_name: str, tools: Dict[str, Callable[..., Any]] | None = None, prompt: Prompt | None = None) -> Agent:
    agent = Agent()
    agent.add_action("ask", [InputEvent], _ask)
    agent.add_action("on_chat_response", [ChatResponseEvent], _on_chat_response)
    agent.add_resource(
        "conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=ScriptedConnection, script=script_name)
    )
    setup: Dict[str, Any] = {"connection": "conn", "model": "m1", "tools": list(tools or {})}
    if prompt is not None:
        agent.add_resource("p", ResourceType.PROMPT, prompt)
        setup["prompt"] = "p"
    agent.add_resource("llm", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=BaseChatModelSetup, **setup))
    for name, fn in (tools or {}).items():
        agent.add_resource(name, ResourceType.TOOL, fn)
    return agent


def test_tool_call_loop_runs_the_tool_and_answers_the_requesting_agent(script):
    calls: List[Dict[str, int]] = []

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        calls.append({"a": a, "b": b})
        return a + b

    name, model = script([tool_call("call_1", "add", a=2, b=3), answer("The sum is 5")])

    outputs, _ = run_local(chat_agent(name, tools={"add": add}), [{"key": "k", "value": "2+3?"}])

    assert calls == [{"a": 2, "b": 3}]
    asked, answered = by_key(outputs)["k"]
    assert answered == {"answer": "The sum is 5", "request_id": asked["request_id"]}
    assert model.tools == [["add"], ["add"]]
    assert len(model.received) == 2
    user, assistant, tool_msg = model.received[1]
    assert (user.role, user.content) == (MessageRole.USER, "2+3?")
    assert assistant.role == MessageRole.ASSISTANT
    (sent_call,) = assistant.tool_calls
    assert sent_call["function"] == {"name": "add", "arguments": {"a": 2, "b": 3}}
    assert sent_call["original_id"] == "call_1"
    assert tool_msg.role == MessageRole.TOOL
    assert tool_msg.content == "5"
    assert tool_msg.extra_args["tool_call_id"] == sent_call["id"]
    assert tool_msg.extra_args["external_id"] == "call_1"


def test_a_failing_tool_gives_the_model_an_error_text_instead_of_failing_the_run(script):
    def lookup(order_id: str) -> str:
        """Look up an order."""
        raise LookupError(f"no order {order_id}")

    def on_tool_response(event, ctx):
        ctx.send_event(OutputEvent(output={"errors": event.errors}))

    name, model = script([tool_call("c9", "lookup", order_id="o-7"), answer("Sorry, unknown order")])
    agent = chat_agent(name, tools={"lookup": lookup})
    agent.add_action("on_tool_response", [ToolResponseEvent], on_tool_response)

    outputs, _ = run_local(agent, [{"key": "k", "value": "where is o-7?"}])

    _, errors, final = by_key(outputs)["k"]
    call_id = model.received[1][1].tool_calls[0]["id"]
    assert errors == {"errors": {call_id: "LookupError: no order o-7"}}
    assert final["answer"] == "Sorry, unknown order"
    tool_msg = model.received[1][2]
    assert tool_msg.role == MessageRole.TOOL
    assert "LookupError: no order o-7" in tool_msg.content
    assert tool_msg.extra_args["tool_call_id"] == call_id


def test_tool_rounds_are_bounded_by_config(script):
    calls: List[int] = []

    def ping(n: int) -> int:
        """Ping."""
        calls.append(n)
        return n

    name, model = script([tool_call("again", "ping", n=1)])  # asks for a tool forever

    with pytest.raises(
        ActionFailed,
        match=r"'_chat_model_action' failed on key 'k', record #0: .*asked for tools in more than 2 rounds "
        r"\(chat\.max_tool_rounds\)",
    ):
        run_local(chat_agent(name, tools={"ping": ping}), [{"key": "k", "value": "go"}], **{"chat.max_tool_rounds": 2})

    assert calls == [1, 1]  # two rounds of tools ran; the third request was refused
    assert len(model.received) == 3


def test_prompt_is_filled_with_prompt_args_before_the_request(script):
    name, model = script([answer("Arr")])
    prompt = Prompt.from_text("You are a {role}. Answer in {language}. Keep {\"json\": 1} as is.")

    outputs, _ = run_local(
        chat_agent(name, prompt=prompt),
        [{"key": "k", "value": ["Hello", {"role": "pirate", "language": "French"}]}],
    )

    assert by_key(outputs)["k"][1]["answer"] == "Arr"
    (received,) = model.received
    assert [(m.role, m.content) for m in received] == [
        (MessageRole.SYSTEM, 'You are a pirate. Answer in French. Keep {"json": 1} as is.'),
        (MessageRole.USER, "Hello"),
    ]
    assert model.kwargs[0]["model"] == "m1"


def test_an_empty_tool_result_still_reaches_a_model_with_a_prompt(script):
    def clear(target: str) -> str:
        """Clear something; returns nothing to say."""
        return ""

    name, model = script([tool_call("c1", "clear", target="cache"), answer("done")])
    agent = chat_agent(name, tools={"clear": clear}, prompt=Prompt.from_text("You clear things."))

    run_local(agent, [{"key": "k", "value": "clear the cache"}])

    roles = [m.role for m in model.received[1]]
    assert roles == [MessageRole.SYSTEM, MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL]
    assert model.received[1][3].extra_args["tool_call_id"] == model.received[1][2].tool_calls[0]["id"]


# --- context services --------------------------------------------------------


def test_durable_execute_returns_results_for_sync_and_async_functions():
    def multiply(x: int, y: int) -> int:
        return x * y

    async def add_later(x: int, y: int) -> int:
        await asyncio.sleep(0)
        return x + y

    def sync_action(event, ctx):
        ctx.send_event(StepEvent(text=str(ctx.durable_execute(multiply, event.input, y=3))))

    async def async_action(event, ctx):
        from_thread = await ctx.durable_execute_async(multiply, int(event.text), 2)
        awaited = await ctx.durable_execute_async(add_later, from_thread, y=1)
        ctx.send_event(OutputEvent(output=[int(event.text), from_thread, awaited]))

    agent = Agent()
    agent.add_action("sync_action", [InputEvent], sync_action)
    agent.add_action("async_action", [StepEvent], async_action)

    outputs, _ = run_local(agent, [{"key": "k", "value": 4}])

    assert outputs == [{"k": [12, 24, 25]}]


def test_durable_execute_of_a_coroutine_function_in_a_sync_action_is_a_clear_error():
    async def fetch() -> int:
        return 1

    def sync_action(event, ctx):
        ctx.durable_execute(fetch)

    agent = Agent().add_action("sync_action", [InputEvent], sync_action)

    with pytest.raises(ActionFailed, match=r"use 'await ctx.durable_execute_async"):
        run_local(agent, [{"key": "k", "value": 1}])


class ConfiguredAgent(Agent):
    @action(InputEvent, threshold=0.5, label="decorated")
    @staticmethod
    def decorated(event: Event, ctx: Any) -> None:
        ctx.send_event(OutputEvent(output=("decorated", ctx.config.get("tenant"), ctx.action_config)))


def test_actions_read_job_config_and_their_own_action_config():
    def added(event, ctx):
        ctx.send_event(
            OutputEvent(output=("added", ctx.config["tenant"], ctx.action_config, ctx.get_action_config_value("retries")))
        )

    def plain(event, ctx):
        ctx.send_event(OutputEvent(output=("plain", ctx.action_config)))

    agent = ConfiguredAgent()
    agent.add_action("added", [InputEvent], added, retries=3)
    agent.add_action("plain", [InputEvent], plain)

    outputs, _ = run_local(agent, [{"key": "k", "value": 1}], tenant="acme")

    assert by_key(outputs)["k"] == [
        ("decorated", "acme", {"threshold": 0.5, "label": "decorated"}),
        ("added", "acme", {"retries": 3}, 3),
        ("plain", {}),
    ]


# --- deterministic ids -------------------------------------------------------


def test_two_executions_of_the_same_input_derive_the_same_event_ids():
    def run_once() -> List[tuple]:
        seen: List[tuple] = []

        def on_input(event, ctx):
            seen.append((ctx.key, "input", str(event.id)))
            ctx.send_event(StepEvent(text="a"))
            ctx.send_event(StepEvent(text="b"))

        def on_step(event, ctx):
            seen.append((ctx.key, event.text, str(event.id)))

        agent = Agent()
        agent.add_action("on_input", [InputEvent], on_input)
        agent.add_action("on_step", [StepEvent], on_step)
        run_local(agent, [{"key": k, "value": v} for k, v in [("a", 1), ("b", 1), ("a", 2)]])
        return sorted(seen)

    first, second = run_once(), run_once()

    assert first == second
    ids = [event_id for _, _, event_id in first]
    assert len(ids) == 9 and len(set(ids)) == 9  # distinct per key, record and send


# --- keyed state -------------------------------------------------------------


def test_key_state_json_round_trip_keeps_a_pending_pydantic_input():
    state = KeyState(
        next_seq=6,
        pending=[PendingRecord(4, Review(text="great", stars=5)), PendingRecord(5, {"plain": [1, "x", None]})],
        short_term_memory={"order": OBJECT, "order.total": 12.5},
        runs_finished=4,
    )

    restored = KeyState.from_json(state.to_json())

    assert restored == state
    assert isinstance(restored.pending[0].value, Review)
    assert restored.to_json() == state.to_json()


@pytest.mark.parametrize("version", [0, 3, None])
def test_key_state_of_an_unknown_schema_version_is_refused(version):
    data = json.loads(KeyState().to_json())
    data["v"] = version

    with pytest.raises(StateSchemaError, match=f"keyed state schema version {version!r} is not supported"):
        KeyState.from_json(json.dumps(data))


# --- memory: a record's run is freed when it ends ---------------------------


class _CountingAgent(Agent):
    @action(InputEvent)
    @staticmethod
    def count(event: Event, ctx: Any) -> None:
        seen = (ctx.short_term_memory.get("seen") or 0) + 1
        ctx.short_term_memory.set("seen", seen)
        ctx.send_event(OutputEvent(output=seen))


class _CallingAgent(Agent):
    @action(InputEvent)
    @staticmethod
    async def call(event: Event, ctx: Any) -> None:
        async def double(x: int) -> int:
            return 2 * x

        first = await ctx.durable_execute_async(double, event.input)
        both = await asyncio.gather(ctx.durable_execute_async(double, first), ctx.durable_execute_async(double, 1))
        ctx.send_event(OutputEvent(output=[first, *both]))


@pytest.mark.parametrize("agent", [_CountingAgent, _CallingAgent], ids=["sync_action", "async_calls"])
def test_a_records_run_is_freed_by_reference_counting_not_left_to_the_garbage_collector(agent: type) -> None:
    """No reference cycle per record: a cycle makes the run, its journal and
    its events garbage that only the collector frees, so per-record
    allocations drive collections (an action's task scope once held its
    action context, which holds the scope: ~40 objects a record)."""
    import gc

    from flink_agents.runtime.durability.journal import RunJournal
    from flink_agents.runtime.execution.context import ActionContext
    from flink_agents.runtime.execution.run import Run

    def run(count: int) -> List[Any]:
        env = AgentsExecutionEnvironment.get_execution_environment()
        outputs = env.from_list([{"key": f"k{i % 7}", "value": i} for i in range(count)]).apply(agent()).to_list()
        env.execute()
        return outputs

    run(20)  # first-use caches
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector frees stays in gc.garbage
    try:
        assert len(run(200)) == 200
        gc.collect()
        left = Counter(type(o).__name__ for o in gc.garbage
                       if isinstance(o, (Run, RunJournal, ActionContext, InputEvent, OutputEvent)))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert left == Counter(), f"per-record objects freed only by the collector after 200 records: {dict(left)}"
