"""Cancellation-safe writes (issue #7): a run, an action (its timeout, a
failing sibling in a task group) or a sub-agent call cancelled while its
journal write is in flight leaves journal and keyed state consistent; and the
action timeout option (``action.timeout_s``, per action ``timeout_s``).

The store holds one chosen write on its worker thread (a slow fsync) while the
test cancels across it. Checked after each scenario:

- consistency: the entries of a run in the store are exactly those its
  ``RunJournal`` believes journaled (none lost, none phantom), and the engine
  counted every store write;
- commit order: no write of a run started before the previous one returned;
- the key's next record runs normally, and a re-run of the cancelled record
  replays (does not repeat) the calls whose results landed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Tuple

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime import engine as engine_module
from flink_agents.runtime.durability import journal as journal_module
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.durability.journal import RunJournal
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.journal import COMPLETION, JournalEntry
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs
from tests.support.pythons import needs_task_group

CALLS: Counter = Counter()  # (function, argument) -> how often it really ran
FAILURES: Counter = Counter()  # name -> failures still to raise
HOLD_S = 0.4  # how long the held write takes


@pytest.fixture(autouse=True)
def _reset():
    CALLS.clear()
    FAILURES.clear()
    yield


class HoldingStore(InMemoryJournalStore):
    """An in-memory store that records every append's run and time span and
    holds (``before_append``) the first append that ``hold_when`` picks for
    ``HOLD_S`` seconds: a write that waits, as a database's does, so it says
    ``blocking_io`` and the runtime writes it on a worker thread."""

    blocking_io = True

    def __init__(self, hold_when: Callable[[List[JournalEntry]], bool] | None = None) -> None:
        super().__init__()
        self.spans: List[Tuple[Tuple[str, str, int], float, float]] = []
        self.entered = threading.Event()  # the held write started
        self.held_at = 0.0
        self._hold_when = hold_when
        self._held = False
        self._guard = threading.Lock()
        self.before_append = self._maybe_hold

    def _maybe_hold(self, entries: List[JournalEntry]) -> None:
        if self._hold_when is None or not self._hold_when(entries):
            return
        with self._guard:
            if self._held:
                return
            self._held = True
        self.held_at = time.monotonic()
        self.entered.set()
        time.sleep(HOLD_S)

    def append(self, journal_id: str, key: str, seq: int, entries: List[JournalEntry]) -> None:
        start = time.monotonic()
        try:
            super().append(journal_id, key, seq, entries)
        finally:
            self.spans.append(((journal_id, key, seq), start, time.monotonic()))


def result_of(function: str) -> Callable[[List[JournalEntry]], bool]:
    """Picks the write that carries a result of ``function``."""
    return lambda entries: any(e.function_id.endswith(":" + function) for e in entries)


@pytest.fixture
def journals(monkeypatch) -> List[RunJournal]:
    """Every ``RunJournal`` the engine and the sub-agent runner create."""
    made: List[RunJournal] = []

    class Tracked(RunJournal):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(engine_module, "RunJournal", Tracked)
    monkeypatch.setattr(journal_module, "RunJournal", Tracked)  # sub_agents imports it per call
    return made


def _run_key(journal: RunJournal) -> Tuple[str, str, int]:
    return journal._run


def assert_consistent(store: HoldingStore, journal: RunJournal) -> None:
    """The store holds exactly what ``journal`` believes journaled."""
    in_store = store.load_run(*_run_key(journal))
    believed = dict(journal._journaled)
    lost = sorted(set(in_store) - set(believed))
    phantom = sorted(set(believed) - set(in_store))
    assert not lost and not phantom, (
        f"run {_run_key(journal)}: in the store but not in the journal {lost}; "
        f"in the journal but not in the store {phantom}"
    )
    assert all(in_store[slot] == believed[slot] for slot in in_store)


def assert_all_consistent(store: HoldingStore, journals: List[RunJournal]) -> None:
    """``assert_consistent`` for the latest journal of each run (an earlier
    one, of a run that ran again, knows only its own writes)."""
    latest = {_run_key(journal): journal for journal in journals}
    for journal in latest.values():
        assert_consistent(store, journal)


def assert_commit_order(store: HoldingStore) -> None:
    """No write of a run started before its previous write returned."""
    by_run: Dict[Tuple[str, str, int], List[Tuple[float, float]]] = {}
    for run, start, end in store.spans:
        by_run.setdefault(run, []).append((start, end))
    for run, spans in by_run.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end, f"a write of run {run} started {end - start:.3f} s before the previous one returned"


async def until(flag: threading.Event, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not flag.is_set():
        assert time.monotonic() < deadline, "the held write never started"
        await asyncio.sleep(0.005)


def _engine(agent: Agent, store: HoldingStore, config: Dict[str, Any] | None = None) -> AgentEngine:
    return AgentEngine(AgentPlan.from_agent(agent), config or {}, job_id="job", store=store)


def _slots(store: HoldingStore, seq: int, journal_id: str = "job", key: str = '"k"') -> Dict[Tuple[str, int], JournalEntry]:
    return store.load_run(journal_id, key, seq)


# ---- journaled functions and actions ---------------------------------------------------------


async def call_a(v: int) -> int:
    CALLS[("a", v)] += 1
    return v * 10


async def call_b(x: int) -> int:
    CALLS[("b", x)] += 1
    return x + 1


async def fail_once(name: str) -> None:
    """A sibling that fails (without a journaled call) while the other's commit is in flight."""
    await asyncio.sleep(0.05)
    if FAILURES[name] > 0:
        FAILURES[name] -= 1
        raise ValueError(f"{name} failed")


async def two_calls(event: Event, ctx: Any) -> None:
    # The commit before call_b writes call_a's result: that write is held.
    x = await ctx.durable_execute_async(call_a, event.input)
    y = await ctx.durable_execute_async(call_b, x)
    ctx.send_event(OutputEvent(output=y))


async def fan_gather(event: Event, ctx: Any) -> None:
    x = await ctx.durable_execute_async(call_a, event.input)
    y, _ = await asyncio.gather(ctx.durable_execute_async(call_b, x), fail_once("sibling"))
    ctx.send_event(OutputEvent(output=y))


async def fan_task_group(event: Event, ctx: Any) -> None:
    x = await ctx.durable_execute_async(call_a, event.input)
    async with asyncio.TaskGroup() as group:  # a failing sibling cancels the other
        b = group.create_task(ctx.durable_execute_async(call_b, x))
        group.create_task(fail_once("sibling"))
    ctx.send_event(OutputEvent(output=b.result()))


# ---- a run cancelled mid-commit ----------------------------------------------------------------


def test_run_cancelled_mid_commit_leaves_journal_consistent_and_key_usable(journals):
    store = HoldingStore(result_of("call_a"))
    engine = _engine(Agent().add_action("two_calls", [InputEvent], two_calls), store)
    driver = LocalDriver()
    seen: Dict[str, Any] = {}

    async def main() -> None:
        task = asyncio.ensure_future(host_runs.process_async(engine, driver, "k", 1))
        await until(store.entered)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The cancelled run ends only once its write and bookkeeping both happened.
        seen["slots"] = dict(_slots(store, 0))
        seen["finished_after_s"] = time.monotonic() - store.held_at
        assert_consistent(store, journals[0])
        assert [r.seq for r in driver.states["k"].pending] == [0]  # left for the next run
        # The key's next record: the cancelled record 0 runs first (a re-run), then record 1.
        await host_runs.process_async(engine, driver, "k", 2)

    try:
        asyncio.run(main())
    finally:
        engine.close()
    assert ("two_calls@0", 0) in seen["slots"], f"call_a's result is not in the store: {seen['slots']}"
    assert seen["finished_after_s"] >= HOLD_S - 0.05
    assert driver.outputs == [{"k": 11}, {"k": 21}]
    # call_a's result landed before the cancellation took effect: the re-run replays it.
    assert CALLS == Counter({("a", 1): 1, ("b", 10): 1, ("a", 2): 1, ("b", 20): 1})
    assert [j._run for j in journals] == [("job", '"k"', 0), ("job", '"k"', 0), ("job", '"k"', 1)]
    assert_all_consistent(store, journals)
    assert_commit_order(store)
    assert engine.counters.journal_writes == store.writes
    assert driver.states["k"].pending == []


# ---- an action timeout fires mid-commit ------------------------------------------------------


def test_action_timeout_mid_commit_retries_with_a_consistent_journal(journals):
    store = HoldingStore(result_of("call_a"))
    agent = Agent().add_action(
        "two_calls", [InputEvent], two_calls, timeout_s=0.15, error_strategy="retry",
        **{"error_retry.initial_backoff_s": 0.001},
    )
    engine = _engine(agent, store)
    driver = LocalDriver()
    started = time.monotonic()

    async def main() -> None:
        await host_runs.process_async(engine, driver, "k", 1)
        seen_elapsed = time.monotonic() - started
        assert seen_elapsed >= HOLD_S - 0.05  # the first attempt ended once its write landed
        await host_runs.process_async(engine, driver, "k", 2)

    try:
        asyncio.run(main())
    finally:
        engine.close()
    assert driver.outputs == [{"k": 11}, {"k": 21}]
    assert engine.counters.action_retries == 1
    # The retry runs under the same step: call_a's result, which landed before
    # the timeout took effect, replays into it; only call_b runs again.
    assert CALLS == Counter({("a", 1): 1, ("b", 10): 1, ("a", 2): 1, ("b", 20): 1})
    slots = _slots(store, 0)
    assert {("two_calls@0", 0), ("two_calls@0", 1), ("two_calls@0", COMPLETION)} <= set(slots)
    assert not [s for s in slots if "#" in s[0]]
    assert_all_consistent(store, journals)
    assert_commit_order(store)
    assert engine.counters.journal_writes == store.writes


# ---- a failing sibling while the other's commit is in flight ---------------------------------


@pytest.mark.parametrize(
    "action", [fan_gather, pytest.param(fan_task_group, marks=needs_task_group)], ids=["gather", "task_group"]
)
def test_failing_sibling_mid_commit_retries(journals, action):
    FAILURES["sibling"] = 1
    store = HoldingStore(result_of("call_a"))
    agent = Agent().add_action(
        "fan", [InputEvent], action, error_strategy="retry", **{"error_retry.initial_backoff_s": 0.001}
    )
    engine = _engine(agent, store)
    driver = LocalDriver()

    async def main() -> None:
        await host_runs.process_async(engine, driver, "k", 1)
        await asyncio.sleep(0.05)  # a gather's orphan ends on its own
        await host_runs.process_async(engine, driver, "k", 2)

    try:
        asyncio.run(main())
    finally:
        engine.close()
    assert driver.outputs == [{"k": 11}, {"k": 21}]
    assert engine.counters.action_retries == 1
    slots = _slots(store, 0)
    # The first attempt's call_a result landed; call_b of the failed attempt
    # (an orphan with gather, cancelled with a task group) journaled nothing.
    # The retry replays call_a (same step) and runs call_b again in its
    # branch: the gather's first task, journaled at "fan@0/0".
    assert ("fan@0", 0) in slots and ("fan@0", 1) not in slots
    assert ("fan@0/0", 0) in slots
    assert not [s for s in slots if "#" in s[0]]
    assert_all_consistent(store, journals)
    assert_commit_order(store)
    assert engine.counters.journal_writes == store.writes


def test_failing_sibling_mid_commit_fails_then_the_rerun_replays(journals):
    FAILURES["sibling"] = 1
    store = HoldingStore(result_of("call_a"))
    engine = _engine(Agent().add_action("fan", [InputEvent], fan_gather), store)
    driver = LocalDriver()

    async def main() -> None:
        with pytest.raises(ActionFailed, match="sibling failed"):
            await host_runs.process_async(engine, driver, "k", 1)
        await asyncio.sleep(0.05)  # the orphan's call ends on its own
        assert_consistent(store, journals[0])
        assert [r.seq for r in driver.states["k"].pending] == [0]  # left for the next run
        # As after a restart: record 0 runs again, replaying call_a; then record 1.
        await host_runs.process_async(engine, driver, "k", 2)

    try:
        asyncio.run(main())
    finally:
        engine.close()
    assert driver.outputs == [{"k": 11}, {"k": 21}]
    # call_b ran twice for record 0: as the failed attempt's orphan (its result
    # not journaled) and in the re-run. call_a is replayed.
    assert CALLS == Counter({("a", 1): 1, ("b", 10): 2, ("a", 2): 1, ("b", 20): 1})
    assert_all_consistent(store, journals)
    assert_commit_order(store)
    assert engine.counters.journal_writes == store.writes


# ---- a sync action's commit while an orphan's write is in flight ----------------------------


class Go(Event):
    pass


class Fanned(Event):
    pass


def sync_double(x: int) -> int:
    CALLS[("double", x)] += 1
    return 2 * x


async def start(event: Event, ctx: Any) -> None:
    ctx.send_event(Go())  # its completion is what the orphan's commit writes (held)


async def fan_once(event: Event, ctx: Any) -> None:
    if FAILURES["fan_once"] > 0:
        await asyncio.gather(ctx.durable_execute_async(call_a, 1), fail_once("fan_once"))
    ctx.send_event(Fanned())


def sync_after(event: Event, ctx: Any) -> None:
    # Its commit (of fan_once's completion) runs on the event loop and must
    # not overtake the orphan's write of start's completion.
    ctx.send_event(OutputEvent(output=ctx.durable_execute(sync_double, 21)))


def test_sync_commit_waits_for_an_async_write_in_flight(journals):
    FAILURES["fan_once"] = 1
    store = HoldingStore(lambda entries: any(e.step == "start@0" and e.ordinal == COMPLETION for e in entries))
    agent = (
        Agent()
        .add_action("start", [InputEvent], start)
        .add_action("fan_once", [Go], fan_once, error_strategy="retry", **{"error_retry.initial_backoff_s": 0.001})
        .add_action("sync_after", [Fanned], sync_after)
    )
    engine = _engine(agent, store)
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, "k", 1)
    finally:
        engine.close()
    assert store.entered.is_set()
    assert driver.outputs == [{"k": 42}]
    assert_all_consistent(store, journals)
    assert_commit_order(store)


# ---- a cancelled sub-agent call --------------------------------------------------------------

CHILD_STORE: List[HoldingStore] = []


async def child_c1(v: str) -> str:
    CALLS[("c1", v)] += 1
    return v + "-1"


async def child_c2(v: str) -> str:
    CALLS[("c2", v)] += 1
    return v + "-2"


async def child_step(event: Event, ctx: Any) -> None:
    x = await ctx.durable_execute_async(child_c1, event.input)
    y = await ctx.durable_execute_async(child_c2, x)  # its commit writes c1's result: held
    ctx.send_event(OutputEvent(output=y))


async def after_child(outcome: Any) -> Any:
    CALLS[("after", str(outcome))] += 1
    return outcome


async def parent_step(event: Event, ctx: Any) -> None:
    handle = ctx.get_resource("child", ResourceType.AGENT)
    if event.input == "cancel":
        call = asyncio.ensure_future(handle.submit(ctx, event.input))
        await until(CHILD_STORE[0].entered)
        call.cancel()
        try:
            await call
            outcome: Any = "finished"
        except asyncio.CancelledError:
            outcome = "cancelled"
    else:
        outcome = (await handle.submit(ctx, event.input)).result
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(after_child, outcome)))


def test_cancelled_sub_agent_call_mid_commit(journals):
    store = HoldingStore(result_of("child_c1"))
    CHILD_STORE[:] = [store]
    child = Agent().add_action("child_step", [InputEvent], child_step)
    parent = Agent().add_action("parent_step", [InputEvent], parent_step)
    parent.add_resource("child", ResourceType.AGENT, child)
    engine = _engine(parent, store)
    driver = LocalDriver()

    async def main() -> None:
        await host_runs.process_async(engine, driver, "k", "cancel")
        await host_runs.process_async(engine, driver, "k", "next")

    try:
        asyncio.run(main())
    finally:
        engine.close()
    assert driver.outputs == [{"k": "cancelled"}, {"k": ["next-1-2"]}]
    children = [j for j in journals if "/" in j._run[0]]
    assert len(children) == 2
    # The cancelled child's write of c1's result landed and is journaled.
    assert (("child_step@0", 0)) in store.load_run(*children[0]._run)
    assert_all_consistent(store, journals)
    assert_commit_order(store)
    assert engine.counters.journal_writes == store.writes
    assert CALLS[("c2", "cancel-1")] == 0  # cancelled before it started


# ---- the action timeout option ---------------------------------------------------------------


async def sleeper(event: Event, ctx: Any) -> None:
    if event.input == "slow":
        await asyncio.sleep(5)
    ctx.send_event(OutputEvent(output=event.input))


def _run_values(agent: Agent, values: List[Any], config: Dict[str, Any] | None = None):
    store = HoldingStore()
    engine = _engine(agent, store, config)
    driver = LocalDriver()

    async def main() -> None:
        for value in values:
            await host_runs.process_async(engine, driver, "k", value)

    try:
        asyncio.run(main())
    finally:
        engine.close()
    return driver, engine


def test_action_timeout_skip_emits_an_error_record_naming_the_timeout():
    agent = Agent().add_action("sleeper", [InputEvent], sleeper, timeout_s=0.2, error_strategy="skip")
    started = time.monotonic()
    driver, engine = _run_values(agent, ["slow", "fast"])
    elapsed = time.monotonic() - started
    assert elapsed >= 0.2  # not before its timeout; that it cut the 5 s sleep short: no output for "slow"
    assert driver.outputs == [{"k": "fast"}]
    [error] = driver.errors
    assert error["error_type"] == "TimeoutError"
    assert error["action"] == "sleeper" and error["seq"] == 0 and error["attempts"] == 1
    for part in ("'sleeper'", "0.2 s", "key 'k'", "record #0"):
        assert part in error["error_message"], error["error_message"]
    assert engine.counters.records_skipped == 1


SLOW_ONCE: Counter = Counter()


async def slow_once(event: Event, ctx: Any) -> None:
    SLOW_ONCE["runs"] += 1
    if SLOW_ONCE["runs"] == 1:
        await asyncio.sleep(5)
    ctx.send_event(OutputEvent(output=await ctx.durable_execute_async(call_a, event.input)))


def test_action_timeout_retry_then_succeed_from_the_job_option():
    SLOW_ONCE.clear()
    agent = Agent().add_action("slow_once", [InputEvent], slow_once, error_strategy="retry",
                               **{"error_retry.initial_backoff_s": 0.001})
    started = time.monotonic()
    driver, engine = _run_values(agent, [3], {"action.timeout_s": 0.2})
    assert time.monotonic() - started >= 0.2
    assert SLOW_ONCE == Counter({"runs": 2})  # the 5 s first attempt was timed out and retried, not waited for
    assert driver.outputs == [{"k": 30}]
    assert engine.counters.action_retries == 1


def test_action_timeout_fail_names_action_key_record_and_timeout():
    agent = Agent().add_action("sleeper", [InputEvent], sleeper)
    with pytest.raises(ActionFailed) as failed:
        _run_values(agent, ["slow"], {"action.timeout_s": 0.1})
    assert isinstance(failed.value.cause, TimeoutError)
    assert "action 'sleeper' timed out after 0.1 s on key 'k', record #0" in str(failed.value)


@pytest.mark.parametrize("own", [5, None], ids=["longer", "off"])
def test_per_action_timeout_overrides_the_job_option(own):
    async def a_bit_slow(event: Event, ctx: Any) -> None:
        await asyncio.sleep(0.2)
        ctx.send_event(OutputEvent(output="done"))

    agent = Agent().add_action("a_bit_slow", [InputEvent], a_bit_slow, timeout_s=own)
    driver, _ = _run_values(agent, ["x"], {"action.timeout_s": 0.05})
    assert driver.outputs == [{"k": "done"}]


def test_an_actions_own_timeout_error_is_not_rewritten():
    async def upstream_timeout(event: Event, ctx: Any) -> None:
        raise TimeoutError("upstream did not answer")

    agent = Agent().add_action("upstream", [InputEvent], upstream_timeout, timeout_s=5, error_strategy="skip")
    driver, _ = _run_values(agent, ["x"])
    assert [e["error_message"] for e in driver.errors] == ["upstream did not answer"]


def sync_sleeper(event: Event, ctx: Any) -> None:
    time.sleep(0.2)
    ctx.send_event(OutputEvent(output="slept"))


def test_job_timeout_does_not_apply_to_a_sync_action():
    driver, _ = _run_values(Agent().add_action("sync_sleeper", [InputEvent], sync_sleeper), ["x"],
                            {"action.timeout_s": 0.05})
    assert driver.outputs == [{"k": "slept"}]


@pytest.mark.parametrize("option", ["timeout_s", "action.timeout_s"])
def test_per_action_timeout_on_a_sync_action_is_rejected(option):
    agent = Agent().add_action("sync_sleeper", [InputEvent], sync_sleeper, **{option: 1})
    with pytest.raises(ValueError, match="'sync_sleeper' is not async"):
        _run_values(agent, ["x"])


@pytest.mark.parametrize("value", [0, -1, "soon"])
def test_invalid_timeout_is_rejected(value):
    agent = Agent().add_action("sleeper", [InputEvent], sleeper, timeout_s=value)
    with pytest.raises(ValueError, match="timeout_s"):
        _run_values(agent, ["fast"])
