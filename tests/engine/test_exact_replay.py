"""Exact replay on the engine (issue 11, parts 1, 6 and 7).

- Positions follow program structure: calls, callbacks and sub-agent submits
  made in concurrent branches (``gather``, ``TaskGroup``) are identified by the
  branch that made them, so a replay, where journaled calls return at once
  and later calls start in program order, finds each branch's own results.
- A completed call never runs again: a result that lands while a sibling is
  in flight is durable before it is used; a retry replays the failed
  attempt's completed calls and re-runs only the failed one.
- An action that returns a value instead of sending it fails, naming itself.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections import Counter
from typing import Any, Dict, List, Sequence, Tuple

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.errors import ActionFailed, NondeterminismError
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.chat_turn import ChatTurnAgent
from tests.support.engine_runs import run_record
from tests.support.pythons import needs_task_group

CALLS: Counter = Counter()  # (function, argument) -> times it really ran
TICKETS = {"next": 0}


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing may catch it)."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    TICKETS["next"] = 0
    CRASH.clear()


CRASH: Dict[str, bool] = {}  # function name -> crash inside it (once)


def _maybe_crash(name: str) -> None:
    if CRASH.pop(name, False):
        raise Crash(f"process died inside {name}")


async def lookup(i: int) -> str:
    await asyncio.sleep((3 - i) * 0.06)  # branch 2's lookup lands first, well apart under load
    _maybe_crash(f"lookup_{i}")
    CALLS[("lookup", i)] += 1
    return f"L{i}"


async def enrich(x: str) -> str:
    _maybe_crash(f"enrich_{x}")
    CALLS[("enrich", x)] += 1
    return f"{x}+e"


def final(parts: List[str]) -> str:
    _maybe_crash("final")
    CALLS[("final", None)] += 1
    return "|".join(parts)


def ticket() -> int:
    """One function, no arguments: only its position tells calls apart."""
    _maybe_crash("ticket")
    CALLS[("ticket", None)] += 1
    TICKETS["next"] += 1
    return TICKETS["next"]


async def branch(ctx: Any, i: int) -> str:
    x = await ctx.durable_execute_async(lookup, i)
    return await ctx.durable_execute_async(enrich, x)


async def gather_action(event: Event, ctx: Any) -> None:
    parts = await asyncio.gather(*(branch(ctx, i) for i in range(3)))
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(final, list(parts))))


async def task_group_action(event: Event, ctx: Any) -> None:
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(branch(ctx, i)) for i in range(3)]
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(final, [t.result() for t in tasks])))


async def ticket_branch(ctx: Any, i: int) -> Tuple[str, int]:
    x = await ctx.durable_execute_async(lookup, i)
    return x, await ctx.durable_execute_async(ticket)


async def tickets_action(event: Event, ctx: Any) -> None:
    pairs = await asyncio.gather(*(ticket_branch(ctx, i) for i in range(3)))
    await ctx.durable_execute_async(final, [x for x, _ in pairs])
    ctx.send_event(OutputEvent(output={x: t for x, t in pairs}))


def _process(action: Any, store: InMemoryJournalStore, value: Any = "r", **config: Any) -> LocalDriver:
    return _run_agent(Agent().add_action("fan", [InputEvent], action, **config), store, value)


def _run_agent(agent: Agent, store: InMemoryJournalStore, value: Any = "r") -> LocalDriver:
    """One record of key "k" through ``agent`` against ``store`` (a fresh
    engine and keyed state: a restore to before the record)."""
    return run_record(agent, store, value)


def _journaled_results(store: InMemoryJournalStore) -> List[str]:
    """The payloads of every call result the store holds."""
    return [entry.payload for run in store._runs.values() for (entry, _) in run.values() if entry.ordinal >= 0]


# ---- 1. positions follow program structure --------------------------------------------------


@pytest.mark.parametrize(
    "action", [gather_action, pytest.param(task_group_action, marks=needs_task_group)], ids=["gather", "task_group"]
)
def test_a_crash_at_the_last_call_replays_every_branch_without_calling_again(action: Any) -> None:
    expected = _process(action, InMemoryJournalStore()).outputs
    assert expected == [{"k": "L0+e|L1+e|L2+e"}]
    CALLS.clear()

    store = InMemoryJournalStore()
    CRASH["final"] = True
    with pytest.raises(Crash):
        _process(action, store)
    assert CALLS == Counter({("lookup", i): 1 for i in range(3)}) + Counter({("enrich", f"L{i}"): 1 for i in range(3)})
    recovered = _process(action, store)  # the restore: keyed state from before the record
    assert recovered.outputs == expected
    # Every branch call replayed from the journal; only the call that died ran again.
    assert CALLS == Counter({("lookup", i): 1 for i in range(3)}) + Counter(
        {("enrich", f"L{i}"): 1 for i in range(3)}) + Counter({("final", None): 1})


def test_branches_calling_one_function_without_arguments_get_their_own_results_back() -> None:
    store = InMemoryJournalStore()
    CRASH["final"] = True
    with pytest.raises(Crash):
        _process(tickets_action, store)
    # First run: the lookups landed in reverse, so branch 2 drew ticket 1.
    recovered = _process(tickets_action, store)
    assert recovered.outputs == [{"k": {"L2": 1, "L1": 2, "L0": 3}}]
    assert CALLS[("ticket", None)] == 3


async def lazily_started_client() -> str:
    """A call whose body creates a task, as an SDK client does when it
    starts lazily: only when the call really runs, never on a replay."""
    CALLS[("client", None)] += 1
    await asyncio.create_task(asyncio.sleep(0))
    return "client"


async def lazy_client_then_gather_action(event: Event, ctx: Any) -> None:
    await ctx.durable_execute_async(lazily_started_client)
    parts = await asyncio.gather(*(branch(ctx, i) for i in range(3)))
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(final, list(parts))))


def test_a_task_created_inside_a_calls_body_does_not_shift_the_positions_after_it() -> None:
    """Found by research for framework agents (SDK clients start lazily):
    the body's task took a child index on the first run only, so the
    replay's branches replayed each other's calls or ran them again."""
    store = InMemoryJournalStore()
    CRASH["final"] = True
    with pytest.raises(Crash):
        _process(lazy_client_then_gather_action, store)
    ran = Counter(CALLS)
    recovered = _process(lazy_client_then_gather_action, store)
    assert recovered.outputs == [{"k": "L0+e|L1+e|L2+e"}]
    assert CALLS - ran == Counter({("final", None): 1}), "a journaled call ran again on the replay"


@pytest.mark.parametrize("mode", ["after_write", "before_write"])
def test_a_crash_at_every_journal_write_of_the_gather_example_recovers_exactly(mode: str) -> None:
    expected = _process(gather_action, InMemoryJournalStore()).outputs
    writes_store = InMemoryJournalStore()
    _process(gather_action, writes_store)
    writes = writes_store.writes
    # Results that land beside running siblings are written as they land, 60 ms
    # apart: lookup 2, enrich L2, lookup 1, enrich L1 (4 writes); lookup 0
    # lands alone, written before enrich L0 starts (1); enrich L0, alone,
    # before final starts (1); final with the run's end (1).
    assert writes == 7

    for k in range(1, writes + 1):
        CALLS.clear()
        store = InMemoryJournalStore()
        journaled_at_crash: List[str] = []

        def crash(entries: Any, k: int = k, store: InMemoryJournalStore = store) -> None:
            if store.writes + (1 if mode == "before_write" else 0) == k:
                journaled_at_crash.extend(_journaled_results(store))
                raise Crash(f"crash {mode} {k}")

        setattr(store, "after_append" if mode == "after_write" else "before_append", crash)
        with pytest.raises(Crash):
            _process(gather_action, store)
        setattr(store, "after_append" if mode == "after_write" else "before_append", None)
        recovered = _process(gather_action, store)
        assert recovered.outputs == expected, f"crash {mode} {k}"
        # A call whose result was durable at the crash never ran again; one in
        # flight (started, not journaled) ran at most once more.
        for (name, arg), count in CALLS.items():
            assert count <= 2, f"{name}({arg}) ran {count} times: crash {mode} {k}"
            result = {"lookup": f"L{arg}", "enrich": f"{arg}+e"}.get(name)
            if result is not None and any(f'"{result}"' in payload for payload in journaled_at_crash):
                assert count == 1, f"{name}({arg}) was journaled, yet ran again: crash {mode} {k}"


async def outer(i: int) -> str:
    # Branch 1's call lands first, 300 ms apart; each result at least 100 ms
    # from the next (inner below), so a loaded machine's stalls of tens of ms
    # do not put two into one group commit (the crash test counts its writes).
    await asyncio.sleep((2 - i) * 0.3)
    CALLS[("outer", i)] += 1
    return f"O{i}"


async def inner(x: str, j: int) -> str:
    await asyncio.sleep((2 - j) * 0.1)  # the second inner call lands first, 100 ms apart
    CALLS[("inner", (x, j))] += 1
    return f"{x}.I{j}"


USED: List[str] = []  # results in the order the action got them back


async def _used(call: Any) -> str:
    result = await call
    USED.append(result)
    return result


async def nested_branch(ctx: Any, i: int) -> List[str]:
    x = await _used(ctx.durable_execute_async(outer, i))
    a, b = await asyncio.gather(_used(ctx.durable_execute_async(inner, x, 0)),
                                _used(ctx.durable_execute_async(inner, x, 1)))
    return [x, a, b]


async def nested_gather_action(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=await asyncio.gather(*(nested_branch(ctx, i) for i in range(2)))))


NESTED_RESULTS = {  # journal step -> the result of the one call made there
    "fan@0/0": "O0", "fan@0/0.0": "O0.I0", "fan@0/0.1": "O0.I1",
    "fan@0/1": "O1", "fan@0/1.0": "O1.I0", "fan@0/1.1": "O1.I1",
}


def _nested_call(result: str) -> Tuple[str, Any]:
    """The ``CALLS`` key of the call that returns ``result``."""
    if ".I" in result:
        x, j = result.split(".I")
        return "inner", (x, int(j))
    return "outer", int(result[1:])


def _results_in(payloads: Sequence[str]) -> set:
    return {r for r in NESTED_RESULTS.values() if any(f'"{r}"' in payload for payload in payloads)}


def test_gathers_nested_in_gather_branches_journal_each_call_at_its_tasks_path() -> None:
    """A task created by a branch's task is that branch's child: the first
    child of child 0 is "0.0", the second child of child 1 is "1.1"."""
    USED.clear()
    store = InMemoryJournalStore()
    driver = _process(nested_gather_action, store)
    assert driver.outputs == [{"k": [["O0", "O0.I0", "O0.I1"], ["O1", "O1.I0", "O1.I1"]]}]
    assert USED == ["O1", "O1.I1", "O1.I0", "O0", "O0.I1", "O0.I0"]  # completion order is not program order
    assert CALLS == Counter({_nested_call(r): 1 for r in NESTED_RESULTS.values()})
    calls = [entry for run in store._runs.values() for (entry, _) in run.values() if entry.ordinal >= 0]
    assert sorted((e.step, e.ordinal) for e in calls) == sorted((step, 0) for step in NESTED_RESULTS)
    for entry in calls:
        assert _results_in([entry.payload]) == {NESTED_RESULTS[entry.step]}, entry


@pytest.mark.parametrize("mode", ["after_write", "before_write"])
def test_a_crash_at_every_journal_write_of_nested_gathers_reruns_only_what_it_cut_off(mode: str) -> None:
    reference = InMemoryJournalStore()
    expected = _process(nested_gather_action, reference).outputs
    # Results land 100 ms or more apart, each in a group commit of its own:
    # O1 and O1's two inner results, beside running siblings (3 writes); O0
    # lands alone, written before O0's inner calls start (1); O0.I1 beside
    # O0.I0 (1); O0.I0, alone and last, with the run's end (1).
    assert reference.writes == 6

    for k in range(1, reference.writes + 1):
        CALLS.clear()
        USED.clear()
        store = InMemoryJournalStore()
        at_crash: Dict[str, set] = {}

        def crash(entries: Any, k: int = k, store: InMemoryJournalStore = store) -> None:
            if store.writes + (1 if mode == "before_write" else 0) == k:
                at_crash["used"] = set(USED)
                at_crash["durable"] = _results_in(_journaled_results(store))
                cut = [e.payload for e in entries if e.ordinal >= 0] if mode == "before_write" else []
                at_crash["cut off"] = _results_in(cut)  # calls in the write the crash kept from landing
                raise Crash(f"crash {mode} {k}")

        def before(entries: Any) -> None:
            if at_crash:  # the process died: no other task's write lands after it
                raise Crash("gone")
            if mode == "before_write":
                crash(entries)

        store.before_append = before
        store.after_append = crash if mode == "after_write" else None
        with pytest.raises(Crash):
            _process(nested_gather_action, store)
        assert at_crash, f"no crash {mode} {k}"
        store.before_append = store.after_append = None
        ran_before = Counter(CALLS)
        # A result that lands beside running siblings is durable before the
        # action gets it; one that lands alone (O0, then O0.I0) by the run's
        # next write, before anything else runs: it may be what the crash cut off.
        may_be_cut_off = at_crash["cut off"] & {"O0", "O0.I0"}
        assert at_crash["used"] <= at_crash["durable"] | may_be_cut_off, f"crash {mode} {k}: used, not durable"
        assert _process(nested_gather_action, store).outputs == expected, f"crash {mode} {k}"
        # The recovery runs exactly the calls not journaled at the crash, and
        # the only calls that ran twice are those whose write it cut off.
        lost = set(NESTED_RESULTS.values()) - at_crash["durable"]
        assert CALLS - ran_before == Counter(_nested_call(r) for r in lost), f"crash {mode} {k}"
        assert CALLS == Counter({_nested_call(r): 1 + (r in at_crash["cut off"]) for r in NESTED_RESULTS.values()}), (
            f"crash {mode} {k}")


async def callback_branch(ctx: Any, i: int) -> str:
    await ctx.durable_execute_async(lookup, i)
    callback = await ctx.create_callback(f"approval {i}", 60)
    return callback.callback_id


async def callbacks_action(event: Event, ctx: Any) -> None:
    ids = await asyncio.gather(*(callback_branch(ctx, i) for i in range(3)))
    await ctx.durable_execute_async(final, ["x"])
    ctx.send_event(OutputEvent(output=ids))


def test_callbacks_created_in_branches_replay_as_their_own_branch() -> None:
    """On replay the lookups return at once and the callbacks are created in
    program order; each branch still gets its own callback (by purpose)."""
    store = InMemoryJournalStore()
    CRASH["final"] = True
    with pytest.raises(Crash):
        _process(callbacks_action, store)
    first_ids = [record.callback_id for record in sorted(
        store._callbacks.values(), key=lambda r: r.purpose)]  # approval 0, 1, 2
    recovered = _process(callbacks_action, store)
    assert recovered.outputs == [{"k": first_ids}]


def _child_echo(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=f"child saw {event.input}"))


CHILD_RUNS: Counter = Counter()


def _counting_child(event: Event, ctx: Any) -> None:
    CHILD_RUNS[event.input] += 1
    _child_echo(event, ctx)


async def sub_agent_branch(ctx: Any, i: int) -> Any:
    await ctx.durable_execute_async(lookup, i)
    result = await ctx.get_resource("child", ResourceType.AGENT).submit(ctx, f"task {i}")
    return result.result[0]


async def sub_agents_action(event: Event, ctx: Any) -> None:
    outputs = await asyncio.gather(*(sub_agent_branch(ctx, i) for i in range(3)))
    await ctx.durable_execute_async(final, ["x"])
    ctx.send_event(OutputEvent(output=outputs))


def test_sub_agents_submitted_in_branches_replay_without_running_the_children_again() -> None:
    CHILD_RUNS.clear()
    store = InMemoryJournalStore()
    parent = Agent().add_action("fan", [InputEvent], sub_agents_action)
    parent.add_resource("child", ResourceType.AGENT, Agent().add_action("echo", [InputEvent], _counting_child))

    CRASH["final"] = True
    with pytest.raises(Crash):
        _run_agent(parent, store)
    assert recovered_outputs(_run_agent(parent, store)) == [["child saw task 0", "child saw task 1", "child saw task 2"]]
    assert CHILD_RUNS == Counter({f"task {i}": 1 for i in range(3)})


def recovered_outputs(driver: LocalDriver) -> List[Any]:
    return [output["k"] for output in driver.outputs]


# ---- 6(a). a completed call never runs again ----------------------------------------------


class EmailAndLookupModel(BaseChatModelConnection):
    """Asks for send_email and slow_lookup in one round, then answers."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        CALLS[("model", None)] += 1
        results = sorted(str(m.content) for m in messages if m.role == MessageRole.TOOL)
        if not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": "call_0", "type": "function", "function": {"name": "send_email", "arguments": {"to": "a@b"}}},
                {"id": "call_1", "type": "function", "function": {"name": "slow_lookup", "arguments": {"q": "x"}}},
            ])
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"done: {results}")


def send_email(to: str) -> str:
    """Send an email.

    Args:
        to: The address.
    """
    CALLS[("send_email", to)] += 1
    return f"sent to {to}"


def slow_lookup(q: str) -> str:
    """Look something up, slowly.

    Args:
        q: The query.
    """
    time.sleep(0.2)
    _maybe_crash("slow_lookup")
    CALLS[("slow_lookup", q)] += 1
    return f"found {q}"


def test_a_crash_inside_a_slow_tool_does_not_send_the_email_again() -> None:
    store = InMemoryJournalStore()

    agent = ChatTurnAgent(EmailAndLookupModel, {"send_email": send_email, "slow_lookup": slow_lookup})
    CRASH["slow_lookup"] = True
    with pytest.raises(Crash):
        _run_agent(agent, store, "go")
    driver = _run_agent(agent, store, "go")
    assert driver.outputs == [{"k": "done: ['found x', 'sent to a@b']"}]
    assert CALLS[("send_email", "a@b")] == 1
    assert CALLS[("model", None)] == 2  # the first reply was journaled before the tools ran


# ---- 6(b). a retry replays its failed attempt's completed calls ---------------------------

FLAKY = {"failures_left": 0}


def flaky_fetch(x: str) -> str:
    CALLS[("fetch", x)] += 1
    if FLAKY["failures_left"]:
        FLAKY["failures_left"] -= 1
        raise ConnectionError("connection reset by peer")
    return f"fetched {x}"


def email(to: str) -> str:
    CALLS[("email", to)] += 1
    return f"emailed {to}"


def email_then_fetch(event: Event, ctx: Any) -> None:
    receipt = ctx.durable_execute(email, "ops@example.com")
    data = ctx.durable_execute(flaky_fetch, event.input)
    ctx.send_event(OutputEvent(output=[receipt, data]))


async def email_then_fetch_async(event: Event, ctx: Any) -> None:
    receipt = await ctx.durable_execute_async(email, "ops@example.com")
    data = await ctx.durable_execute_async(flaky_fetch, event.input)
    ctx.send_event(OutputEvent(output=[receipt, data]))


RETRY = {"error_strategy": "retry", "error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001}


@pytest.mark.parametrize("action", [email_then_fetch, email_then_fetch_async], ids=["sync", "async"])
def test_a_retry_does_not_send_the_email_again(action: Any) -> None:
    FLAKY["failures_left"] = 1
    store = InMemoryJournalStore()
    driver = _process(action, store, value="r", **RETRY)
    assert driver.outputs == [{"k": ["emailed ops@example.com", "fetched r"]}]
    assert CALLS == Counter({("email", "ops@example.com"): 1, ("fetch", "r"): 2})
    # And a replay of the finished run calls nothing.
    CALLS.clear()
    assert _process(action, store, value="r", **RETRY).outputs == driver.outputs
    assert CALLS == Counter()


ATTEMPTS = {"n": 0}


def switching_path(event: Event, ctx: Any) -> None:
    ATTEMPTS["n"] += 1
    if ATTEMPTS["n"] == 1:
        ctx.durable_execute(email, "ops@example.com")
        raise ValueError("first attempt fails")
    ctx.durable_execute(flaky_fetch, "other")  # another call where the email was


def test_a_retry_that_takes_another_path_is_a_nondeterminism_error() -> None:
    ATTEMPTS["n"] = 0
    with pytest.raises(ActionFailed) as failure:
        _process(switching_path, InMemoryJournalStore(), **RETRY)
    assert isinstance(failure.value.cause, NondeterminismError)
    assert "email" in str(failure.value.cause) and "flaky_fetch" in str(failure.value.cause)
    assert CALLS == Counter({("email", "ops@example.com"): 1})


# ---- 7. nothing returned is dropped ---------------------------------------------------------


def returns_output(event: Event, ctx: Any) -> OutputEvent:
    CALLS[("returns_output", None)] += 1
    return OutputEvent(output=event.input)


async def returns_dict(event: Event, ctx: Any) -> Dict[str, Any]:
    CALLS[("returns_dict", None)] += 1
    return {"answer": event.input}


@pytest.mark.parametrize("action,kind", [(returns_output, "OutputEvent"), (returns_dict, "dict")])
def test_an_action_that_returns_a_value_fails_naming_itself_and_send_event(action: Any, kind: str) -> None:
    with pytest.raises(ActionFailed) as failure:
        _process(action, InMemoryJournalStore(), **RETRY)
    message = str(failure.value)
    assert "action 'fan' returned a value of type " + kind in message and "ctx.send_event" in message
    assert sum(CALLS.values()) == 1  # never retried: it would return the value again


def test_a_returned_value_under_skip_goes_to_the_error_output() -> None:
    driver = _process(returns_output, InMemoryJournalStore(), error_strategy="skip")
    assert driver.outputs == []
    assert [e["error_type"] for e in driver.errors] == ["ActionReturnedValue"]


def test_the_plan_warns_when_an_action_is_annotated_to_return_a_value() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        AgentPlan.from_agent(Agent().add_action("fan", [InputEvent], returns_output))
    assert any("'fan'" in str(w.message) and "send_event" in str(w.message) for w in caught)


@pytest.mark.parametrize("mode", ["after_write", "before_write"])
def test_a_crash_at_every_journal_write_of_a_retried_action_never_sends_the_email_twice(mode: str) -> None:
    FLAKY["failures_left"] = 1
    reference = InMemoryJournalStore()
    expected = _process(email_then_fetch_async, reference, **RETRY).outputs
    writes = reference.writes
    # The email's result before the fetch starts; the retry's (the failed
    # attempt's count), between the attempts; the run's end.
    assert writes == 3

    for k in range(1, writes + 1):
        CALLS.clear()
        FLAKY["failures_left"] = 1
        store = InMemoryJournalStore()
        email_durable_at_crash: List[bool] = []

        def crash(entries: Any, k: int = k, store: InMemoryJournalStore = store) -> None:
            if store.writes + (1 if mode == "before_write" else 0) == k:
                email_durable_at_crash.append(any("emailed" in p for p in _journaled_results(store)))
                raise Crash(f"crash {mode} {k}")

        setattr(store, "after_append" if mode == "after_write" else "before_append", crash)
        with pytest.raises(Crash):
            _process(email_then_fetch_async, store, **RETRY)
        setattr(store, "after_append" if mode == "after_write" else "before_append", None)
        assert _process(email_then_fetch_async, store, **RETRY).outputs == expected, f"crash {mode} {k}"
        # Journaled before the crash: sent once in all, across the crashed run,
        # its retry and the recovery; else its write was the one lost, and it
        # may be sent once more.
        sent = CALLS[("email", "ops@example.com")]
        assert sent == 1 if email_durable_at_crash[0] else sent <= 2, f"crash {mode} {k}: sent {sent} times"
        # The fetch failed once and then succeeded: twice in all, once more
        # if the crash cut off the attempt that would have succeeded.
        assert 2 <= CALLS[("fetch", "r")] <= 3, f"crash {mode} {k}: fetched {CALLS[('fetch', 'r')]} times"


def always_failing_fetch(x: str) -> str:
    CALLS[("fetch", x)] += 1
    raise ConnectionError("connection reset by peer")


async def fetch_forever(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(always_failing_fetch, event.input)))


@pytest.mark.parametrize("mode", ["after_write", "before_write"])
def test_a_crash_at_every_journal_write_between_retries_keeps_the_retry_budget(mode: str) -> None:
    """An action under retry with 3 attempts whose call always fails; a
    crash at each write, the ones between its attempts included. Recovery
    goes on counting the attempts: 3 in all when the crash came after a
    retry's write, one more when it cut that write off, never a fresh
    budget (issue 28.1)."""
    reference = InMemoryJournalStore()
    with pytest.raises(ActionFailed):
        _process(fetch_forever, reference, **RETRY)
    assert CALLS[("fetch", "r")] == 3
    writes = reference.writes
    assert writes == 2  # one per retry (the failed attempts' count); a failed record's end writes nothing new

    for k in range(1, writes + 1):
        CALLS.clear()
        store = InMemoryJournalStore()

        def crash(entries: Any, k: int = k, store: InMemoryJournalStore = store) -> None:
            if store.writes + (1 if mode == "before_write" else 0) == k:
                raise Crash(f"crash {mode} {k}")

        setattr(store, "after_append" if mode == "after_write" else "before_append", crash)
        with pytest.raises(Crash):
            _process(fetch_forever, store, **RETRY)
        assert CALLS[("fetch", "r")] == k
        setattr(store, "after_append" if mode == "after_write" else "before_append", None)
        with pytest.raises(ActionFailed):
            _process(fetch_forever, store, **RETRY)
        fetched = CALLS[("fetch", "r")]
        assert fetched == (3 if mode == "after_write" else 4), f"crash {mode} {k}: fetched {fetched} times"


# ---- found by a fresh-user review ------------------------------------------------------------


async def slow_email(to: str) -> str:
    await asyncio.sleep(0.2)
    CALLS[("slow_email", to)] += 1
    return f"emailed {to}"


async def flaky_soon(x: str) -> str:
    await asyncio.sleep(0.02)
    return flaky_fetch(x)


async def email_beside_a_flaky_call(event: Event, ctx: Any) -> None:
    receipt, data = await asyncio.gather(
        ctx.durable_execute_async(slow_email, "ops@example.com"), ctx.durable_execute_async(flaky_soon, event.input))
    ctx.send_event(OutputEvent(output=[receipt, data]))


def test_a_retry_replays_a_sibling_that_was_still_running_when_its_attempt_failed() -> None:
    """The flaky branch fails while the email branch still runs: the email
    completes, is journaled, and the retry replays it instead of sending it
    again."""
    FLAKY["failures_left"] = 1
    driver = _process(email_beside_a_flaky_call, InMemoryJournalStore(), **RETRY)
    assert driver.outputs == [{"k": ["emailed ops@example.com", "fetched r"]}]
    assert CALLS[("slow_email", "ops@example.com")] == 1 and CALLS[("fetch", "r")] == 2


class Tagged(Event):
    tags: List[str] = []


def send_tagged(event: Event, ctx: Any) -> None:
    ctx.send_event(Tagged(tags=["a"]))


def enrich_in_place(event: Tagged, ctx: Any) -> None:
    event.tags.append("enriched")  # mutates the event it was given


def use_tags(event: Tagged, ctx: Any) -> None:
    tags = ctx.durable_execute(price_tags, list(event.tags))
    ctx.durable_execute(final, ["x"])
    ctx.send_event(OutputEvent(output=tags))


def price_tags(tags: List[str]) -> List[str]:
    CALLS[("price_tags", tuple(tags))] += 1
    return tags


def test_a_listener_changing_its_event_does_not_change_what_another_listener_gets() -> None:
    agent = (Agent().add_action("send", [InputEvent], send_tagged)
             .add_action("enrich", [Tagged], enrich_in_place).add_action("use", [Tagged], use_tags))
    store = InMemoryJournalStore()
    CRASH["final"] = True
    with pytest.raises(Crash):
        _run_agent(agent, store)
    assert _run_agent(agent, store).outputs == [{"k": ["a"]}]  # no NondeterminismError on the replay
    assert CALLS == Counter({("price_tags", ("a",)): 1, ("final", None): 1})


class Note(Event):
    text: str = ""


def send_note_and_early_output(event: Event, ctx: Any) -> None:
    CALLS[("send_note", None)] += 1
    ctx.send_event(OutputEvent(output="early"))  # no listener: encoded only if the run writes a journal
    ctx.send_event(Note(text="original"))


def rewrite_note(event: Note, ctx: Any) -> None:
    seen = event.text
    event.text = "rewritten"  # changes the event it was given
    ctx.durable_execute(final, [seen])
    ctx.send_event(OutputEvent(output=seen))


def test_an_event_of_plain_values_journals_as_its_listener_got_it_and_an_output_as_it_was_sent() -> None:
    agent = (Agent().add_action("send", [InputEvent], send_note_and_early_output)
             .add_action("rewrite", [Note], rewrite_note))
    store = InMemoryJournalStore()
    CRASH["final"] = True
    with pytest.raises(Crash):
        _run_agent(agent, store)
    assert _run_agent(agent, store).outputs == [{"k": "early"}, {"k": "original"}]
    assert CALLS == Counter({("send_note", None): 1, ("final", None): 1})  # "send" replayed from its completion


def test_a_run_that_writes_no_journal_encodes_no_output_event(monkeypatch: pytest.MonkeyPatch) -> None:
    from flink_agents.runtime.execution import action_loop, event_codec

    def refuse(event: Event) -> None:
        raise AssertionError(f"encoded {event!r}")

    monkeypatch.setattr(event_codec, "encode_event", refuse)
    monkeypatch.setattr(action_loop, "encode_event", refuse)
    store = InMemoryJournalStore()
    driver = _process(lambda event, ctx: ctx.send_event(OutputEvent(output=7)), store)
    assert driver.outputs == [{"k": 7}] and store.count_entries() == 0


def emits_bytearray(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={"x": [bytearray(b"a")]}))


def test_an_event_the_codec_refuses_is_the_actions_error_under_its_strategy() -> None:
    driver = _process(emits_bytearray, InMemoryJournalStore(), **{**RETRY, "error_strategy": "skip"})
    assert driver.outputs == []
    [error] = driver.errors
    assert error["action"] == "fan" and error["error_type"] == "EncodeError" and error["attempts"] == 1
    assert "OutputEvent.output.x[0]" in error["error_message"]
    with pytest.raises(ActionFailed, match=r"action 'fan' failed on key 'k', record #0: EncodeError"):
        _process(emits_bytearray, InMemoryJournalStore(), **RETRY)  # terminal: not retried


class HttpError(Exception):
    pass


def failing_http(url: str) -> str:
    CALLS[("http", url)] += 1
    error = HttpError(503)
    error.response = object()  # an attribute the codec cannot keep
    raise error


def catches_http(event: Event, ctx: Any) -> None:
    try:
        ctx.durable_execute(failing_http, "https://example.invalid")
    except HttpError as error:
        seen = {"args": error.args, "has_response": hasattr(error, "response")}
    ctx.durable_execute(final, ["x"])
    ctx.send_event(OutputEvent(output=seen))


def test_a_journaled_exception_on_the_first_run_is_the_one_a_replay_raises() -> None:
    store = InMemoryJournalStore()
    CRASH["final"] = True
    with pytest.raises(Crash):
        _process(catches_http, store)
    replayed = _process(catches_http, store).outputs
    first = _process(catches_http, InMemoryJournalStore()).outputs
    assert first == replayed == [{"k": {"args": (503,), "has_response": False}}]


ARGUMENT: Dict[str, Any] = {}


def lookup_argument(value: Any) -> str:
    CALLS[("lookup_argument", repr(value))] += 1
    return f"looked up {value!r}"


def looks_up_argument(event: Event, ctx: Any) -> None:
    found = ctx.durable_execute(lookup_argument, ARGUMENT["value"])
    ctx.durable_execute(final, ["x"])
    ctx.send_event(OutputEvent(output=found))


@pytest.mark.parametrize("first,then", [({1: "a"}, {"1": "a"}), ([1, 2], (1, 2))], ids=["int_vs_str_key", "list_vs_tuple"])
def test_arguments_that_differ_only_in_type_are_a_nondeterminism_error(first: Any, then: Any) -> None:
    store = InMemoryJournalStore()
    ARGUMENT["value"] = first
    CRASH["final"] = True
    with pytest.raises(Crash):
        _process(looks_up_argument, store)
    ARGUMENT["value"] = then
    with pytest.raises(ActionFailed) as failure:
        _process(looks_up_argument, store)
    assert isinstance(failure.value.cause, NondeterminismError)


def test_a_journal_written_with_the_earlier_digest_still_replays() -> None:
    from flink_agents.runtime.durability.journal import _legacy_digest, function_id_of
    from flink_agents.stores.journal import JournalEntry

    store = InMemoryJournalStore()
    ARGUMENT["value"] = {1: "a"}
    earlier = JournalEntry("fan@0", 0, function_id_of(lookup_argument), _legacy_digest(({1: "a"},), {}),
                           '{"ok": "looked up earlier"}')  # an entry as the earlier release wrote it
    store.append("job", '"k"', 0, [earlier])
    assert _process(looks_up_argument, store).outputs == [{"k": "looked up earlier"}]
    assert CALLS[("lookup_argument", repr({1: "a"}))] == 0
