"""Fast engine tests that pin what single-line mutations of the runtime
broke unnoticed (issue 12): the replay check's argument digest, the retry
backoff schedule, one record at a time per key on the Flink path's runner,
memory rollback on every kind of failure, the default error strategy, a
store write that fails, and the default journal retention and prune
interval."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed, JournalUnavailable, NondeterminismError
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.stores.memory_store import InMemoryJournalStore
from flink_agents.stores.errors import JournalUnavailableError
from tests.support import host_runs

CALLS: Counter = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()


def _engine(agent: Agent, store: InMemoryJournalStore | None = None, **kwargs: Any) -> AgentEngine:
    return AgentEngine(AgentPlan.from_agent(agent), kwargs.pop("config", {}), job_id="job",
                       store=store or InMemoryJournalStore(), **kwargs)


def _process(engine: AgentEngine, values: List[Any], driver: LocalDriver | None = None) -> LocalDriver:
    driver = driver or LocalDriver()

    async def main() -> None:
        for value in values:
            await host_runs.process_async(engine, driver, "k", value)

    try:
        asyncio.run(main())
    finally:
        engine.close()
    return driver


# ---- the replay check compares arguments, not only the function ----------------------------

ARG = {"value": 1}


def price(item: int) -> float:
    CALLS[("price", item)] += 1
    return 9.5 * item


def priced(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=ctx.durable_execute(price, ARG["value"])))


class Crash(BaseException):
    """A simulated process crash."""


def crash_once() -> None:
    if not CALLS["crashed"]:
        CALLS["crashed"] += 1
        raise Crash("process died")


def priced_then_crash(event: Event, ctx: Any) -> None:
    value = ctx.durable_execute(price, ARG["value"])
    ctx.durable_execute(crash_once)  # its start commits price's result
    ctx.send_event(OutputEvent(output=value))


def test_a_replay_calling_the_same_function_with_other_arguments_is_a_nondeterminism_error() -> None:
    store = InMemoryJournalStore()
    agent = Agent().add_action("priced", [InputEvent], priced_then_crash)
    ARG["value"] = 1
    with pytest.raises(Crash):
        _process(_engine(agent, store), ["r"])
    ARG["value"] = 2  # the replay asks for another item at the same position
    with pytest.raises(ActionFailed) as failure:
        _process(_engine(agent, store), ["r"])
    assert isinstance(failure.value.cause, NondeterminismError)
    assert "price" in str(failure.value.cause) and "args" in str(failure.value.cause)
    assert CALLS == Counter({("price", 1): 1, "crashed": 1})  # never called with 2, never 1 again


# ---- retry backoff: 0.1 s, doubling, capped -------------------------------------------------


def _always_failing_until(succeed_at: int) -> Any:
    attempts = Counter()

    def flaky(event: Event, ctx: Any) -> None:
        attempts["n"] += 1
        if attempts["n"] < succeed_at:
            raise ConnectionError(f"attempt {attempts['n']}")
        ctx.send_event(OutputEvent(output=attempts["n"]))

    return flaky


def _slept_with(options: Dict[str, Any], succeed_at: int) -> List[float]:
    slept: List[float] = []

    async def sleep(delay_s: float) -> None:
        slept.append(delay_s)

    agent = Agent().add_action("flaky", [InputEvent], _always_failing_until(succeed_at),
                               error_strategy="retry", **options)
    driver = _process(_engine(agent, sleep=sleep), ["r"])
    assert driver.outputs == [{"k": succeed_at}]
    return slept


def _within(slept: List[float], ceilings: List[float]) -> bool:
    """Each wait drawn with full jitter below its ceiling (flink_agents._backoff)."""
    return len(slept) == len(ceilings) and all(0 <= s <= c + 1e-9 for s, c in zip(slept, ceilings))


def test_the_default_backoff_starts_at_a_tenth_of_a_second_and_doubles() -> None:
    slept = _slept_with({"error_retry.max_attempts": 4}, succeed_at=4)
    assert _within(slept, [0.1, 0.2, 0.4]), slept


def test_the_backoff_is_capped_at_max_backoff() -> None:
    options = {"error_retry.max_attempts": 6, "error_retry.initial_backoff_s": 2.0}
    slept = _slept_with(options, succeed_at=6)
    assert _within(slept, [2.0, 4.0, 8.0, 10.0, 10.0]), slept
    options = {"error_retry.max_attempts": 5, "error_retry.initial_backoff_s": 0.1, "error_retry.max_backoff_s": 0.3}
    slept = _slept_with(options, succeed_at=5)
    assert _within(slept, [0.1, 0.2, 0.3, 0.3]), slept


def test_fail_is_the_strategy_when_none_is_configured() -> None:
    agent = Agent().add_action("flaky", [InputEvent], _always_failing_until(2))
    with pytest.raises(ActionFailed, match="attempt 1"):
        _process(_engine(agent), ["r"])


# ---- the Flink path's runner: one record of a key at a time, in order -----------------------

RUNNING: Dict[str, int] = {"now": 0, "max": 0}
STARTED: List[Any] = []


async def slow_counting(event: Event, ctx: Any) -> None:
    RUNNING["now"] += 1
    RUNNING["max"] = max(RUNNING["max"], RUNNING["now"])
    STARTED.append(event.input)
    await asyncio.sleep(0.05)
    RUNNING["now"] -= 1
    seen = (ctx.short_term_memory.get("seen") or []) + [event.input]
    ctx.short_term_memory.set("seen", seen)
    ctx.send_event(OutputEvent(output=seen))


def test_a_record_of_a_busy_key_waits_for_the_running_one_on_the_key_runner() -> None:
    RUNNING.update(now=0, max=0)
    STARTED.clear()
    engine = _engine(Agent().add_action("slow", [InputEvent], slow_counting))
    runner = KeyRunner(engine)
    try:
        state = KeyState(journal_id="job")
        for seq, value in enumerate(["a", "b", "c"]):
            state.pending.append(PendingRecord(seq, value))
            state.next_seq = seq + 1
            runner.submit("k", state)  # while "a" runs, "b" and "c" arrive
        assert runner.wait_for("k", timeout_s=10)
        completions = runner.take("k")
    finally:
        runner.close()
        engine.close()
    assert RUNNING["max"] == 1, "two records of one key ran at once"
    assert STARTED == ["a", "b", "c"]
    assert [c.seq for c in completions] == [0, 1, 2]
    assert [c.outputs for c in completions] == [[["a"]], [["a", "b"]], [["a", "b", "c"]]]


# ---- memory rollback: a failed record leaves short-term memory as it was ---------------------


def write_memory(event: Event, ctx: Any) -> None:
    ctx.short_term_memory.set("last", event.input)
    ctx.send_event(Step(note=event.input))


class Step(Event):
    note: Any = None


def fail_on_bad(event: Event, ctx: Any) -> None:
    if event.note == "bad":
        raise ValueError("bad record")
    ctx.send_event(OutputEvent(output=event.note))


async def hang_on_bad(event: Event, ctx: Any) -> None:
    if event.note == "bad":
        await asyncio.sleep(10)
    ctx.send_event(OutputEvent(output=event.note))


def _two_step_agent(second: Any, **config: Any) -> Agent:
    return (Agent().add_action("write", [InputEvent], write_memory)
            .add_action("second", [Step], second, **config))


@pytest.mark.parametrize("second,config", [
    (fail_on_bad, {"error_strategy": "skip"}),
    (hang_on_bad, {"error_strategy": "skip", "timeout_s": 0.05}),
], ids=["skip", "action_timeout"])
def test_a_skipped_record_leaves_memory_as_before_it(second: Any, config: Dict[str, Any]) -> None:
    driver = _process(_engine(_two_step_agent(second, **config)), ["good", "bad"])
    assert driver.outputs == [{"k": "good"}]
    assert [e["action"] for e in driver.errors] == ["second"]
    assert driver.states["k"].short_term_memory["last"] == "good"


def test_a_cancelled_run_leaves_memory_as_before_it() -> None:
    engine = _engine(_two_step_agent(hang_on_bad))
    driver = LocalDriver()

    async def main() -> None:
        await host_runs.process_async(engine, driver, "k", "good")
        task = asyncio.ensure_future(host_runs.process_async(engine, driver, "k", "bad"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
    finally:
        engine.close()
    assert driver.states["k"].short_term_memory["last"] == "good"


@pytest.mark.parametrize("config", [{}, {"error_strategy": "skip"}], ids=["fail", "skip"])
def test_on_the_key_runner_a_failed_record_hands_back_the_memory_before_it(config: Dict[str, Any]) -> None:
    engine = _engine(_two_step_agent(fail_on_bad, **config))
    runner = KeyRunner(engine)
    try:
        state = KeyState(journal_id="job")
        for seq, value in enumerate(["good", "bad"]):
            state.pending.append(PendingRecord(seq, value))
            state.next_seq = seq + 1
        runner.submit("k", state)
        assert runner.wait_for("k", timeout_s=10)
        good, bad = runner.take("k")
    finally:
        runner.close()
        engine.close()
    assert good.failure is None and good.short_term_memory["last"] == "good"
    assert bad.short_term_memory["last"] == "good"  # not "bad": the record's writes rolled back
    if config:
        assert bad.failure is None and [e["action"] for e in bad.errors] == ["second"]
    else:
        assert isinstance(bad.failure, ActionFailed)


# ---- a store write that fails with an ordinary exception ------------------------------------


def two_calls(event: Event, ctx: Any) -> None:
    first = ctx.durable_execute(price, 1)
    second = ctx.durable_execute(price, 2)  # its start commits the first result
    ctx.send_event(OutputEvent(output=first + second))


def test_a_failing_store_write_fails_the_record_and_starts_no_further_call() -> None:
    store = InMemoryJournalStore()

    def disk_full(entries: Any) -> None:
        raise OSError(28, "No space left on device")

    store.before_append = disk_full
    with pytest.raises(ActionFailed) as failure:
        _process(_engine(Agent().add_action("two", [InputEvent], two_calls), store), ["r"])
    # Internal: the store's error, wrapped so that no except Exception in an
    # action could swallow it.
    cause = failure.value.cause
    assert isinstance(cause, JournalUnavailable) and not isinstance(cause, Exception)
    assert isinstance(cause.__cause__, OSError) and cause.__cause__.errno == 28
    assert CALLS == Counter({("price", 1): 1})  # the second call did not start
    assert store.count_entries() == 0

    # The store is back: the key's next attempt (a restart) runs the record.
    store.before_append = None
    driver = _process(_engine(Agent().add_action("two", [InputEvent], two_calls), store), ["r"])
    assert driver.outputs == [{"k": 28.5}]


# ---- journal retention (30 min) and prune interval (60 s) by default -------------------------


def test_the_journal_keeps_finished_runs_thirty_minutes_and_prunes_at_most_once_a_minute() -> None:
    now = [1_000.0]
    store = InMemoryJournalStore(clock=lambda: now[0])
    engine = _engine(Agent().add_action("priced", [InputEvent], priced), store, clock=lambda: now[0])
    driver = LocalDriver()
    ARG["value"] = 1

    def record_at(t: float) -> None:
        now[0] = t
        host_runs.process(engine, driver, "k", "r")

    try:
        record_at(1_000.0)  # record 0 finishes at t=1000
        assert store.count_entries() > 0
        entries = store.count_entries()
        record_at(2_799.0)  # 1799 s later: within retention, not pruned
        assert store.count_entries() == 2 * entries
        record_at(2_830.0)  # retention passed, but the last prune ran 31 s ago: none yet
        assert store.count_entries() == 3 * entries
        record_at(2_860.0)  # 61 s after the prune at 2799: record 0 (t=1000) is pruned
        assert store.count_entries() == 3 * entries
    finally:
        engine.close()


class _FailingPruneStore(InMemoryJournalStore):
    def prune(self, finished_before_s: float, journal_id: str) -> int:
        raise OSError(5, "Input/output error")


def test_a_failing_prune_is_logged_and_counted_and_the_record_that_triggered_it_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1_000.0]
    store = _FailingPruneStore(clock=lambda: now[0])
    engine = _engine(Agent().add_action("priced", [InputEvent], priced), store, clock=lambda: now[0])
    ARG["value"] = 1
    driver = LocalDriver()

    async def three_records() -> None:
        for _ in range(3):  # a minute apart: each one's prune is due, fails, and is tried again
            now[0] += 61
            await host_runs.process_async(engine, driver, "k", "r")

    try:
        asyncio.run(three_records())
    finally:
        engine.close()

    assert driver.outputs == [{"k": 9.5}] * 3 and driver.errors == []
    assert engine.counters.prune_failures == 3
    assert [r.levelname for r in caplog.records if "pruning the journal failed" in r.getMessage()] == ["WARNING"] * 3


# ---- all or nothing per record, for outputs as for memory (issue 13.1) ------------------------


def output_then_step(event: Event, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=f"early {event.input}"))
    ctx.send_event(Step(note=event.input))


@pytest.mark.parametrize("host", ["local", "key_runner"])
@pytest.mark.parametrize("strategy", ["fail", "skip"])
def test_a_failing_record_emits_none_of_its_outputs_on_either_host(host: str, strategy: str) -> None:
    """The first action sends an output, the second raises: the record emits
    nothing (its error record under skip), on the local runner's path and on
    the Flink path's runner alike."""
    agent = (Agent().add_action("first", [InputEvent], output_then_step)
             .add_action("second", [Step], fail_on_bad, error_strategy=strategy))
    engine = _engine(agent)
    if host == "local":
        driver = LocalDriver()
        try:
            if strategy == "fail":
                with pytest.raises(ActionFailed):
                    host_runs.process(engine, driver, "k", "bad")
            else:
                host_runs.process(engine, driver, "k", "bad")
            host_runs.process(engine, driver, "k2", "good")
        finally:
            engine.close()
        outputs, errors = driver.outputs, driver.errors
    else:
        runner = KeyRunner(engine)
        try:
            for key, value in (("k", "bad"), ("k2", "good")):
                state = KeyState(journal_id="job", next_seq=1, pending=[PendingRecord(0, value)])
                runner.submit(key, state)
                assert runner.wait_for(key, timeout_s=10)
            bad, good = runner.take("k")[0], runner.take("k2")[0]
        finally:
            runner.close()
            engine.close()
        assert isinstance(bad.failure, ActionFailed) if strategy == "fail" else bad.failure is None
        outputs = [{"k": o} for o in bad.outputs] + [{"k2": o} for o in good.outputs]
        errors = bad.errors
    assert outputs == [{"k2": "early good"}, {"k2": "good"}]
    assert [e["action"] for e in errors] == (["second"] if strategy == "skip" else [])


# ---- store failures are internal: no action can swallow them (issue 13.4) -----------------------


def swallowing(event: Event, ctx: Any) -> None:
    """Wraps its journaled calls in except Exception, as user code does."""
    try:
        ctx.durable_execute(price, 1)
        ctx.durable_execute(price, 2)  # its start commits the first result: the journal is locked
    except Exception:  # noqa: BLE001 - the point of the test
        pass
    ctx.send_event(OutputEvent(output="went on"))


@pytest.mark.parametrize("strategy", ["fail", "retry", "skip"])
def test_a_locked_sqlite_journal_fails_the_record_even_inside_except_exception(tmp_path: Any, strategy: str) -> None:
    import sqlite3

    from flink_agents.stores import StoreRetry
    from flink_agents.stores.sqlite_store import SQLiteJournalStore

    path = tmp_path / "journal.db"
    store = SQLiteJournalStore(path, busy_timeout_ms=50, retry=StoreRetry(timeout_s=0.2))  # the lock outlasts it
    assert store.count_entries() == 0  # the file exists, in WAL mode: reads go on under the lock
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another connection holds the write lock
    agent = Agent().add_action("swallowing", [InputEvent], swallowing, error_strategy=strategy,
                               **{"error_retry.initial_backoff_s": 0.001})
    engine = _engine(agent, store)
    driver = LocalDriver()
    try:
        with pytest.raises(ActionFailed) as failure:
            host_runs.process(engine, driver, "k", "r")
    finally:
        engine.close()
        other.rollback()
        other.close()
        store.close()
    assert isinstance(failure.value.cause, JournalUnavailable)
    store_error = failure.value.cause.__cause__  # the store's own type, naming the operation and run
    assert isinstance(store_error, JournalUnavailableError) and store_error.operation == "append"
    assert isinstance(store_error.__cause__, sqlite3.OperationalError)
    assert driver.outputs == [] and driver.errors == []
    assert CALLS == Counter({("price", 1): 1})  # nothing built on the result that was not durable


UNWOUND: List[int] = []


async def _slow_or_failing(event: InputEvent, ctx: Any) -> None:
    n = event.input["n"]
    if n == 3:
        raise ValueError("boom")
    try:
        await asyncio.sleep(5)
        ctx.send_event(OutputEvent(output=n))
    finally:
        UNWOUND.append(n)  # a user's cleanup (closing a client, releasing a lock)


def test_when_a_record_fails_the_runs_still_in_flight_unwind_on_their_loop(caplog: pytest.LogCaptureFixture) -> None:
    import gc

    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    UNWOUND.clear()
    agent = Agent().add_action("act", [InputEvent], _slow_or_failing)
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.from_list([{"key": f"k{n}", "value": {"n": n}} for n in range(8)]).apply(agent).to_list()

    with caplog.at_level(logging.ERROR, logger="asyncio"), pytest.raises(ActionFailed, match="boom"):
        env.execute()
    gc.collect()

    # Every other run was in flight: each was cancelled and ran its finally
    # block before execute() returned, not later in the garbage collector.
    assert sorted(UNWOUND) == [0, 1, 2, 4, 5, 6, 7]
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
