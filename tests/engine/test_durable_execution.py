"""Durable execution on the engine: journaled calls, replay without repeated
calls after a crash at any journal write, commit counts, nondeterminism,
error strategies and short-term memory TTL."""

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
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed, NondeterminismError
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs

CALLS: Counter = Counter()  # what really ran, across engines and attempts


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing may catch it)."""


class ScriptedConnection(BaseChatModelConnection):
    """Asks for its tools (add and shout, in parallel) until it has seen tool
    results, then answers."""

    tool_rounds: int = 1
    tool_names: List[str] = ["add", "shout"]

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        CALLS["model"] += 1
        if self.tool_rounds and not any(m.role == MessageRole.TOOL for m in messages):
            arguments = {"add": {"a": 1, "b": 2}, "shout": {"text": "hi"}}
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments[name]}}
                for i, name in enumerate(self.tool_names)
            ])
        results = [m.content for m in messages if m.role == MessageRole.TOOL]
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"answer from {results}")


class ScriptedSetup(BaseChatModelSetup):
    pass


def add(a: int, b: int) -> int:
    """Add two numbers."""
    CALLS["tool:add"] += 1
    return a + b


def shout(text: str) -> str:
    """Shout a text."""
    time.sleep(0.05)  # lands after add: add's result is committed while shout runs
    CALLS["tool:shout"] += 1
    return text.upper()


def side_effect(text: str) -> str:
    CALLS["durable"] += 1
    return f"stored {len(text)} chars"


def on_input(event: InputEvent, ctx: Any) -> None:
    ctx.short_term_memory.set("last", event.input)
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(content=str(event.input))]))


def on_response(event: ChatResponseEvent, ctx: Any) -> None:
    receipt = ctx.durable_execute(side_effect, event.response.content)
    ctx.send_event(OutputEvent(output={"answer": event.response.content, "receipt": receipt}))


def on_response_plain(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={"answer": event.response.content}))


def scripted_agent(tool_rounds: int = 1, durable: bool = True, tools: List[str] | None = None) -> Agent:
    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input)
    agent.add_action("on_response", [ChatResponseEvent], on_response if durable else on_response_plain)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION,
                       ResourceDescriptor(clazz=ScriptedConnection, tool_rounds=tool_rounds,
                                          tool_names=tools or ["add", "shout"]))
    agent.add_resource("model", ResourceType.CHAT_MODEL,
                       ResourceDescriptor(clazz=ScriptedSetup, connection="conn", tools=["add", "shout"]))
    agent.add_resource("add", ResourceType.TOOL, add)
    agent.add_resource("shout", ResourceType.TOOL, shout)
    return agent


def _process(store: InMemoryJournalStore, agent: Agent, value: Any = "review", driver: LocalDriver | None = None):
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store)
    driver = driver or LocalDriver()
    try:
        host_runs.process(engine, driver, "key", value)
    finally:
        engine.close()  # the store was passed in: it stays open
    return engine, driver


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()
    yield
    CALLS.clear()


def test_a_run_with_one_model_call_commits_twice():
    store = InMemoryJournalStore()
    engine, driver = _process(store, scripted_agent(tool_rounds=0, durable=False))
    assert driver.outputs == [{"key": {"answer": "answer from []"}}]
    # 1: on_input's completion, before the model call starts;
    # 2: the model's reply, the remaining completions and the run end.
    assert engine.counters.journal_writes == store.writes == 2


def test_each_further_call_adds_at_most_one_commit():
    store = InMemoryJournalStore()
    engine, _ = _process(store, scripted_agent(tool_rounds=0, durable=True))
    # The durable_execute after the model call commits the reply first.
    assert engine.counters.journal_writes == 3


def test_a_run_with_one_sequential_tool_round_commits_four_times():
    store = InMemoryJournalStore()
    engine, driver = _process(store, scripted_agent(durable=False, tools=["add"]))
    assert driver.outputs[0]["key"]["answer"] == "answer from ['3']"
    # Before model call 1, before the tool, before model call 2, at the end.
    assert engine.counters.journal_writes == store.writes == 4
    assert CALLS == Counter({"model": 2, "tool:add": 1})


def test_a_parallel_tool_result_is_committed_as_it_lands_while_a_sibling_runs():
    store = InMemoryJournalStore()
    engine, driver = _process(store, scripted_agent(durable=False))
    assert driver.outputs[0]["key"]["answer"] == "answer from ['3', 'HI']"
    # The four writes of a sequential round, plus one: add's result, written
    # as it landed while shout still ran (shout's lands with nothing in flight
    # and goes with the write before model call 2).
    assert engine.counters.journal_writes == store.writes == 5
    assert CALLS == Counter({"model": 2, "tool:add": 1, "tool:shout": 1})


def test_replaying_a_journaled_run_calls_nothing_and_writes_nothing():
    store = InMemoryJournalStore()
    _, first = _process(store, scripted_agent())
    CALLS.clear()
    engine, again = _process(store, scripted_agent())  # a restore to before the record
    assert again.outputs == first.outputs
    assert again.states["key"].short_term_memory == first.states["key"].short_term_memory
    assert CALLS == Counter()
    assert engine.counters.journal_writes == 0
    assert engine.counters.steps_replayed > 0


def _no_fault_run() -> tuple[list, int, Counter]:
    store = InMemoryJournalStore()
    _, driver = _process(store, scripted_agent())
    calls = Counter(CALLS)
    CALLS.clear()
    return driver.outputs, store.writes, calls


@pytest.mark.parametrize("mode", ["after_write", "before_write"])
def test_crash_at_every_journal_write_recovers_without_repeating_journaled_calls(mode: str):
    expected_outputs, writes, expected_calls = _no_fault_run()
    assert expected_calls == Counter({"model": 2, "tool:add": 1, "tool:shout": 1, "durable": 1})
    assert writes == 6
    for k in range(1, writes + 1):
        CALLS.clear()
        store = InMemoryJournalStore()

        def crash(entries, k=k):
            if store.writes + (1 if mode == "before_write" else 0) == k:
                raise Crash(f"crash at write {k}")

        setattr(store, "after_append" if mode == "after_write" else "before_append", crash)
        with pytest.raises(Crash):
            _process(store, scripted_agent())
        setattr(store, "after_append" if mode == "after_write" else "before_append", None)

        # Recover: keyed state as of the last checkpoint (before the record).
        _, recovered = _process(store, scripted_agent())
        assert recovered.outputs == expected_outputs, f"crash {mode} {k}"
        if mode == "after_write":
            # Every call ran exactly once in total, except one in flight at
            # the crash: shout, while add's result (write 3) landed.
            in_flight = Counter({"tool:shout": 1}) if k == 3 else Counter()
            assert CALLS == expected_calls + in_flight, f"crash after write {k}"
        else:
            # The calls whose results were in the lost write ran again, once;
            # nothing journaled earlier did.
            for call, count in CALLS.items():
                assert expected_calls[call] <= count <= expected_calls[call] + 1, f"{call}: crash before write {k}"
            assert sum(CALLS.values()) - sum(expected_calls.values()) <= 2


def first_effect(text: str) -> str:
    return f"first {text}"


def second_effect(text: str) -> str:
    return f"second {text}"


def other_effect(text: str) -> str:
    return text


def _two_calls(first: Any) -> Agent:
    def on_input_two_calls(event: InputEvent, ctx: Any) -> None:
        ctx.durable_execute(first, event.input)
        ctx.send_event(OutputEvent(output=ctx.durable_execute(second_effect, event.input)))

    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input_two_calls)
    return agent


def test_a_changed_action_fails_replay_with_a_nondeterminism_error_naming_both_calls():
    store = InMemoryJournalStore()

    def crash_at_the_end(entries):
        if any(e.step == "_run" for e in entries):
            raise Crash("crash before the last write")

    store.before_append = crash_at_the_end
    with pytest.raises(Crash):  # first_effect's result is journaled, the step is not complete
        _process(store, _two_calls(first_effect))
    store.before_append = None

    with pytest.raises(ActionFailed) as failed:
        _process(store, _two_calls(other_effect))
    assert isinstance(failed.value.cause, NondeterminismError)
    message = str(failed.value)
    assert "test_durable_execution:first_effect" in message
    assert "test_durable_execution:other_effect" in message
    assert "on_input@0" in message


def failing_effect(text: str) -> str:
    CALLS["failing"] += 1
    raise ValueError(f"cannot store {text}")


def test_a_journaled_exception_is_re_raised_on_replay_without_calling_again():
    def on_input_catching(event: InputEvent, ctx: Any) -> None:
        try:
            ctx.durable_execute(failing_effect, event.input)
        except ValueError as exc:
            ctx.send_event(OutputEvent(output=f"caught: {exc}"))

    agent = Agent()
    agent.add_action("on_input", [InputEvent], on_input_catching)
    store = InMemoryJournalStore()
    _, first = _process(store, agent)
    _, again = _process(store, agent)
    assert first.outputs == again.outputs == [{"key": "caught: cannot store review"}]
    assert CALLS["failing"] == 1


def _flaky_agent(failures: int, strategy: str, **options: Any) -> Agent:
    attempts = Counter()

    def flaky(event: InputEvent, ctx: Any) -> None:
        ctx.short_term_memory.set("seen", (ctx.short_term_memory.get("seen") or 0) + 1)
        attempts[event.input] += 1
        if event.input == "bad" and attempts[event.input] <= failures:
            raise RuntimeError(f"attempt {attempts[event.input]} failed")
        ctx.send_event(OutputEvent(output={"input": event.input, "attempt": attempts[event.input]}))

    agent = Agent()
    agent.add_action("flaky", [InputEvent], flaky, error_strategy=strategy,
                     **{"error_retry.initial_backoff_s": 0.001, **options})
    return agent


def _run_local(agent: Agent, values: List[str]):
    env = AgentsExecutionEnvironment.get_execution_environment()
    builder = env.from_list([{"key": "k", "value": v} for v in values]).apply(agent)
    outputs, errors = builder.to_list(), builder.to_error_list()
    counters = env.execute()[0]
    return [o["k"] for o in outputs], errors, counters


def test_retry_runs_a_failing_action_again_with_backoff():
    outputs, errors, counters = _run_local(
        _flaky_agent(2, "retry", **{"error_retry.max_attempts": 3}), ["ok", "bad", "ok2"])
    assert outputs == [{"input": "ok", "attempt": 1}, {"input": "bad", "attempt": 3}, {"input": "ok2", "attempt": 1}]
    assert counters["action_retries"] == 2 and errors == []


def test_retry_gives_up_after_max_attempts_and_fails():
    with pytest.raises(ActionFailed, match="attempt 2 failed"):
        _run_local(_flaky_agent(5, "retry", **{"error_retry.max_attempts": 2}), ["bad"])


def test_skip_drops_the_record_and_emits_an_error_record():
    outputs, errors, counters = _run_local(_flaky_agent(99, "skip"), ["ok", "bad", "ok2"])
    assert outputs == [{"input": "ok", "attempt": 1}, {"input": "ok2", "attempt": 1}]
    assert errors == [{
        "key": "k", "seq": 1, "record": "bad", "action": "flaky",
        "error_type": "RuntimeError", "error_message": "attempt 1 failed", "attempts": 1,
    }]
    assert counters["records_skipped"] == 1


def test_skipped_record_leaves_short_term_memory_as_before_it():
    agent = _flaky_agent(99, "skip")
    plan = AgentPlan.from_agent(agent)
    engine = AgentEngine(plan, {}, store=InMemoryJournalStore())
    driver = LocalDriver()
    for value in ["ok", "bad", "ok2"]:
        host_runs.process(engine, driver, "k", value)
    assert driver.states["k"].short_term_memory == {"seen": 2}


def test_fail_is_the_default_strategy():
    with pytest.raises(ActionFailed, match="action 'flaky' failed on key 'k', record #0"):
        _run_local(_flaky_agent(1, "fail"), ["bad"])


def test_short_term_memory_expires_after_its_ttl():
    now = [1000.0]
    agent = Agent()

    def count(e: InputEvent, ctx: Any) -> None:
        ctx.short_term_memory.set("n", (ctx.short_term_memory.get("n") or 0) + 1)
        ctx.send_event(OutputEvent(output=ctx.short_term_memory.get("n")))

    agent.add_action("count", [InputEvent], count)
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, store=InMemoryJournalStore())
    driver = LocalDriver(memory_ttl_s=60, clock=lambda: now[0])
    for step_s in (0, 30, 30, 61):
        now[0] += step_s
        host_runs.process(engine, driver, "k", "x")
    assert [o["k"] for o in driver.outputs] == [1, 2, 3, 1]


def _seen_before(e: InputEvent, ctx: Any) -> None:
    """Marks the input's name in memory; outputs whether it was there."""
    seen = ctx.short_term_memory.get(e.input)
    ctx.short_term_memory.set(e.input, True)
    ctx.send_event(OutputEvent(output=f"{e.input}|{'EXISTING' if seen else 'NEW'}"))


@pytest.mark.parametrize("renewed_on_read", [False, True])
def test_short_term_memory_ttl_applies_to_each_path_alone(renewed_on_read: bool) -> None:
    # 0.3.1 keeps memory in a MapState with Flink state TTL: writing (or
    # reading) one path does not keep another alive.
    now = [1000.0]
    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("seen", [InputEvent], _seen_before)), {},
                         store=InMemoryJournalStore())
    driver = LocalDriver(memory_ttl_s=0.05, clock=lambda: now[0], memory_ttl_renewed_on_read=renewed_on_read)
    for name in ("event1", "event2", "event1"):
        host_runs.process(engine, driver, "k", name)
        now[0] += 0.03  # event1's last write is 60 ms old at its next read

    assert [o["k"] for o in driver.outputs] == ["event1|NEW", "event2|NEW", "event1|NEW"]


def test_a_nested_write_keeps_its_parent_object_alive() -> None:
    now = [1000.0]

    def nested(e: InputEvent, ctx: Any) -> None:
        if e.input == "read":
            ctx.send_event(OutputEvent(output=sorted(ctx.short_term_memory.get("user").get_field_names())))
        else:
            ctx.short_term_memory.set(f"user.{e.input}", 1)

    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("nested", [InputEvent], nested)), {},
                         store=InMemoryJournalStore())
    driver = LocalDriver(memory_ttl_s=0.05, clock=lambda: now[0])
    for step in ("a", "b", "read"):
        host_runs.process(engine, driver, "k", step)
        now[0] += 0.03

    assert [o["k"] for o in driver.outputs] == [["b"]]


def _seen_then_wait(e: InputEvent, ctx: Any) -> None:
    name, wait_s = e.input
    _seen_before(InputEvent(input=name), ctx)
    time.sleep(wait_s)


@pytest.mark.parametrize("ttl_ms, expected_last", [(30, "event1|NEW"), (0, "event1|EXISTING")])
def test_queued_records_of_a_key_see_the_memory_ttl_between_them(ttl_ms: int, expected_last: str) -> None:
    # The key's records run back to back in the runner, on its copy of the
    # memory: the TTL applies before each (0.3.1's short_term_memory_ttl e2e).
    env = AgentsExecutionEnvironment.get_execution_environment(**{
        "short-term-memory.state-ttl.ms": ttl_ms, "short-term-memory.state-ttl.update-type": "ON_CREATE_AND_WRITE",
    })
    records = [{"key": "k", "value": (name, 0.04)} for name in ("event1", "event2", "event1")]
    outputs = env.from_list(records).apply(Agent().add_action("seen", [InputEvent], _seen_then_wait)).to_list()

    env.execute()

    assert [o["k"] for o in outputs] == ["event1|NEW", "event2|NEW", expected_last]


def _count_reads(e: InputEvent, ctx: Any) -> None:
    """``("set", name)`` writes ``name``; ``("get", name)`` only reads it."""
    op, name, wait_s = e.input
    if op == "set":
        ctx.short_term_memory.set(name, True)
    ctx.send_event(OutputEvent(output=f"{name}|{'EXISTING' if ctx.short_term_memory.get(name) else 'NEW'}"))
    time.sleep(wait_s)


@pytest.mark.parametrize("update_type, expected_last", [
    ("ON_READ_AND_WRITE", "a|EXISTING"), ("ON_CREATE_AND_WRITE", "a|NEW"),
])
def test_a_read_renews_only_the_path_it_read_when_reads_renew(update_type: str, expected_last: str) -> None:
    env = AgentsExecutionEnvironment.get_execution_environment(**{
        "short-term-memory.state-ttl.ms": 400, "short-term-memory.state-ttl.update-type": update_type,
    })
    # Writes and reads count when their record ends (after its wait): a at
    # 0 s, b at 0.25; a read at 0.25 (renewed at 0.5 if reads renew) and
    # again at 0.5; b read at 0.7, past its TTL.
    steps = [("set", "a", 0.0), ("set", "b", 0.25), ("get", "a", 0.25), ("get", "a", 0.2), ("get", "b", 0.0)]
    outputs = env.from_list([{"key": "k", "value": s} for s in steps]).apply(
        Agent().add_action("count", [InputEvent], _count_reads)).to_list()

    env.execute()

    assert [o["k"] for o in outputs] == ["a|EXISTING", "b|EXISTING", "a|EXISTING", expected_last, "b|NEW"]



class _SlowWriteStore(InMemoryJournalStore):
    """A store whose writes wait for I/O (they run on the io pool), so the
    event loop goes on while one is held in ``before_append``."""

    blocking_io = True


def test_a_result_landing_while_a_sibling_waits_to_start_is_committed_before_that_sibling_runs():
    """Branch c's result is being written (a group commit, held here);
    branch a's call waits for that write before it starts; branch b's call
    lands meanwhile, with no call counted in flight. b's result must not wait
    for the run's next write: a crash inside a's call would run b's again.
    (Seen in the exact-replay e2e under load: a sibling's completed ticket
    ran twice after the worker was killed inside another branch's call.)"""
    import threading

    store = _SlowWriteStore()
    holding, release = threading.Event(), threading.Event()
    seen: dict = {}

    def hold_the_write_of_c(entries):
        if any(entry.step.endswith("/2") for entry in entries) and not holding.is_set():
            holding.set()
            release.wait(5)

    store.before_append = hold_the_write_of_c

    async def until_holding() -> None:
        while not holding.is_set():
            await asyncio.sleep(0.001)

    async def a() -> str:
        CALLS["a"] += 1
        if CALLS["a"] == 1:
            await asyncio.sleep(0.3)  # long against the 5 ms group commit
            seen["b durable when a crashed"] = any(
                entry.step.endswith("/1") for entry in store.load_run("job", '"key"', 0).values())
            raise Crash("the worker dies inside a")
        return "a"

    async def b() -> str:
        CALLS["b"] += 1
        await until_holding()
        await asyncio.sleep(0.02)  # a waits for the held write by now
        threading.Timer(0.1, release.set).start()  # after b's result landed
        return "b"

    async def c() -> str:
        CALLS["c"] += 1
        return "c"  # lands while b runs: committed after 5 ms (held)

    async def act(event: InputEvent, ctx: Any) -> None:
        async def branch_a() -> str:
            await until_holding()
            return await ctx.durable_execute_async(a)

        branches = [branch_a(), ctx.durable_execute_async(b), ctx.durable_execute_async(c)]
        ctx.send_event(OutputEvent(output=await asyncio.gather(*branches)))

    agent = Agent()
    agent.add_action("act", [InputEvent], act)
    with pytest.raises(Crash):
        _process(store, agent)
    assert holding.is_set(), "c's write was never held: the test did not set the scene"
    assert seen == {"b durable when a crashed": True}
    store.before_append = None
    _, driver = _process(store, agent)  # the restarted worker
    assert driver.outputs == [{"key": ["a", "b", "c"]}]
    assert CALLS == Counter(a=2, b=1, c=1)
