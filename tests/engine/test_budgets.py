"""Budgets (``runtime.features.budgets``; docs/operations.md, "Budgets"):
per record, per key over a window (keyed state), per job (a share per
subtask), checked before each model call that would run, on the production
path (the host core over a ``LocalDriver``), usage taken from the journal."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed, BudgetExceeded
from flink_agents.runtime.execution.state import KeyState
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs
from tests.support.framework_runs import Crash, crash_at_write, disarm

# Per call: a "big" record's calls use 60 + 40 tokens, the others 6 + 4.
PRICES = {"usage.prices": {"m-1": {"input": 1.0, "output": 1.0}}}  # USD per million: 1e-6 per token
CALLS: Counter = Counter()  # provider calls by record text


class TokenModel(BaseChatModelConnection):
    """Answers ``ok``, reporting 100 tokens for a text starting ``big``, else 10."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        text = messages[0].content
        CALLS[text] += 1
        prompt, completion = (60, 40) if text.startswith("big") else (6, 4)
        return ChatMessage(role=MessageRole.ASSISTANT, content="ok", extra_args={
            "model_name": "m-1", "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


class Setup(BaseChatModelSetup):
    pass


def _ask(text: str) -> ChatRequestEvent:
    return ChatRequestEvent(model="model", messages=[ChatMessage(role=MessageRole.USER, content=text)])


def _start(event: InputEvent, ctx: Any) -> None:
    ctx.sensory_memory.set("calls", 1)
    ctx.send_event(_ask(event.input["text"]))


def _next(event: ChatResponseEvent, ctx: Any) -> None:
    """Asks again until the record's ``calls`` model calls were made."""
    record = ctx.sensory_memory.get("record")
    made = ctx.sensory_memory.get("calls")
    if made < record["calls"]:
        ctx.sensory_memory.set("calls", made + 1)
        ctx.send_event(_ask(record["text"]))
    else:
        ctx.send_event(OutputEvent(output=f"{record['text']}: {made} calls"))


def _remember(event: InputEvent, ctx: Any) -> None:
    ctx.sensory_memory.set("record", event.input)


def _agent() -> Agent:
    agent = Agent()
    agent.add_action("remember", [InputEvent], _remember)
    agent.add_action("start", [InputEvent], _start)
    agent.add_action("next", [ChatResponseEvent], _next)
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=TokenModel))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=Setup, connection="conn"))
    return agent


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    CALLS.clear()


def _engine(config: Dict[str, Any], store: InMemoryJournalStore | None = None, now: List[float] | None = None,
            parallelism: int = 1) -> AgentEngine:
    clock = (lambda: now[0]) if now is not None else None
    return AgentEngine(AgentPlan.from_agent(_agent()), {"error_strategy": "skip", **config}, job_id="job",
                       store=store or InMemoryJournalStore(), clock=clock, parallelism=parallelism)


def _run(engine: AgentEngine, records: List[Any], driver: LocalDriver | None = None) -> LocalDriver:
    driver = driver or LocalDriver()
    host_runs.run_records(engine, driver, records)
    return driver


def _rec(text: str, calls: int = 1) -> Dict[str, Any]:
    return {"text": text, "calls": calls}


def _refusals(engine: AgentEngine) -> Dict[str, Any]:
    return {name: value for name, value in engine.counters.metrics.snapshot().items() if "budgetRefusals" in name}


def test_a_record_over_its_model_call_budget_ends_on_the_error_stream_naming_the_budget() -> None:
    engine = _engine({"budget.record.model_calls": 2})
    driver = _run(engine, [("a", _rec("a", 2)), ("b", _rec("b", 3))])
    assert driver.outputs == [{"a": "a: 2 calls"}]  # b's output is not emitted, not truncated
    (error,) = driver.errors
    assert (error["key"], error["seq"], error["error_type"]) == ("b", 0, "BudgetExceeded")
    assert "budget budget.record.model_calls exceeded: 2 used of 2" in error["error_message"]
    assert "key 'b', record #0" in error["error_message"]
    assert CALLS == {"a": 2, "b": 2}  # the refused call never reached the provider
    assert error["attempts"] == 1  # terminal: not retried
    assert _refusals(engine) == {"budgetRefusals": 1, "budget.budget.record.model_calls.budgetRefusals": 1}


def test_a_record_over_its_token_budget_is_refused_at_its_next_call() -> None:
    engine = _engine({"budget.record.tokens": 150})
    driver = _run(engine, [("a", _rec("big-a", 2)), ("b", _rec("big-b", 3)), ("c", _rec("c", 3))])
    # 100 used < 150: the second call runs (and overshoots by one call); at 200 the third is refused.
    # Keys run concurrently: their outputs may come in either order.
    assert sorted(driver.outputs, key=lambda output: list(output)) == [{"a": "big-a: 2 calls"}, {"c": "c: 3 calls"}]
    (error,) = driver.errors
    assert error["key"] == "b" and "budget budget.record.tokens exceeded: 200 used of 150" in error["error_message"]
    assert CALLS["big-b"] == 2


def test_a_record_over_its_cost_budget_is_refused_priced_by_the_price_table() -> None:
    engine = _engine({"budget.record.cost_usd": 0.00015, **PRICES})
    driver = _run(engine, [("a", _rec("big-a", 3)), ("b", _rec("b", 3))])
    assert driver.outputs == [{"b": "b: 3 calls"}]
    (error,) = driver.errors
    assert "budget budget.record.cost_usd exceeded: 0.0002 used of 0.00015" in error["error_message"]


def test_a_cost_budget_without_prices_fails_at_start_naming_both_keys() -> None:
    with pytest.raises(ValueError, match=r"budget\.key\.cost_usd is set but usage\.prices"):
        _engine({"budget.key.cost_usd": 1.0})
    with pytest.raises(ValueError, match="budget.record.tokens"):
        _engine({"budget.record.tokens": 0})


def test_one_of_five_keys_over_its_token_budget_only_its_records_are_refused() -> None:
    now = [1_000.0]
    engine = _engine({"budget.key.tokens": 150, "budget.key.window_s": 3600}, now=now)
    keys = [f"k{i}" for i in range(5)]
    records = [(key, _rec(("big-" if key == "k3" else "") + f"{key}-{n}")) for n in range(3) for key in keys]
    driver = _run(engine, records)
    # k3: 100, then 200 (100 < 150 at its call), then refused at 200; the others use 10 per record.
    expected = [{key: f"{text}: 1 calls"} for key, value in records for text in [value["text"]]
                if value["text"] != "big-k3-2"]
    # Keys run concurrently: each key's outputs in its order; across keys any interleaving.
    def by_key(outputs: List[Dict[str, str]]) -> Dict[str, List[str]]:
        grouped: Dict[str, List[str]] = {}
        for output in outputs:
            for key, text in output.items():
                grouped.setdefault(key, []).append(text)
        return grouped

    assert by_key(driver.outputs) == by_key(expected)
    (error,) = driver.errors
    assert (error["key"], error["seq"], error["record"]) == ("k3", 2, _rec("big-k3-2"))
    assert "budget budget.key.tokens exceeded: 200 used of 150 (key 'k3' in its window of 3600 s" in (
        error["error_message"])
    assert {key: driver.load(key).budget["tokens"] for key in keys} == {"k0": 30, "k1": 30, "k2": 30,
                                                                        "k3": 200, "k4": 30}
    # The window ends: the key's budget is whole again.
    now[0] += 3600
    _run(engine, [("k3", _rec("big-k3-3"))], driver)
    assert driver.outputs[-1] == {"k3": "big-k3-3: 1 calls"}
    assert driver.load("k3").budget == {"v": 1, "start_ms": 4_600_000, "tokens": 100, "cost_usd": 0.0}


def test_a_keys_window_survives_its_keyed_state_round_trip_and_a_restore() -> None:
    now = [50.0]
    config = {"budget.key.tokens": 150}
    driver = _run(_engine(config, now=now), [("k", _rec("big-1")), ("k", _rec("big-2"))])
    text = driver.load("k").to_json()
    restored = KeyState.from_json(text)  # as a checkpoint holds it
    assert restored.budget == {"v": 1, "start_ms": 50_000, "tokens": 200, "cost_usd": 0.0}
    # A new job restored from it (another store, another engine) refuses the key's next record.
    fresh = LocalDriver()
    fresh.store("k", restored)
    driver = _run(_engine(config, now=now), [("k", _rec("big-3"))], fresh)
    assert driver.outputs == [] and driver.errors[0]["error_type"] == "BudgetExceeded"
    assert CALLS["big-3"] == 0
    # State of an earlier release (no budget field) reads as an empty window; without key budgets none is kept.
    assert KeyState.from_json(KeyState(journal_id="j").to_json()).budget == {}
    assert '"budget"' not in _run(_engine({"budget.record.tokens": 10_000}), [("k", _rec("x"))]).load("k").to_json()


def test_a_replay_after_a_crash_counts_each_journaled_call_once() -> None:
    """Crash after the second reply is durable: on restart the first two
    calls replay (never refused, counted as journaled, once) and the third
    runs: 200 < 250. Counted twice, it would be refused."""
    store = InMemoryJournalStore()
    config = {"budget.record.tokens": 250, "budget.key.tokens": 1_000}
    crash_at_write(store, "after_write", 3)  # writes: before call 1, before call 2, before call 3, the end
    with pytest.raises(Crash):
        _run(_engine(config, store), [("k", _rec("big", 3))])
    disarm(store, "after_write")
    assert CALLS["big"] == 2
    driver = _run(_engine(config, store), [("k", _rec("big", 3))])  # state restored to before the record
    assert driver.outputs == [{"k": "big: 3 calls"}] and driver.errors == []
    assert CALLS["big"] == 3
    assert driver.load("k").budget["tokens"] == 300


def test_the_job_budget_is_shared_between_subtasks_each_taking_its_share() -> None:
    config = {"budget.job.tokens": 300}
    first, second = _engine(config, parallelism=2), _engine(config, parallelism=2)
    one = LocalDriver()
    for key in "abc":  # one after another: records in flight count once they finished
        _run(first, [(key, _rec(f"big-{key}"))], one)
    two = _run(second, [("d", _rec("big-d"))])
    assert [list(o) for o in one.outputs] == [["a"], ["b"]] and [list(o) for o in two.outputs] == [["d"]]
    (error,) = one.errors
    assert error["key"] == "c"
    assert "budget budget.job.tokens exceeded: 200 used of 150 (this subtask's share, 1/2 of the job's" in (
        error["error_message"])
    assert first.budgets.job_used.tokens == 200 and second.budgets.job_used.tokens == 100


def test_under_fail_the_refusal_fails_the_record_naming_the_budget() -> None:
    engine = _engine({"budget.record.model_calls": 1, "error_strategy": "fail"})
    with pytest.raises(ActionFailed) as failed:
        _run(engine, [("a", _rec("a", 2))])
    assert isinstance(failed.value.cause, BudgetExceeded)
    assert failed.value.cause.budget == "budget.record.model_calls"
    assert (failed.value.cause.limit, failed.value.cause.used) == (1, 1)


def test_under_park_a_refused_record_waits_and_runs_on_after_the_budget_is_raised(tmp_path: Any) -> None:
    """The record parks (its key paused, nothing emitted); a restart with a
    larger budget and ``runs resume`` run it on, its first call replayed."""
    from tests.engine.test_run_control import Job, _cli, _controls

    journal = tmp_path / "journal.db"
    first = Job(journal, _agent(), error_strategy="park", **{"budget.record.model_calls": 1})
    try:
        first.send("p", _rec("p", 2))
        first.pump_until(lambda: any(c["action"] == "pause" for c in _controls(journal)))
        assert first.outputs() == [] and first.driver.errors == []
        assert [r.seq for r in first.driver.load("p").pending] == [0]
        (parked,) = _controls(journal)
        assert "budget.record.model_calls" in parked["outcome"]
        state = first.driver.load("p")
    finally:
        first.close()
    second = Job(journal, _agent(), error_strategy="park", **{"budget.record.model_calls": 2})
    try:
        second.driver.store("p", KeyState.from_json(state.to_json()))  # restored from a checkpoint
        _cli(journal, "resume", "--key", "p")
        second.host.resume("p")  # its pending record submitted, as after a restore
        second.pump_until(lambda: len(second.outputs()) == 1)
        assert second.outputs() == ["p: 2 calls"]
        assert CALLS["p"] == 2  # the first call replayed
    finally:
        second.close()
