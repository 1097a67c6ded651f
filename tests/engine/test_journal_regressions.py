"""Regressions found in review: commits serialized across concurrent calls,
nested journals pruned with their parent, retries not replaying a failed
attempt, and the key runner closing before its loop ran."""

import asyncio
import time
from typing import Any, List
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.stores.memory_store import InMemoryJournalStore


class StepEvent(Event):
    n: int = 0


def _run_one(agent, store, key="k", seq=0, value="x", config=None):
    engine = AgentEngine(AgentPlan.from_agent(agent), config or {}, job_id="job", store=store)
    state = KeyState(journal_id="job")
    out, err = [], []
    try:
        asyncio.run(engine.run_one(key, state, PendingRecord(seq, value), out.append, err.append))
    finally:
        engine.close()
    return out, err, state


# ---- 1. concurrent journaled calls of one step start before the preceding commit landed
SEEN: List[Any] = []
STORE_REF: List[InMemoryJournalStore] = []


async def fa():
    SEEN.append(("fa", STORE_REF[0].count_entries()))
    return 1


async def fb():
    SEEN.append(("fb", STORE_REF[0].count_entries()))
    return 2


async def f0():
    return 0


async def first(event, ctx):
    await ctx.durable_execute_async(f0)
    ctx.send_event(StepEvent(n=1))


async def fan_out(event, ctx):
    r = await asyncio.gather(ctx.durable_execute_async(fa), ctx.durable_execute_async(fb))
    ctx.send_event(OutputEvent(output=r))


def test_concurrent_calls_wait_for_preceding_commit():
    SEEN.clear()
    store = InMemoryJournalStore()
    STORE_REF[:] = [store]
    appends = []

    def slow(entries):
        appends.append(len(entries))
        time.sleep(0.3)  # a slow fsync
    store.before_append = slow
    agent = Agent().add_action("first", [InputEvent], first).add_action("fan", [StepEvent], fan_out)
    _run_one(agent, store)
    # Contract: no call starts before everything buffered is committed.
    # f0's first commit writes nothing (empty buffer); then fa/fb must see
    # f0 + first's completion (2 entries) in the store.
    assert all(count >= 2 for _, count in SEEN), (SEEN, appends)


# ---- 2. a failed child's journal entries are never pruned
def child_step(event, ctx):
    ctx.durable_execute(lambda_free, 1)
    ctx.durable_execute(lambda_free, 2)
    raise ValueError("child fails")


def lambda_free(x):
    return x


async def call_child(event, ctx):
    h = ctx.get_resource("child", ResourceType.AGENT)
    res = await h.submit(ctx, "hi")
    ctx.send_event(OutputEvent(output=res.success))


def test_failed_child_journal_is_pruned_with_its_run():
    store = InMemoryJournalStore(clock=lambda: 1000.0)
    child = Agent().add_action("child_step", [InputEvent], child_step)
    parent = Agent().add_action("call_child", [InputEvent], call_child)
    parent.add_resource("child", ResourceType.AGENT, child)
    out, _, _ = _run_one(parent, store)
    assert out == [False]
    pruned = store.prune(10_000.0, "job")  # everything finished long ago
    assert store.count_entries() == 0, f"{store.count_entries()} entries survive prune (pruned {pruned}): {store._runs.keys()}"


# ---- 3. a retry replays what its failed attempt completed (issue 11.6b)
MODEL = {"n": 0}


def model_call():
    MODEL["n"] += 1
    return "bad" if MODEL["n"] == 1 else "good"


def save(x):
    return x


def validated(event, ctx):
    r = ctx.durable_execute(model_call)
    ctx.durable_execute(save, r)  # starts -> commits model_call's result
    if r == "bad":
        raise ValueError("model answered badly")
    ctx.send_event(OutputEvent(output=r))


def validated_single(event, ctx):
    r = ctx.durable_execute(model_call)
    if r == "bad":
        raise ValueError("model answered badly")
    ctx.send_event(OutputEvent(output=r))


@pytest.mark.parametrize("action", [validated, validated_single], ids=["committed", "buffered"])
def test_a_retry_replays_completed_calls_so_a_bad_answer_is_not_asked_again(action):
    """A retry re-runs failed calls only: the model's completed answer (committed
    by a later call, or still buffered when the action raised) replays, so an
    action that rejects it fails every attempt; asking again is the action's
    own loop (each ask a call of its own)."""
    MODEL["n"] = 0
    agent = Agent().add_action("v", [InputEvent], action, error_strategy="retry",
                               **{"error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001})
    with pytest.raises(ActionFailed, match="model answered badly"):
        _run_one(agent, InMemoryJournalStore())
    assert MODEL["n"] == 1


def ask_until_good(event, ctx):
    answer = ctx.durable_execute(model_call)
    while answer == "bad":
        answer = ctx.durable_execute(model_call)
    ctx.send_event(OutputEvent(output=answer))


def test_asking_again_inside_the_action_is_journaled_per_ask():
    MODEL["n"] = 0
    store = InMemoryJournalStore()
    out, _, _ = _run_one(Agent().add_action("v", [InputEvent], ask_until_good), store)
    assert out == ["good"] and MODEL["n"] == 2
    out, _, _ = _run_one(Agent().add_action("v", [InputEvent], ask_until_good), store)  # a replay
    assert out == ["good"] and MODEL["n"] == 2


class LateLoop(KeyRunner):
    """A runner whose thread starts its loop late."""

    def _run_loop(self):
        time.sleep(0.05)
        super()._run_loop()


def test_closing_a_key_runner_before_its_loop_runs_stops_the_thread():
    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("a", [InputEvent], lambda e, c: None)), {},
                         store=InMemoryJournalStore())
    runner = LateLoop(engine)
    runner.close()
    assert not runner._thread.is_alive(), "close() returned with the runner thread still running"
