"""``durable_execute(..., reconciler=...)`` (Flink Agents 0.3.1): a call with
a reconciler commits a "started" mark before it runs; a crash after that
mark and before the call's outcome was journaled makes the replay ask the
reconciler instead of calling again, and journal its answer as the call's
outcome. Driven on the production local path (``host_runs``) over a store
whose hooks simulate the crash.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.durability.call_started import is_started
from flink_agents.runtime.durability.ids import key_text
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.journal import JournalEntry
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs

CALLS: Counter = Counter()  # what really ran, across engines
PAYMENTS: Dict[str, str] = {}  # the outside system: order id -> payment id
ENGINES: List[AgentEngine] = []  # the engines of the test, for their counters


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing may catch it)."""


@pytest.fixture(autouse=True)
def _reset():
    CALLS.clear()
    PAYMENTS.clear()
    ENGINES.clear()
    yield
    CALLS.clear()
    PAYMENTS.clear()


def submit_payment(order: str) -> str:
    CALLS["submit"] += 1
    PAYMENTS[order] = f"pay-{order}-{CALLS['submit']}"
    return PAYMENTS[order]


def _found_payment(order: str) -> Callable[[], str]:
    """A reconciler: the payment the outside system holds for ``order``."""

    def reconcile() -> str:
        CALLS["reconcile"] += 1
        if order not in PAYMENTS:
            raise LookupError(f"no payment for {order}")
        return PAYMENTS[order]

    return reconcile


def _payment_agent(mode: str, reconciler: Callable[[str], Callable[[], Any]] | None = _found_payment,
                   catch: bool = False, **options: Any) -> Agent:
    """One action paying for the record's order through a durable call
    (``mode``: ``sync`` or ``async``), emitting the payment id (or, with
    ``catch``, the error the call raised)."""

    def kwargs(order: str) -> Dict[str, Any]:
        return {} if reconciler is None else {"reconciler": reconciler(order)}

    def pay(event: InputEvent, ctx: Any) -> None:
        try:
            paid = ctx.durable_execute(submit_payment, event.input, **kwargs(event.input))
        except LookupError as exc:
            if not catch:
                raise
            paid = f"failed: {exc}"
        ctx.send_event(OutputEvent(output=paid))

    async def pay_async(event: InputEvent, ctx: Any) -> None:
        try:
            paid = await ctx.durable_execute_async(submit_payment, event.input, **kwargs(event.input))
        except LookupError as exc:
            if not catch:
                raise
            paid = f"failed: {exc}"
        ctx.send_event(OutputEvent(output=paid))

    agent = Agent()
    agent.add_action("pay", [InputEvent], pay if mode == "sync" else pay_async, **options)
    return agent


def _process(store: InMemoryJournalStore, agent: Agent, value: Any = "o1",
             config: Dict[str, Any] | None = None) -> LocalDriver:
    engine = AgentEngine(AgentPlan.from_agent(agent), dict(config or {}), job_id="job", store=store)
    ENGINES.append(engine)
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, "key", value)
    finally:
        engine.close()  # the store was passed in: it stays open
    return driver


def _call_entries(store: InMemoryJournalStore) -> List[JournalEntry]:
    """The journaled calls of the record's run (its key ``"key"``, seq 0)."""
    return [e for e in store.load_run("job", key_text("key"), 0).values() if e.ordinal >= 0]


def _crash_before_the_outcome(store: InMemoryJournalStore) -> None:
    """Crash at the write that would carry the payment call's outcome:
    the call ran (the payment exists outside), its started mark is durable,
    its result is lost."""

    def crash(entries: List[JournalEntry]) -> None:
        if any(e.ordinal == 0 and not is_started(e) for e in entries):
            raise Crash("crash before the call's outcome was written")

    store.before_append = crash


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_with_a_reconciler_runs_once_and_leaves_no_mark(mode: str):
    store = InMemoryJournalStore()
    driver = _process(store, _payment_agent(mode))
    assert driver.outputs == [{"key": "pay-o1-1"}]
    assert CALLS == Counter({"submit": 1})  # no failover: the reconciler is not asked
    calls = _call_entries(store)
    assert len(calls) == 1 and not is_started(calls[0])  # the outcome replaced the mark


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_started_mark_costs_at_most_one_write_and_none_without_a_reconciler(mode: str):
    without, with_reconciler = InMemoryJournalStore(), InMemoryJournalStore()
    _process(without, _payment_agent(mode, reconciler=None))
    _process(with_reconciler, _payment_agent(mode))
    assert without.writes == 1  # the run end, with the call's result
    assert with_reconciler.writes == 2  # the mark before the call, then the run end


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_after_a_crash_between_mark_and_outcome_the_reconciler_answers_once_and_the_call_does_not_repeat(mode: str):
    store = InMemoryJournalStore()
    _crash_before_the_outcome(store)
    with pytest.raises(Crash):
        _process(store, _payment_agent(mode))
    store.before_append = None
    (mark,) = _call_entries(store)
    assert is_started(mark) and mark.function_id.endswith(":submit_payment")
    assert CALLS == Counter({"submit": 1}) and PAYMENTS == {"o1": "pay-o1-1"}

    recovered = _process(store, _payment_agent(mode))
    assert recovered.outputs == [{"key": "pay-o1-1"}]  # what the outside system holds
    assert CALLS == Counter({"submit": 1, "reconcile": 1})  # not paid twice; asked exactly once
    assert ENGINES[-1].counters.calls_reconciled == 1 and ENGINES[-1].counters.calls_executed == 0
    (outcome,) = _call_entries(store)
    assert not is_started(outcome)  # the reconciler's answer is journaled as the call's result

    again = _process(store, _payment_agent(mode))  # a later replay reads the journal only
    assert again.outputs == [{"key": "pay-o1-1"}]
    assert CALLS == Counter({"submit": 1, "reconcile": 1})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_reconciler_asked_is_the_one_the_replaying_action_passes(mode: str):
    store = InMemoryJournalStore()
    _crash_before_the_outcome(store)
    with pytest.raises(Crash):
        _process(store, _payment_agent(mode))
    store.before_append = None

    def audited(order: str) -> Callable[[], str]:
        return lambda: f"audited-{order}"

    recovered = _process(store, _payment_agent(mode, reconciler=audited))
    assert recovered.outputs == [{"key": "audited-o1"}]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_without_a_reconciler_on_the_replay_the_started_call_runs_again(mode: str):
    store = InMemoryJournalStore()
    _crash_before_the_outcome(store)
    with pytest.raises(Crash):
        _process(store, _payment_agent(mode))
    store.before_append = None

    recovered = _process(store, _payment_agent(mode, reconciler=None))
    assert recovered.outputs == [{"key": "pay-o1-2"}]
    assert CALLS == Counter({"submit": 2})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_reconciler_error_surfaces_naming_the_call(mode: str):
    store = InMemoryJournalStore()
    _crash_before_the_outcome(store)
    with pytest.raises(Crash):
        _process(store, _payment_agent(mode))
    store.before_append = None
    PAYMENTS.clear()  # the outside system lost it: the reconciler cannot tell

    with pytest.raises(ActionFailed) as failed:
        _process(store, _payment_agent(mode))
    cause = failed.value.cause
    assert isinstance(cause, LookupError) and str(cause) == "no payment for o1"
    note = " ".join(getattr(cause, "__notes__", []))
    assert "reconciler of durable call" in note and "submit_payment at pay@0 #0" in note
    assert CALLS == Counter({"submit": 1, "reconcile": 1})  # the call itself did not run again


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failure_the_reconciler_raises_is_journaled_as_the_calls_and_replayed(mode: str):
    store = InMemoryJournalStore()
    _crash_before_the_outcome(store)
    with pytest.raises(Crash):
        _process(store, _payment_agent(mode, catch=True))
    store.before_append = None
    PAYMENTS.clear()

    recovered = _process(store, _payment_agent(mode, catch=True))
    again = _process(store, _payment_agent(mode, catch=True))
    assert recovered.outputs == again.outputs == [{"key": "failed: no payment for o1"}]
    assert CALLS == Counter({"submit": 1, "reconcile": 1})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_retried_step_runs_a_call_that_failed_in_this_process_again_without_asking_the_reconciler(mode: str):
    failures = Counter()

    def flaky_submit(order: str) -> str:
        CALLS["submit"] += 1
        failures[order] += 1
        if failures[order] == 1:
            raise LookupError("gateway timeout")
        return f"pay-{order}"

    def pay(event: InputEvent, ctx: Any) -> None:
        ctx.send_event(OutputEvent(output=ctx.durable_execute(flaky_submit, event.input, reconciler=_found_payment(event.input))))

    async def pay_async(event: InputEvent, ctx: Any) -> None:
        paid = await ctx.durable_execute_async(flaky_submit, event.input, reconciler=_found_payment(event.input))
        ctx.send_event(OutputEvent(output=paid))

    agent = Agent()
    agent.add_action("pay", [InputEvent], pay if mode == "sync" else pay_async, error_strategy="retry",
                     **{"error_retry.initial_backoff_s": 0.001})
    assert _process(InMemoryJournalStore(), agent).outputs == [{"key": "pay-o1"}]
    assert CALLS == Counter({"submit": 2})  # this process saw the failure: no reconciling


@pytest.mark.parametrize("reconciler", [lambda order: None, "not callable"])
def test_a_reconciler_that_is_not_a_zero_argument_callable_is_refused_on_the_first_run(reconciler: Any):
    def pay(event: InputEvent, ctx: Any) -> None:
        ctx.durable_execute(submit_payment, event.input, reconciler=reconciler)

    with pytest.raises(ActionFailed) as failed:
        _process(InMemoryJournalStore(), Agent().add_action("pay", [InputEvent], pay))
    assert isinstance(failed.value.cause, TypeError)
    assert "submit_payment" in str(failed.value.cause) and "reconciler" in str(failed.value.cause)
    assert CALLS["submit"] == 0


def test_a_follower_sees_the_call_start_and_after_a_failover_the_reconciled_result():
    store = InMemoryJournalStore()
    _crash_before_the_outcome(store)
    with pytest.raises(Crash):
        _process(store, _payment_agent("sync"), config={"progress.enabled": True})
    store.before_append = None
    recovered = _process(store, _payment_agent("sync"), config={"progress.enabled": True})

    calls = [(r["kind"], r.get("result"), bool(r.get("replayed"))) for r in recovered.progress
             if r["kind"] in ("call_started", "call_result")]
    assert calls == [("call_started", None, True), ("call_result", "pay-o1-1", False)]
    started = next(r for r in recovered.progress if r["kind"] == "call_started")
    assert started["function"].endswith(":submit_payment") and started["step"] == "pay@0"


def test_a_reconciled_call_is_one_span_and_its_mark_none(monkeypatch: pytest.MonkeyPatch):
    from flink_agents.runtime.features.otel_export import flush_all
    from tests.support.otlp_receiver import OtlpReceiver

    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    with OtlpReceiver() as receiver:
        config = {"tracing.exporter": "otlp", "tracing.otlp.endpoint": receiver.endpoint}
        store = InMemoryJournalStore()
        _crash_before_the_outcome(store)
        with pytest.raises(Crash):
            _process(store, _payment_agent("sync"), config=config)
        store.before_append = None
        _process(store, _payment_agent("sync"), config=config)
        assert flush_all(10)
        calls = [s for s in receiver.spans if s.attributes.get("flink_agents.step") == "pay@0"
                 and s.attributes.get("flink_agents.ordinal") == 0]
    assert len(calls) == 1 and calls[0].end_ns > calls[0].start_ns


def test_a_reconciler_answer_the_journal_cannot_keep_fails_naming_the_reconciler_and_the_call():
    store = InMemoryJournalStore()
    _crash_before_the_outcome(store)
    with pytest.raises(Crash):
        _process(store, _payment_agent("sync"))
    store.before_append = None

    with pytest.raises(ActionFailed) as failed:
        _process(store, _payment_agent("sync", reconciler=lambda order: lambda: object()))
    cause = failed.value.cause
    assert isinstance(cause, TypeError)
    assert str(cause).startswith("the reconciler of durable call ") and "submit_payment at pay@0 #0" in str(cause)
    (mark,) = _call_entries(store)
    assert is_started(mark)  # nothing was journaled in its place: a fixed reconciler is asked again
