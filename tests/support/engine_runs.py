"""Run one record through an agent on a fresh engine, for engine tests.

A fresh ``AgentEngine`` and ``LocalDriver`` per call is what a restore to
before the record looks like: the keyed state is new, the journal store is
the one passed in (so a second call replays what the first one journaled).
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

from flink_agents.api.agents.agent import Agent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs


def run_record(
    agent: Agent, store: InMemoryJournalStore, value: Any, config: Mapping[str, Any] | None = None, key: Any = "k",
) -> LocalDriver:
    """Process ``value`` as the next record of ``key``; the driver holds its
    outputs (``driver.outputs``) and error outputs. Raises what the run raises."""
    engine = AgentEngine(AgentPlan.from_agent(agent), dict(config or {}), job_id="job", store=store)
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, key, value)
    finally:
        engine.close()
    return driver
