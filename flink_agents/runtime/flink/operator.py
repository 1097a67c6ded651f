"""The agent operator: a PyFlink ``KeyedProcessFunction`` driving the engine.

Mapping onto Flink:
- the user's key selector keys the stream; one operator instance per subtask
  runs one ``AgentEngine`` for all keys routed to it;
- each key's queue and sequence numbers are one ``ValueState`` and its
  short-term memory another (with Flink state TTL when
  ``short_term_memory.ttl_s`` is set), both JSON with a schema version, so a
  checkpoint or savepoint holds every key and a restore resumes it;
- model and tool calls are journaled in the journal store, keyed by the key's
  journal id (in its state), so a replay after a failover does not call again;
- ``OutputEvent`` outputs are yielded downstream from the callback of their
  key, error records of skipped records to the ``ERROR_OUTPUT`` side output;
  engine counters are mirrored into Flink metrics (group ``flink_agents``).
A record runs to completion inside ``process_element``, and a checkpoint
barrier is only processed between callbacks, so a checkpoint never sees half a
run: the journal covers what happened after it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Iterable

from pyflink.common import Time, Types
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext
from pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor

from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.flink.driver import FlinkDriver

__all__ = ["AgentOperatorFunction", "ERROR_OUTPUT", "KEY_STATE_NAME", "MEMORY_STATE_NAME", "MEMORY_TTL_OPTION"]

KEY_STATE_NAME = "flink_agents.key_state.v1"
MEMORY_STATE_NAME = "flink_agents.short_term_memory.v1"
MEMORY_TTL_OPTION = "short_term_memory.ttl_s"
ERROR_OUTPUT = OutputTag("flink_agents_errors", Types.PICKLED_BYTE_ARRAY())


def _memory_descriptor(ttl_s: float | None) -> ValueStateDescriptor:
    descriptor = ValueStateDescriptor(MEMORY_STATE_NAME, Types.STRING())
    if ttl_s is not None:
        ttl = (
            StateTtlConfig.new_builder(Time.milliseconds(int(ttl_s * 1000)))
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .build()
        )
        descriptor.enable_time_to_live(ttl)
    return descriptor


class AgentOperatorFunction(KeyedProcessFunction):
    """Runs an ``AgentPlan`` over a keyed stream; yields the agent's outputs.

    Args:
        plan: The compiled agent (shipped to workers with the function).
        config: The agent configuration (``ctx.config``).
        job_id: Journal namespace for keys first seen by this job.
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
        ttl_s = self._config.get(MEMORY_TTL_OPTION)
        self._driver = FlinkDriver(
            runtime_context.get_state(ValueStateDescriptor(KEY_STATE_NAME, Types.STRING())),
            runtime_context.get_state(_memory_descriptor(None if ttl_s is None else float(ttl_s))),
        )
        self._engine = AgentEngine(self._plan, self._config, self._job_id)
        self._loop = asyncio.new_event_loop()
        group = runtime_context.get_metrics_group().add_group("flink_agents")
        self._metrics = {name: group.counter(name) for name in self._engine.counters.as_dict()}
        self._reported = {name: 0 for name in self._metrics}

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any]:
        assert self._engine is not None and self._driver is not None and self._loop is not None
        key = ctx.get_current_key()
        self._driver.begin(key)
        try:
            self._loop.run_until_complete(self._engine.process(self._driver, key, value))
        finally:
            self._report_metrics()
        for is_error, output in self._driver.drain():
            yield (ERROR_OUTPUT, output) if is_error else output

    def _report_metrics(self) -> None:
        assert self._engine is not None
        for name, total in self._engine.counters.as_dict().items():
            delta = total - self._reported[name]
            if delta:
                self._metrics[name].inc(delta)
                self._reported[name] = total

    def close(self) -> None:
        if self._loop is not None:
            # Async clients held per loop close when their generators finish.
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()
        if self._engine is not None:
            self._engine.close()
