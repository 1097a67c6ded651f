"""``AgentEngine``: per-key queueing and runs, over any ``KeyedDriver``.

One engine per operator instance (subtask) or local runner. For each input
record: load the key's state, append the record to the key's pending queue,
and, unless the key is already running, run its pending records one at a
time in arrival order (``action_loop.run_record``), storing the state after
each. Records of a busy key wait in its state; different keys may run
concurrently (the local runner runs them as asyncio tasks).
"""

from __future__ import annotations

from typing import Any, Dict

from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.action_loop import run_record
from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.metrics import RunCounters
from flink_agents.runtime.resources import ResourceCache
from flink_agents.runtime.state import KeyState, PendingRecord

__all__ = ["AgentEngine"]


class AgentEngine:
    """Runs an ``AgentPlan`` for many keys.

    Args:
        plan: The compiled agent.
        config: The job's agent configuration (``ctx.config``).
        job_id: Identifies the job in derived ids (and, later, the journal).
    """

    def __init__(self, plan: AgentPlan, config: Dict[str, Any] | None = None, job_id: str = "job") -> None:
        self.plan = plan
        self.config = dict(config or {})
        self.job_id = job_id
        self.counters = RunCounters()
        self._resources = ResourceCache(plan)
        self._running: set[Any] = set()

    def is_running(self, key: Any) -> bool:
        """Whether a run of ``key`` is in progress."""
        return key in self._running

    async def process(self, driver: KeyedDriver, key: Any, value: Any) -> None:
        """Accept one input record of ``key`` and run what the key can run.

        Raises:
            ActionFailed: An action raised (the error names key, record, action).
        """
        state = driver.load(key) or KeyState()
        state.pending.append(PendingRecord(state.next_seq, value))
        state.next_seq += 1
        driver.store(key, state)
        if key in self._running:
            return  # the running loop of this key will take it
        self._running.add(key)
        try:
            await self._drain(driver, key)
        finally:
            self._running.discard(key)

    async def _drain(self, driver: KeyedDriver, key: Any) -> None:
        while True:
            state = driver.load(key)
            if state is None or not state.pending:
                return
            record = state.pending[0]
            await run_record(
                self.plan,
                self.job_id,
                key,
                state,
                record,
                self._resources.get,
                self.config,
                lambda output: driver.emit(key, output),
                self.counters,
            )
            # Records that arrived during the run were stored by ``process``
            # into the state as it was before the run; a driver that
            # serializes state hands out copies, so take them from there.
            latest = driver.load(key)
            if latest is not None and latest is not state:
                state.pending = latest.pending
                state.next_seq = latest.next_seq
            state.pending.pop(0)
            state.runs_finished += 1
            self.counters.records += 1
            driver.store(key, state)

    def close(self) -> None:
        """Close the agent's resources."""
        self._resources.close()
