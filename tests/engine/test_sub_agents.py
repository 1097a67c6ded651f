"""Sub-agents: an Agent registered as an AGENT resource runs as an isolated,
durable, nested child of the calling action."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.plan.errors import PlanError
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs

MODEL_CALLS: Counter = Counter()
# Model calls inside ``achat`` now, and the most at once (reset per test).
IN_FLIGHT = {"now": 0, "max": 0}
HOLD_TIMEOUT_S = 10.0


class SlowEcho(BaseChatModelConnection):
    """Answers after ``delay_s`` with the last message's text, upper-cased.

    With ``hold_until_in_flight`` = n, each call first waits until n calls
    were inside ``achat`` at once (or ``HOLD_TIMEOUT_S`` passed): calls that
    overlap finish at once; calls run one after another never reach n, and
    ``IN_FLIGHT["max"]`` tells."""

    delay_s: float = 0.0
    hold_until_in_flight: int = 0

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        raise NotImplementedError("async only")

    async def achat(self, messages, tools=None, **kwargs) -> ChatMessage:
        MODEL_CALLS[messages[-1].content] += 1
        IN_FLIGHT["now"] += 1
        IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
        try:
            deadline = time.monotonic() + HOLD_TIMEOUT_S
            while IN_FLIGHT["max"] < self.hold_until_in_flight and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            await asyncio.sleep(self.delay_s)
        finally:
            IN_FLIGHT["now"] -= 1
        return ChatMessage(role=MessageRole.ASSISTANT, content=messages[-1].content.upper())


class EchoSetup(BaseChatModelSetup):
    pass


def _with_model(agent: Agent, delay_s: float = 0.0, hold_until_in_flight: int = 0) -> Agent:
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=SlowEcho, delay_s=delay_s, hold_until_in_flight=hold_until_in_flight))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=EchoSetup, connection="conn"))
    return agent


def ask_model(event: InputEvent, ctx: Any) -> None:
    count = (ctx.short_term_memory.get("calls") or 0) + 1
    ctx.short_term_memory.set("calls", count)
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(content=str(event.input))]))


def answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.response.content))
    ctx.send_event(OutputEvent(output={"calls": ctx.short_term_memory.get("calls")}))


def summarizer(delay_s: float = 0.0, hold_until_in_flight: int = 0) -> Agent:
    """The child: asks the model, outputs the answer and its call count."""
    agent = Agent()
    agent.add_action("ask_model", [InputEvent], ask_model)
    agent.add_action("answer", [ChatResponseEvent], answer)
    return _with_model(agent, delay_s, hold_until_in_flight)


def failing_child() -> Agent:
    def explode(event: InputEvent, ctx: Any) -> None:
        raise ValueError(f"cannot handle {event.input}")

    return Agent().add_action("explode", [InputEvent], explode)


def parent_calling(child: Agent, body: Any, name: str = "summarizer") -> Agent:
    agent = Agent().add_action("call_child", [InputEvent], body)
    agent.add_resource(name, ResourceType.AGENT, child)
    return agent


def _run(agent: Agent, values: List[Any], store: InMemoryJournalStore | None = None, key: str = "k") -> List[Any]:
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store or InMemoryJournalStore())
    driver = LocalDriver()

    async def feed() -> None:
        for value in values:
            await host_runs.process_async(engine, driver, key, value)

    try:
        asyncio.run(feed())
    finally:
        engine.close()
    return [o[key] for o in driver.outputs]


@pytest.fixture(autouse=True)
def _reset():
    MODEL_CALLS.clear()
    IN_FLIGHT.update(now=0, max=0)


# -- compile ------------------------------------------------------------------

class Translator(Agent):
    pass


def test_child_plans_compile_into_the_parent_once_and_round_trip():
    child = summarizer()
    grandchild = summarizer()
    child.add_resource("helper", ResourceType.AGENT, grandchild)
    parent = Agent().add_action("call_child", [InputEvent], ask_model)
    parent.add_resource("a", ResourceType.AGENT, child)
    parent.add_resource("b", ResourceType.AGENT, child)  # shared: compiled once
    plan = AgentPlan.from_agent(parent)
    assert sorted(plan.children) == ["Agent", "Agent#2"]
    specs = plan.resources[ResourceType.AGENT]
    assert specs["a"].child == specs["b"].child
    nested = plan.children[specs["a"].child].resources[ResourceType.AGENT]["helper"].child
    assert nested in plan.children and nested != specs["a"].child
    assert AgentPlan.from_json(plan.to_json()).to_json() == plan.to_json()


class Alpha(Agent):
    pass


class Beta(Agent):
    pass


def test_cycles_and_self_references_are_rejected_with_their_path():
    alpha = Alpha()
    beta = Beta()
    alpha.add_action("a", [InputEvent], ask_model).add_resource("beta", ResourceType.AGENT, beta)
    beta.add_action("b", [InputEvent], ask_model).add_resource("alpha", ResourceType.AGENT, alpha)
    with pytest.raises(PlanError, match="cycle: Alpha -> Beta -> Alpha"):
        AgentPlan.from_agent(alpha)
    selfish = Alpha().add_action("a", [InputEvent], ask_model)
    selfish.add_resource("me", ResourceType.AGENT, selfish)
    with pytest.raises(PlanError, match="cycle: Alpha -> Alpha"):
        AgentPlan.from_agent(selfish)


# -- runtime --------------------------------------------------------------------

async def call_once(event: InputEvent, ctx: Any) -> None:
    handle = ctx.get_resource("summarizer", ResourceType.AGENT)
    result = await handle.submit(ctx, event.input)
    ctx.send_event(OutputEvent(output=result.model_dump()))


def test_the_caller_receives_the_childs_outputs_in_order():
    [result] = _run(parent_calling(summarizer(), call_once), ["hello"])
    assert result["success"] is True and result["error_message"] is None
    assert result["result"] == ["HELLO", {"calls": 1}]


def test_a_failing_child_gives_a_failed_result_and_the_parent_goes_on():
    outputs = _run(parent_calling(failing_child(), call_once), ["one", "two"])
    assert [o["success"] for o in outputs] == [False, False]
    assert outputs[0]["error_message"] == "ValueError: cannot handle one"


def test_a_nested_call_reaches_the_grandchild():
    async def relay(event: InputEvent, ctx: Any) -> None:
        inner = await ctx.get_resource("inner", ResourceType.AGENT).submit(ctx, f"via child: {event.input}")
        ctx.send_event(OutputEvent(output={"inner": inner.result, "inner_call": inner.call_id}))

    child = Agent().add_action("relay", [InputEvent], relay)
    child.add_resource("inner", ResourceType.AGENT, summarizer())
    [result] = _run(parent_calling(child, call_once), ["x"])
    [relayed] = result["result"]
    assert relayed["inner"] == ["VIA CHILD: X", {"calls": 1}]
    assert relayed["inner_call"] != result["call_id"]


async def call_twice(event: InputEvent, ctx: Any) -> None:
    handle = ctx.get_resource("summarizer", ResourceType.AGENT)
    first = await handle.submit(ctx, "first")
    second = await handle.submit(ctx, "second")
    ctx.send_event(OutputEvent(output=[first.model_dump(), second.model_dump()]))


def test_calls_get_distinct_deterministic_ids_and_isolated_memory():
    [first_run] = _run(parent_calling(summarizer(), call_twice), ["x"])
    [second_run] = _run(parent_calling(summarizer(), call_twice), ["x"])
    ids = [(r["call_id"], r["session_id"]) for r in first_run]
    assert ids == [(r["call_id"], r["session_id"]) for r in second_run]
    assert ids[0] != ids[1]
    # Fresh sessions: each call's child memory starts empty.
    assert [r["result"][1] for r in first_run] == [{"calls": 1}, {"calls": 1}]


def test_an_explicit_session_carries_the_childs_memory_across_calls_and_records():
    async def in_session(event: InputEvent, ctx: Any) -> None:
        handle = ctx.get_resource("summarizer", ResourceType.AGENT)
        result = await handle.submit(ctx, event.input, session_id="conversation-1")
        ctx.send_event(OutputEvent(output=result.result[1]))

    assert _run(parent_calling(summarizer(), in_session), ["a", "b", "c"]) == [
        {"calls": 1}, {"calls": 2}, {"calls": 3},
    ]


def test_parent_and_child_memories_do_not_leak():
    async def parent_writes(event: InputEvent, ctx: Any) -> None:
        ctx.short_term_memory.set("calls", 100)
        ctx.sensory_memory.set("secret", "parent")
        result = await ctx.get_resource("summarizer", ResourceType.AGENT).submit(ctx, "x")
        ctx.send_event(OutputEvent(output={
            "child_saw": result.result[1],
            "parent_calls": ctx.short_term_memory.get("calls"),
            "parent_fields": ctx.short_term_memory.get_field_names(),
        }))

    [out] = _run(parent_calling(summarizer(), parent_writes), ["x"])
    assert out == {"child_saw": {"calls": 1}, "parent_calls": 100, "parent_fields": ["calls"]}


def test_gathered_children_run_concurrently():
    async def fan_out(event: InputEvent, ctx: Any) -> None:
        handle = ctx.get_resource("summarizer", ResourceType.AGENT)
        results = await asyncio.gather(*(handle.submit(ctx, f"part {i}") for i in range(3)))
        ctx.send_event(OutputEvent(output=[r.result[0] for r in results]))

    # Each child's model call is held until all three are in flight: run one
    # after another, they would never be (the timing: tools/bench/overlap.py).
    [out] = _run(parent_calling(summarizer(hold_until_in_flight=3), fan_out), ["x"])
    assert out == ["PART 0", "PART 1", "PART 2"]
    assert IN_FLIGHT == {"now": 0, "max": 3}, "the gathered children's model calls did not overlap"


class Crash(BaseException):
    pass


def test_after_a_crash_the_childrens_model_calls_are_not_repeated():
    async def two_children(event: InputEvent, ctx: Any) -> None:
        handle = ctx.get_resource("summarizer", ResourceType.AGENT)
        first = await handle.submit(ctx, "first")
        second = await handle.submit(ctx, "second")
        ctx.send_event(OutputEvent(output=[first.result[0], second.result[0]]))

    store = InMemoryJournalStore()

    def crash_at_parent_end(entries):
        # The parent's last write: its step's completion with its run end.
        if any(e.step == "_run" for e in entries) and any(e.step.startswith("call_child") for e in entries):
            raise Crash("crash before the parent's last write")

    store.before_append = crash_at_parent_end
    agent = parent_calling(summarizer(), two_children)
    with pytest.raises(Crash):
        _run(agent, ["x"], store)
    assert MODEL_CALLS == Counter({"first": 1, "second": 1})
    store.before_append = None
    assert _run(parent_calling(summarizer(), two_children), ["x"], store) == [["FIRST", "SECOND"]]
    assert MODEL_CALLS == Counter({"first": 1, "second": 1}), "a child's model call ran again"


def test_a_sync_action_calling_a_child_gets_a_clear_error():
    def sync_call(event: InputEvent, ctx: Any) -> None:
        ctx.get_resource("summarizer", ResourceType.AGENT).submit(ctx, "x")

    with pytest.raises(ActionFailed) as failed:
        _run(parent_calling(summarizer(), sync_call), ["x"])
    assert isinstance(failed.value.cause, RuntimeError)
    assert "is not async: a sub-agent call must be awaited" in str(failed.value.cause)
    assert MODEL_CALLS == Counter(), "the child ran"


def test_sub_agents_through_the_local_runner():
    env = AgentsExecutionEnvironment.get_execution_environment()
    outputs = env.from_list([{"key": "a", "value": "hi"}]).apply(parent_calling(summarizer(), call_once)).to_list()
    env.execute()
    assert outputs[0]["a"]["result"] == ["HI", {"calls": 1}]
