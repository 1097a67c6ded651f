"""A finished sub-agent's journal survives pruning until its parent journals its result."""

import asyncio
import pytest
from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.stores.memory_store import InMemoryJournalStore

CLOCK = [1000.0]
CALLS = {"c1": 0}
STORE = []
PRUNE = [True]


class Crash(BaseException):
    pass


def expensive():
    CALLS["c1"] += 1
    return "c1-result"


def c1_action(event, ctx):
    ctx.send_event(OutputEvent(output=ctx.durable_execute(expensive)))


async def long_call():
    CLOCK[0] += 3600  # the second child runs for an hour
    if PRUNE[0]:
        STORE[0].prune(CLOCK[0] - 1800, "job")  # another key's run triggers the engine's prune
    raise Crash()  # the TaskManager dies


async def c2_action(event, ctx):
    await ctx.durable_execute_async(long_call)


async def parent_action(event, ctx):
    a = ctx.get_resource("c1", ResourceType.AGENT).submit(ctx, "x")
    b = ctx.get_resource("c2", ResourceType.AGENT).submit(ctx, "y")
    r = await asyncio.gather(a, b)
    ctx.send_event(OutputEvent(output=[x.result for x in r]))


def build():
    p = Agent().add_action("parent", [InputEvent], parent_action)
    p.add_resource("c1", ResourceType.AGENT, Agent().add_action("c1a", [InputEvent], c1_action))
    p.add_resource("c2", ResourceType.AGENT, Agent().add_action("c2a", [InputEvent], c2_action))
    return AgentPlan.from_agent(p)


@pytest.mark.parametrize("prune", [False, True])
def test_finished_child_survives_prune_until_parent_journals_it(prune):
    CLOCK[0] = 1000.0; CALLS["c1"] = 0; PRUNE[0] = prune
    store = InMemoryJournalStore(clock=lambda: CLOCK[0]); STORE[:] = [store]
    for attempt in range(2):
        engine = AgentEngine(build(), {}, job_id="job", store=store, clock=lambda: CLOCK[0])
        try:
            asyncio.run(engine.run_one("k", KeyState(journal_id="job"), PendingRecord(0, "in"), print, print))
        except Crash:
            pass
        PRUNE[0] = False
    assert CALLS["c1"] == 1, "the finished child's journaled call ran again after failover"
