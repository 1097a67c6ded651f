"""The agent operator: a PyFlink ``KeyedProcessFunction`` driving the engine.

Mapping onto Flink:
- the user's key selector keys the stream; one operator instance per subtask
  runs one ``AgentEngine`` for all keys routed to it;
- each key's ``KeyState`` (pending records, short-term memory, sequence
  numbers) is one ``ValueState`` (JSON with a schema version), so a
  checkpoint or savepoint holds every key and a restore resumes it;
- ``OutputEvent`` outputs are yielded downstream from the callback of their
  key; engine counters are mirrored into Flink metrics.
A record runs to completion inside ``process_element``; state is stored at
action boundaries by the engine, and a checkpoint barrier is only processed
between callbacks, so a checkpoint never sees half an action.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Iterable

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.flink.driver import FlinkDriver

__all__ = ["AgentOperatorFunction", "KEY_STATE_NAME"]

KEY_STATE_NAME = "flink_agents.key_state.v1"


class AgentOperatorFunction(KeyedProcessFunction):
    """Runs an ``AgentPlan`` over a keyed stream; yields the agent's outputs.

    Args:
        plan: The compiled agent (shipped to workers with the function).
        config: The agent configuration (``ctx.config``).
        job_id: Identifies the job in derived ids.
    """

    def __init__(self, plan: AgentPlan, config: Dict[str, Any], job_id: str) -> None:
        self._plan = plan
        self._config = dict(config)
        self._job_id = job_id
        self._engine: AgentEngine | None = None
        self._driver: FlinkDriver | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._metrics: Dict[str, Any] = {}
        self._reported: Dict[str, int] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        state = runtime_context.get_state(ValueStateDescriptor(KEY_STATE_NAME, Types.STRING()))
        self._driver = FlinkDriver(state)
        self._engine = AgentEngine(self._plan, self._config, self._job_id)
        self._loop = asyncio.new_event_loop()
        group = runtime_context.get_metrics_group().add_group("flink_agents")
        self._metrics = {name: group.counter(name) for name in self._engine.counters.as_dict()}
        self._reported = {name: 0 for name in self._metrics}

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any]:
        assert self._engine is not None and self._driver is not None and self._loop is not None
        key = ctx.get_current_key()
        self._driver.begin(key)
        self._loop.run_until_complete(self._engine.process(self._driver, key, value))
        self._report_metrics()
        yield from self._driver.drain()

    def _report_metrics(self) -> None:
        assert self._engine is not None
        for name, total in self._engine.counters.as_dict().items():
            delta = total - self._reported[name]
            if delta:
                self._metrics[name].inc(delta)
                self._reported[name] = total

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
        if self._loop is not None:
            # Async clients held per loop close when their generators finish.
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()
