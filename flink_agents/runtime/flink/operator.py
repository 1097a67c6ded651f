"""The agent operator: a PyFlink ``KeyedProcessFunction``, a thin adapter
over the host core (``runtime.keyed_host.KeyedHost``), which owns a record's
life on its key: ``process_element`` and ``on_timer`` become its
``process`` and ``on_timer`` calls, and the operator yields what the port
(``runtime.flink.driver.FlinkDriver``) buffered.

Mapping onto Flink (the rest is the core's, see its docstring):
- the user's key selector keys the stream; one operator instance per subtask
  runs one ``AgentEngine`` and one ``KeyRunner`` (a background asyncio loop:
  the operator returns from each callback while runs go on) for all keys
  routed to it;
- each key's queue and sequence numbers are one ``ValueState`` and its
  short-term memory another (with Flink state TTL when
  ``short-term-memory.state-ttl.ms`` is set), both JSON with a schema version, so a
  checkpoint or savepoint holds every key and a restore resumes it: records
  pending in a restored state are resubmitted by the key's restored timers;
- timers are the callback's ``TimerService``: polls, a record's timestamp,
  the end of time, and callback deadlines, each a timer of its key;
- classes of the job's main script that the plan reaches (it travels to the
  worker pickled by value) are registered for the codec when the operator
  opens (``runtime.durability.codec_classes``), so events and values of
  those classes read back after a restart;
- with a steering input (``steering.enabled``) both inputs arrive unioned
  as ``(tag, value)``;
- error records go to the ``ERROR_OUTPUT`` side output, progress records
  (``progress.enabled``) to ``PROGRESS_OUTPUT``; engine counters are
  mirrored into Flink metrics (group ``flink_agents``), and user and
  built-in metrics (``ctx.agent_metric_group``) into the operator's metric
  group (``runtime.flink.metrics``), in its callbacks.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable

from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext, TimeDomain

from flink_agents.api.core_options import RuntimeOptions, validate_options
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.flink.output_shape import json_like
from flink_agents.runtime.flink.driver import (  # noqa: F401 (the state names re-exported)
    ERROR_OUTPUT, KEY_STATE_NAME, MEMORY_STATE_NAME, PROGRESS_OUTPUT, FlinkDriver,
)
from flink_agents.runtime.flink.metrics import FlinkMetricMirror, parallelism_of, task_identity
from flink_agents.runtime.flink.embedded_logging import match_flink_log_level
from flink_agents.runtime.flink.task_cancellation import task_cancellation_check
from flink_agents.runtime.keyed_host import END_OF_TIME_MS, KeyedHost  # noqa: F401 (re-exported)
from flink_agents.runtime.scheduling.key_runner import KeyRunner

__all__ = ["AgentOperatorFunction", "ERROR_OUTPUT", "PROGRESS_OUTPUT", "KEY_STATE_NAME", "MEMORY_STATE_NAME"]

# The operator polls every key with work every poll interval; this long
# without a call, its task is gone or blocked (KeyRunner: host_silence_s).
HOST_SILENCE_S = 2.0  # at least 2 parked polls (1 s each by default)
NO_TIMESTAMP = -(2**63)  # Long.MIN_VALUE
INPUT_TAG = "i"  # with steering, main records arrive as (INPUT_TAG, record)
STEERING_TAG = "s"  # and steering messages as (STEERING_TAG, message)


def _is_side_output(item: Any) -> bool:
    """``(OutputTag, record)``: an error or progress record, not an output."""
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], OutputTag)


class AgentOperatorFunction(KeyedProcessFunction):
    """Runs an ``AgentPlan`` over a keyed stream; yields the agent's outputs.

    Args:
        plan: The compiled agent (shipped to workers with the function).
        config: The agent configuration (``ctx.config``), flat keys.
        job_id: Journal namespace for keys first seen by this job.
        typed_outputs: Yield each output as the action built it; False (the
            default of ``to_datastream``): as JSON-like data, as Flink Agents
            0.3.1 does (``runtime.flink.output_shape.json_like``).

    Raises:
        ValueError: A declared option in ``config`` has a bad value (naming
            the key), raised here on the client before the job starts.
    """

    def __init__(self, plan: AgentPlan, config: Dict[str, Any], job_id: str, typed_outputs: bool = False) -> None:
        self._plan = plan
        self._typed_outputs = typed_outputs
        self._config = dict(config)
        validate_options(self._config)
        self._job_id = job_id
        self._engine: AgentEngine | None = None
        self._driver: FlinkDriver | None = None
        self._runner: KeyRunner | None = None
        self._host: KeyedHost | None = None
        self._metrics: Dict[str, Any] = {}
        self._reported: Dict[str, int] = {}
        self._mirror: FlinkMetricMirror | None = None  # user and built-in metrics (runtime.flink.metrics)

    def open(self, runtime_context: RuntimeContext) -> None:
        match_flink_log_level()  # thread mode: no DEBUG records made only for the JVM to drop
        options = validate_options(self._config)
        self._driver = FlinkDriver.of(runtime_context, options)
        self._engine = engine = AgentEngine(
            self._plan, self._config, self._job_id, deadline_timers=self._driver.arm_deadline,
            task=task_identity(runtime_context),
            # Each subtask takes its share of the job's budgets and rate limits.
            parallelism=parallelism_of(runtime_context),
        )
        engine.report_shared_store()  # subtask 0 only
        max_runs = engine.config.get(RuntimeOptions.MAX_CONCURRENT_RUNS)
        poll_ms = options.get(RuntimeOptions.POLL_INTERVAL_MS)
        parked_poll_ms = options.get(RuntimeOptions.PARKED_POLL_INTERVAL_MS)
        # Thread mode never calls close() on cancel or stop-with-savepoint:
        # a runner whose operator stopped calling starts no new record.
        silence_s = max(HOST_SILENCE_S, 3 * poll_ms / 1000, 2 * parked_poll_ms / 1000)
        self._runner = KeyRunner(
            engine, max_runs, engine.config.get(RuntimeOptions.MAX_BACKLOG) or 16 * max_runs,
            host_silence_s=silence_s,
            # Thread mode: a cancelled task's waits on the runner end at once.
            host_cancelled=task_cancellation_check(),
        )
        self._host = KeyedHost(
            engine, self._driver, self._runner, inline_wait_s=options.get(RuntimeOptions.INLINE_WAIT_MS) / 1000.0,
            poll_interval_ms=poll_ms, parked_poll_interval_ms=parked_poll_ms,
        )
        group = runtime_context.get_metrics_group().add_group("flink_agents")
        self._metrics = {name: group.counter(name) for name in engine.counters.as_dict()}
        self._reported = {name: 0 for name in self._metrics}
        self._mirror = FlinkMetricMirror(engine.counters.metrics, runtime_context.get_metrics_group())

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any]:
        assert self._engine is not None and self._driver is not None and self._host is not None
        key = ctx.get_current_key()
        self._driver.begin(key, ctx.timer_service())
        timestamp = ctx.timestamp()
        # PyFlink reports "no timestamp" as Long.MIN_VALUE.
        timestamp = None if timestamp in (None, NO_TIMESTAMP) else timestamp
        steering = False
        if self._engine.steering_enabled:
            tag, value = value  # the main input and the steering input, unioned
            steering = tag == STEERING_TAG
        try:
            queued = self._host.process(key, value, timestamp, steering)
        finally:  # what was emitted before a failure goes out too
            yield from self._emitted(key)
        if queued:
            self._report_metrics()
            self._host.wait_for_capacity()

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[Any]:
        assert self._driver is not None and self._host is not None
        key = ctx.get_current_key()
        self._driver.begin(key, ctx.timer_service())
        try:
            self._host.on_timer(key, timestamp, ctx.time_domain() == TimeDomain.EVENT_TIME)
        finally:
            yield from self._emitted(key)
        self._report_metrics()

    def _emitted(self, key: Any) -> Iterable[Any]:
        """What the callback of ``key`` emitted, in order: outputs, and
        ``(ERROR_OUTPUT, record)``, ``(PROGRESS_OUTPUT, record)``.

        Raises:
            OutputShapeError: An output JSON cannot carry (not ``typed_outputs``).
        """
        assert self._driver is not None
        emitted = self._driver.drain()
        if self._typed_outputs:
            return emitted
        return [item if _is_side_output(item) else json_like(key, item) for item in emitted]

    def _report_metrics(self) -> None:
        assert self._engine is not None
        for name, total in self._engine.counters.as_dict().items():
            delta = total - self._reported[name]
            if delta > 0:
                self._metrics[name].inc(delta)
            elif delta < 0:
                self._metrics[name].dec(-delta)
            self._reported[name] = total
        if self._mirror is not None:
            self._mirror.sync()

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
        if self._engine is not None:
            self._engine.close()
