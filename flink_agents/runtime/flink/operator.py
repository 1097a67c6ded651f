"""The agent operator: a PyFlink ``KeyedProcessFunction`` driving the engine.

Mapping onto Flink:
- the user's key selector keys the stream; one operator instance per subtask
  runs one ``AgentEngine`` for all keys routed to it;
- each key's queue and sequence numbers are one ``ValueState`` and its
  short-term memory another (with Flink state TTL when
  ``short-term-memory.state-ttl.ms`` is set), both JSON with a schema version, so a
  checkpoint or savepoint holds every key and a restore resumes it;
- records run on a ``KeyRunner`` (a background asyncio loop), up to
  ``max_concurrent_runs`` at once, so one key's model call does not hold the
  others; a finished record is applied to keyed state, and its outputs are
  emitted, only in a callback of its own key: in ``process_element`` right
  away if it finished within ``flink.inline_wait_ms``, else in a
  processing-time timer polling every ``flink.poll_interval_ms`` (every
  ``flink.parked_poll_interval_ms`` while the key's run waits for a callback);
- an event-time timer at each record's timestamp waits for that record, so a
  watermark never passes a record still in flight, unless the record waits
  for a callback (an outside system may take hours: holding the operator
  thread that long would stall every key and every checkpoint), whose
  outputs then come from a later poll, behind the watermark; one at the end of time
  (the final watermark of a bounded input) waits for all of the key's work,
  since processing-time timers are dropped at the end of input;
- when the runner's backlog is full, ``process_element`` blocks
  (back-pressure) instead of buffering without bound;
- model and tool calls are journaled, keyed by the key's journal id (in its
  state), so a replay after a failover does not call again; records pending
  in a restored state are resubmitted by the key's restored timers;
- each input record is admitted through the typed codec when it arrives
  (``runtime.execution.state.admit``): the run sees what a restore would read back,
  and a record the codec refuses fails the job with an error naming key,
  record and field path; classes of the job's main script that the plan
  reaches (it travels to the worker pickled by value) are registered for
  the codec when the operator opens (``runtime.durability.codec_classes``), so events
  and values of those classes read back after a restart;
- a callback's deadline is a processing-time timer of its key, kept with
  the callback's id in keyed state (``KeyState.callback_deadlines``): when it
  fires, the callback times out (``CallbackHub.expire``) unless a completion
  won already, also after a restore, before the run has been replayed;
- with a steering input (``steering.enabled``) both inputs arrive unioned
  as ``(tag, value)``; a steering message goes into the key's state and its
  mailbox (``runtime.features.steering``); a full queue yields an error record;
- error records of skipped records go to the ``ERROR_OUTPUT`` side output,
  progress records (``progress.enabled``) to ``PROGRESS_OUTPUT``, each in a
  callback of its key after the commit it reports landed;
  engine counters are mirrored into Flink metrics (group ``flink_agents``),
  and user and built-in metrics (``ctx.agent_metric_group``) into the
  operator's metric group (``runtime.flink.metrics``), in its callbacks.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Tuple

from pyflink.common import Time, Types
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext, TimeDomain
from pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor

from flink_agents.api.configuration import ReadableConfiguration
from flink_agents.api.core_options import (
    AgentExecutionOptions,
    RuntimeOptions,
    ShortTermMemoryTtlUpdate,
    ShortTermMemoryTtlVisibility,
    validate_options,
)
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.durability.ids import key_text
from flink_agents.runtime.execution.completion import apply_completions
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.flink.driver import FlinkDriver
from flink_agents.runtime.flink.metrics import FlinkMetricMirror, task_identity
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.runtime.execution.state import KeyState, PendingRecord, admit
from flink_agents.runtime.features.steering import SteeringQueueFull, steering_error

__all__ = ["AgentOperatorFunction", "ERROR_OUTPUT", "PROGRESS_OUTPUT", "KEY_STATE_NAME", "MEMORY_STATE_NAME"]

KEY_STATE_NAME = "flink_agents.key_state.v1"
MEMORY_STATE_NAME = "flink_agents.short_term_memory.v1"
ERROR_OUTPUT = OutputTag("flink_agents_errors", Types.PICKLED_BYTE_ARRAY())
PROGRESS_OUTPUT = OutputTag("flink_agents_progress", Types.PICKLED_BYTE_ARRAY())
END_OF_TIME_MS = 2**63 - 1  # Long.MAX_VALUE: fires with the final watermark
# The operator polls every key with work every poll interval; this long
# without a call, its task is gone or blocked (KeyRunner: host_silence_s).
HOST_SILENCE_S = 2.0  # at least 2 parked polls (1 s each by default)
NO_TIMESTAMP = -(2**63)  # Long.MIN_VALUE
INPUT_TAG = "i"  # with steering, main records arrive as (INPUT_TAG, record)
STEERING_TAG = "s"  # and steering messages as (STEERING_TAG, message)


def _memory_descriptor(options: ReadableConfiguration) -> ValueStateDescriptor:
    """The short-term memory state, with Flink state TTL when
    ``short-term-memory.state-ttl.ms`` (or ``short_term_memory.ttl_s``) is
    above 0, its update type and visibility from 0.3.1's options."""
    descriptor = ValueStateDescriptor(MEMORY_STATE_NAME, Types.STRING())
    ttl_ms = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_MS)
    if ttl_ms:
        update = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_UPDATE_TYPE)
        visibility = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_VISIBILITY)
        ttl = (
            StateTtlConfig.new_builder(Time.milliseconds(ttl_ms))
            .set_update_type(
                StateTtlConfig.UpdateType.OnReadAndWrite
                if update is ShortTermMemoryTtlUpdate.ON_READ_AND_WRITE
                else StateTtlConfig.UpdateType.OnCreateAndWrite
            )
            .set_state_visibility(
                StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
                if visibility is ShortTermMemoryTtlVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
                else StateTtlConfig.StateVisibility.NeverReturnExpired
            )
            .build()
        )
        descriptor.enable_time_to_live(ttl)
    return descriptor


class AgentOperatorFunction(KeyedProcessFunction):
    """Runs an ``AgentPlan`` over a keyed stream; yields the agent's outputs.

    Args:
        plan: The compiled agent (shipped to workers with the function).
        config: The agent configuration (``ctx.config``), flat keys.
        job_id: Journal namespace for keys first seen by this job.

    Raises:
        ValueError: A declared option in ``config`` has a bad value (naming
            the key), raised here on the client before the job starts.
    """

    def __init__(self, plan: AgentPlan, config: Dict[str, Any], job_id: str) -> None:
        self._plan = plan
        self._config = dict(config)
        options = validate_options(self._config)
        self._job_id = job_id
        self._engine: AgentEngine | None = None
        self._driver: FlinkDriver | None = None
        self._runner: KeyRunner | None = None
        self._metrics: Dict[str, Any] = {}
        self._reported: Dict[str, int] = {}
        self._mirror: FlinkMetricMirror | None = None  # user and built-in metrics (runtime.flink.metrics)
        self._inline_wait_s = options.get(RuntimeOptions.INLINE_WAIT_MS) / 1000.0
        self._poll_interval_ms = options.get(RuntimeOptions.POLL_INTERVAL_MS)
        # A key whose run waits for a callback (maybe for hours) polls less
        # often: thousands of parked keys must not cost a timer each 100 ms.
        self._parked_poll_interval_ms = options.get(RuntimeOptions.PARKED_POLL_INTERVAL_MS)
        # Per key with callbacks in flight: id -> (deadline ms, record seq);
        # mirrors KeyState.callback_deadlines so polls need not read state.
        self._deadlines: Dict[Any, Dict[str, Tuple[int, int]]] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        self._driver = FlinkDriver(
            runtime_context.get_state(ValueStateDescriptor(KEY_STATE_NAME, Types.STRING())),
            runtime_context.get_state(_memory_descriptor(validate_options(self._config))),
        )
        self._engine = AgentEngine(
            self._plan, self._config, self._job_id, deadline_timers=self._driver.arm_deadline,
            task=task_identity(runtime_context),
        )
        self._engine.report_shared_store()  # subtask 0 only
        max_runs = self._engine.config.get(RuntimeOptions.MAX_CONCURRENT_RUNS)
        # Thread mode never calls close() on cancel or stop-with-savepoint:
        # a runner whose operator stopped calling starts no new record.
        silence_s = max(HOST_SILENCE_S, 3 * self._poll_interval_ms / 1000, 2 * self._parked_poll_interval_ms / 1000)
        self._runner = KeyRunner(
            self._engine, max_runs, self._engine.config.get(RuntimeOptions.MAX_BACKLOG) or 16 * max_runs,
            host_silence_s=silence_s,
        )
        group = runtime_context.get_metrics_group().add_group("flink_agents")
        self._metrics = {name: group.counter(name) for name in self._engine.counters.as_dict()}
        self._reported = {name: 0 for name in self._metrics}
        self._mirror = FlinkMetricMirror(self._engine.counters.metrics, runtime_context.get_metrics_group())

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any]:
        assert self._engine is not None and self._driver is not None and self._runner is not None
        key = ctx.get_current_key()
        self._driver.begin(key)
        timestamp = ctx.timestamp()
        # PyFlink reports "no timestamp" as Long.MIN_VALUE.
        timestamp = None if timestamp in (None, NO_TIMESTAMP) else timestamp
        watermark = ctx.timer_service().current_watermark()
        yield from self._apply(key, timestamp, watermark)
        if self._engine.steering_enabled:
            tag, value = value  # the main input and the steering input, unioned
            if tag == STEERING_TAG:
                yield from self._steer(key, value)
                return
        state = self._driver.load(key) or KeyState(journal_id=self._engine.job_id)
        value = admit(key, state.next_seq, value)
        record = PendingRecord(state.next_seq, value, timestamp)
        state.pending.append(record)
        state.next_seq += 1
        self._driver.store(key, state)
        self._runner.submit(key, state)
        # Fast path: a record that finishes at once (no slow call) is applied
        # here, without a timer round trip.
        if len(state.pending) == 1 and self._runner.wait_for(key, record.seq, self._inline_wait_s):
            yield from self._apply(key, timestamp, watermark)
        if self._runner.has_work(key):
            self._schedule(ctx.timer_service(), record.timestamp_ms)
        else:
            self._release(key)
        self._report_metrics()
        self._runner.wait_for_capacity()

    def _steer(self, key: Any, message: Any) -> Iterable[Any]:
        assert self._engine is not None and self._driver is not None and self._runner is not None
        state = self._driver.load(key) or KeyState(journal_id=self._engine.job_id)
        message = admit(key, state.next_steering_seq, message, "steering message")
        try:
            self._engine.accept_steering(key, state, message)
        except SteeringQueueFull as full:
            yield ERROR_OUTPUT, steering_error(key, message, full)
            return
        self._driver.store(key, state)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[Any]:
        assert self._driver is not None and self._runner is not None
        key = ctx.get_current_key()
        self._driver.begin(key)
        event_time = ctx.time_domain() == TimeDomain.EVENT_TIME
        timers = ctx.timer_service()
        if not event_time:
            self._expire_due(key, timestamp)
        # What this callback's outputs carry: an event-time timer's
        # timestamp; a poll's none (only untimed or overdue records apply).
        emits_at = timestamp if event_time else None
        applies_through = timestamp if event_time else timers.current_watermark()
        if not event_time and self._runner.knows(key):
            # A poll: apply what finished, without reading state otherwise.
            self._arm_deadlines(key, timers)
            yield from self._apply(key, emits_at, applies_through)
            self._after_callback(timers, key)
            return
        state = self._driver.load(key)
        if state is None or not state.pending:
            self._release(key)
            return
        self._runner.submit(key, state)  # after a restore the runner has not seen them
        if event_time:
            # The watermark may not pass records still in flight: wait for them.
            due = [r.seq for r in state.pending if timestamp == END_OF_TIME_MS or (r.timestamp_ms or 0) <= timestamp]
            if due:
                self._arm_deadlines(key, timers)
                self._wait_unless_parked(key, due[-1], final=timestamp == END_OF_TIME_MS)
        self._arm_deadlines(key, timers)
        yield from self._apply(key, emits_at, applies_through)
        self._after_callback(timers, key)

    def _after_callback(self, timers: Any, key: Any) -> None:
        assert self._runner is not None
        if self._runner.has_work(key):
            self._schedule(timers, None, parked=self._is_parked(key))
        else:
            self._release(key)
        self._report_metrics()

    def _is_parked(self, key: Any) -> bool:
        """Whether a run of the key waits for a callback."""
        assert self._engine is not None
        hub = self._engine.callbacks
        return hub is not None and bool(self._deadlines.get(key)) and hub.has_open_callbacks(key_text(key))

    def _wait_unless_parked(self, key: Any, seq: int, final: bool) -> None:
        """Wait for the key's record ``seq``, but not for a callback: a run
        waiting on one lets the watermark pass (see the module docstring).
        At the final watermark nothing fires later, so it waits for all,
        bounded by the callbacks' deadlines."""
        assert self._engine is not None and self._runner is not None
        hub = self._engine.callbacks
        if hub is None or final:
            self._runner.wait_for(key, seq)
            return
        text = key_text(key)
        while not self._runner.wait_for(key, seq, 0.05):
            if hub.has_open_callbacks(text):
                return

    def _release(self, key: Any) -> None:
        assert self._runner is not None
        self._runner.release(key)
        self._deadlines.pop(key, None)

    def _arm_deadlines(self, key: Any, timers: Any) -> None:
        """Turn the deadlines of the key's new callbacks into timers, and
        keep them in keyed state (a checkpoint then holds both)."""
        assert self._engine is not None and self._driver is not None
        requests = self._driver.take_deadlines(key)
        if not requests:
            return
        state = self._driver.load(key)
        if state is None:
            return
        known = self._deadlines.setdefault(key, {})
        for callback_id, deadline_ms, seq in requests:
            if callback_id in known:
                continue  # a replay asked again; Flink dedups the timer too
            known[callback_id] = (deadline_ms, seq)
            state.callback_deadlines.append([callback_id, deadline_ms, seq])
            timers.register_processing_time_timer(deadline_ms)
        self._driver.store(key, state)

    def _expire_due(self, key: Any, now_ms: int) -> None:
        """Time out the key's callbacks whose deadline timer fired."""
        assert self._engine is not None and self._driver is not None and self._runner is not None
        hub = self._engine.callbacks
        if hub is None:
            return
        known = self._deadlines.get(key)
        if known is None:
            if self._runner.knows(key):
                return  # no callbacks armed for this key
            # After a restore: the deadlines are in keyed state only.
            state = self._driver.load(key)
            if state is None or not state.callback_deadlines:
                return
            known = self._deadlines[key] = {e[0]: (int(e[1]), int(e[2])) for e in state.callback_deadlines}
        due = [callback_id for callback_id, (deadline_ms, _) in known.items() if deadline_ms <= now_ms]
        if not due:
            return
        hub.expire(due)
        for callback_id in due:
            del known[callback_id]
        state = self._driver.load(key)
        if state is not None:
            state.callback_deadlines = [e for e in state.callback_deadlines if e[0] not in due]
            self._driver.store(key, state)

    def _schedule(self, timers: Any, timestamp_ms: int | None, parked: bool = False) -> None:
        now = timers.current_processing_time()
        interval = self._parked_poll_interval_ms if parked else self._poll_interval_ms
        next_poll = (now // interval + 1) * interval
        timers.register_processing_time_timer(next_poll)
        # And the one after: a registration made in on_timer may miss a
        # checkpoint barrier already waiting (flink-python applies it later),
        # and the previous poll's second timer is then what the checkpoint
        # holds, so a restored key is still polled. Flink dedups equal timers;
        # the cost is at most one extra poll, which releases an idle key.
        timers.register_processing_time_timer(next_poll + interval)
        timers.register_event_time_timer(END_OF_TIME_MS)
        if timestamp_ms is not None:
            timers.register_event_time_timer(timestamp_ms)

    def _apply(self, key: Any, emits_at: int | None, applies_through: int) -> Iterable[Any]:
        """Yield the key's published progress; apply its finished records to
        its state and yield their outputs.

        A record's outputs carry the timestamp of the callback that yields
        them, so a timestamped record is applied only in a callback of its
        own timestamp (its ``process_element``, its event-time timer), or
        once the watermark has passed it (``applies_through``: its own timer
        has fired, e.g. while the record waited for a callback; the
        documented exception). Untimed records apply in any callback.
        Records apply in order: a held record holds those after it.
        """
        assert self._driver is not None and self._runner is not None
        for record in self._runner.take_progress(key):
            yield PROGRESS_OUTPUT, record
        if not self._runner.has_completions(key):
            return  # (a poll then reads no state)
        state = self._driver.load(key)
        assert state is not None  # a completion implies a submitted record
        timestamps = {r.seq: r.timestamp_ms for r in state.pending}

        def in_this_callback(seq: int) -> bool:
            ts = timestamps.get(seq)
            return ts is None or ts == emits_at or ts <= applies_through or applies_through == END_OF_TIME_MS

        completions = self._runner.take(key, in_this_callback)
        if not completions:
            return
        applied = apply_completions(key, state, completions)  # the step every host applies with
        self._driver.store(key, state)
        known = self._deadlines.get(key)
        if known:  # the finished runs' callbacks are closed now
            finished = {completion.seq for completion in completions}
            for callback_id in [c for c, (_, seq) in known.items() if seq in finished]:
                del known[callback_id]
        for is_error, value in applied.emissions:
            yield (ERROR_OUTPUT, value) if is_error else value
        applied.raise_failure()

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
