"""The action loop: one input record of one key, from ``InputEvent`` to the
last event.

    InputEvent -> every action listening to its type runs once, in plan order
               -> the events it sent are queued (only if it finished)
               -> ... until the queue is empty.

Each action invocation is a *step* named ``"<action>@<event index>"``. Its
completion (sent events, memory writes) is journaled; on replay a completed
step is not run again: its events and writes are re-applied from the journal.
``OutputEvent`` outputs go to ``emit`` as they are dequeued (the engine
holds them until the run finished: all or nothing per record). An action's
memory writes become visible to later actions when it finishes and are
dropped if it raises. Sensory memory lives for this run only.

A retried action (``error_strategy: retry``) runs again under the same step:
the calls its failed attempt completed are replayed from the journal, and
only the calls that failed, and what follows them, run again
(``RunJournal.prepare_retry``). An attempt that takes another path than the
journal recorded gets ``NondeterminismError``, as a replay does. The count of
failed attempts is journaled with each retry, so a run after a crash goes on
counting: at most the configured attempts, plus the one a crash cut off.

An action returns ``None``: anything else is an error naming the action
(an output must be sent with ``ctx.send_event``, or it would be lost).

Built-in metrics read ``counters.events`` and ``counters.actions``; an
executed step also reports its time (``runtime.execution.metrics``). When
the job logs events, the run's event log (``runtime.features.event_log``)
is told what was taken and which steps handled it, and delivers it once
durable.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections import deque
from typing import Any, Awaitable, Deque, Dict, List, Tuple

from flink_agents._pycompat import TIMEOUT_ERRORS, expired, timeout
from flink_agents.api.core_options import AgentConfigOptions, ConditionEvaluationFailureStrategy
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.trigger_conditions import event_variables
from flink_agents.plan.agent_plan import ActionSpec
from flink_agents.runtime.durability.call_position import enter_action, exit_action
from flink_agents.runtime.execution.context import ActionContext
from flink_agents.runtime.execution.error_policy import ErrorPolicy
from flink_agents.runtime.errors import (
    INTERNAL, RETRYABLE, ActionFailed, ActionReturnedValue, JournalUnavailable, NondeterminismError, RecordParked, RecordSkipped,
    classify,
)
from flink_agents.runtime.execution.event_codec import DeferredEvent, decode_event, encode_event, encode_sent
from flink_agents.runtime.execution.input_event import input_event
from flink_agents.runtime.durability.ids import RunIdentity
from flink_agents.runtime.execution.memory import SENSORY_LABEL, StagedMemory, apply_diff
from flink_agents.runtime.execution.run import Run
from flink_agents.runtime.execution.state import PendingRecord
from flink_agents.runtime.execution.memory_events import (
    RUN_BEGIN_STEP, memory_events, run_begin_event, start_recording, switches_for,
)

__all__ = ["run_record"]

log = logging.getLogger(__name__)

INPUT_STEP = "_input"


async def run_record(run: Run, record: PendingRecord) -> None:
    """Run ``record`` to completion, updating ``run.state`` in place.

    A run is all-or-nothing for short-term memory: if it fails,
    ``run.state.short_term_memory`` is put back as it was when the record
    started.

    Raises:
        ActionFailed: An action failed (after its retries) under ``fail``;
            or the journal was written for another record (the cause is a
            ``NondeterminismError``, the action the input's first listener).
        RecordSkipped: An action failed under ``skip``.
    """
    state, journal, counters, identity = run.state, run.journal, run.counters, run.identity
    try:
        journal.check_input(identity.key)
    except NondeterminismError as exc:  # the replay of the input's first listener would diverge
        listeners = run.plan.actions_for(InputEvent.EVENT_TYPE)
        raise ActionFailed(identity.key, identity.seq, listeners[0].name if listeners else INPUT_STEP, exc) from exc
    first = input_event(record.value, identity.event_id(INPUT_STEP, 0))
    # Each event with its encoded form (None: not encoded yet), from which
    # every listener after the first gets a copy of its own.
    queue: Deque[Tuple[Event, Dict[str, Any] | None]] = deque([(first, None)])
    begin: Event | None = None  # the run's AgentRunBeginEvent, if the job sends one
    if switches_for(run.config).run_begin:
        queue.appendleft(_run_begin(run, first))
        begin = queue[0][0]
    sensory: Dict[str, Any] = {}
    # Commits replace the map rather than mutate it, so this is a snapshot.
    memory_at_start = state.short_term_memory
    event_index = 0
    event_log = run.event_log  # runtime.features.event_log; None: no event log (one test per event)

    try:
        while queue:
            event, encoded = queue.popleft()
            counters.events += 1
            logged = None if event_log is None else event_log.took(event)
            actions = _triggered(run, event)
            if type(encoded) is DeferredEvent:
                # Journaled as its listeners get it; with none, as the run
                # ends with it (encode_sent), if the run writes a journal.
                encoded = encoded.get() if actions else None
            if encoded is None and len(actions) + isinstance(event, OutputEvent) > 1:
                encoded = encode_event(event)  # before any listener can change it
            if isinstance(event, OutputEvent):
                run.emit(decode_event(encoded).output if actions else event.output)
            if not actions and not isinstance(event, OutputEvent):
                counters.unhandled_events += 1
                log.debug("no action listens to %s (key %r, record #%d)", event.get_type(), identity.key, identity.seq)
            for index, spec in enumerate(actions):
                # Its listeners' steps are "<action>@begin", so the other
                # events' indexes (and steps) are the same with it or without.
                step = f"{spec.name}@{'begin' if event is begin else event_index}"
                done = journal.completion(step)
                if done is not None:
                    counters.steps_replayed += 1
                    sensory = apply_diff(sensory, done["sensory"])
                    state.short_term_memory = apply_diff(state.short_term_memory, done["stm"])
                    replayed = [(decode_event(e), e) for e in done["events"]]
                    queue.extend(replayed)
                    if event_log is not None:
                        event_log.stepped(logged, spec.name, step, [e for e, _ in replayed], replayed=True)
                    continue
                # A listener's changes to its event never reach another
                # listener: on a replay, a replayed step does not run again.
                listener_event = event if index == 0 else decode_event(encoded)
                started_ns = time.time_ns()
                ctx = await _run_step(run, spec, step, listener_event, sensory)
                sensory = ctx.sensory.commit()
                state.short_term_memory = ctx.short_term.commit()
                journal.complete(step, {
                    "events": ctx.encoded_events,
                    "sensory": ctx.sensory.diff(),
                    "stm": ctx.short_term.diff(),
                }, started_ns)
                queue.extend(zip(ctx.sent_events, ctx.encoded_events))
                if event_log is not None:
                    event_log.stepped(logged, spec.name, step, ctx.sent_events, replayed=False)
            if event_log is not None:
                event_log.processed(logged)
            if event is not begin:
                event_index += 1
    except BaseException:
        state.short_term_memory = memory_at_start
        raise


async def _run_step(run: Run, spec: ActionSpec, step: str, event: Event, sensory: Dict[str, Any]) -> ActionContext:
    """Run one action on one event under its error policy; returns the
    finished context (staged writes and events not yet applied)."""
    identity = run.identity
    policy = _policy(spec, run.config)
    # Attempts that failed before a crash count: the budget is the record's,
    # not the process's (RunJournal.prepare_retry journals the count).
    attempt = run.journal.failed_attempts(step)
    started = time.perf_counter()
    switches = switches_for(run.config)
    while True:
        attempt += 1
        ctx = ActionContext(
            run, step, spec,
            StagedMemory(sensory, SENSORY_LABEL),
            StagedMemory(run.state.short_term_memory, "short_term_memory", run.state.memory_reads),
            trigger_event_id=event.id,
        )
        start_recording(switches, ctx, event)
        scope = enter_action(ctx)
        try:
            returned = spec.function.resolve()(event, ctx)
            if returned is not None and inspect.isawaitable(returned):
                returned = await _within_timeout(returned, policy.timeout_s, spec.name, identity)
            if returned is not None:
                raise ActionReturnedValue(spec.name, returned)
            for observed in memory_events(switches, identity.key, event, ctx.sensory, ctx.short_term,
                                          ctx.ltm_observations):
                ctx.send_event(observed)  # after the action's own events, with its lineage
            # Encoded (or checked, and encoded when read) now, as part of
            # the action: an event holding a value the codec refuses is the
            # action's error (terminal), naming it.
            ctx.encoded_events = [encode_event(e) if i in ctx.runtime_sent else encode_sent(e)
                                  for i, e in enumerate(ctx.sent_events)]
            run.counters.actions += 1
            # Built-in metrics: an executed step (never a replayed one), its
            # time from the first attempt's start, retries included.
            run.counters.metrics.builtin.action_executed(spec.name, int((time.perf_counter() - started) * 1000))
            return ctx
        except (Exception, NondeterminismError, JournalUnavailable) as exc:
            ctx.active = False  # orphaned calls of this attempt journal nothing
            kind = classify(exc)  # runtime.errors: what a failure means, in one place
            if kind == INTERNAL or isinstance(exc, NondeterminismError):
                # Never retried or skipped: the record fails, a restart replays it.
                raise ActionFailed(identity.key, identity.seq, spec.name, exc) from exc
            retry = kind == RETRYABLE and attempt < policy.attempts_allowed
            if not retry:
                run.journal.discard_failed(step)
                failure = ActionFailed(identity.key, identity.seq, spec.name, exc)
                if policy.strategy == "skip":
                    raise RecordSkipped(failure, attempt) from exc
                if policy.strategy == "park":
                    raise RecordParked(failure, attempt) from exc
                raise failure from exc
            # The attempt's calls still in flight (a failed gather's other
            # branches) finish and are journaled; its completed calls become
            # durable and replay into the next attempt; its failed calls run again.
            await run.journal.settle_in_flight()
            await run.journal.prepare_retry(step, attempt, exc)
            delay_s = policy.backoff_s(attempt)
            run.counters.action_retries += 1
            log.warning(
                "action %r failed on key %r, record #%d (attempt %d of %d), retrying in %.2f s: %r",
                spec.name, identity.key, identity.seq, attempt, policy.attempts_allowed, delay_s, exc,
            )
            await run.clock.sleep(delay_s)
        finally:
            ctx.active = False
            exit_action(scope)


def _triggered(run: Run, event: Event) -> List[ActionSpec]:
    """The actions ``event`` triggers, in plan order: those listening to its
    type, then (Flink Agents HEAD) those with a condition expression that
    holds for it. Expressions see only the event, so a replay picks the same
    actions. An ``OutputEvent`` is matched by exact type only (HEAD sends it
    downstream without matching; 0.3 listeners of its type still run)."""
    plan = run.plan
    if not plan.has_condition_expressions or isinstance(event, OutputEvent):
        return plan.actions_for(event.get_type())
    identity = run.identity

    def failed(spec: ActionSpec, condition: str, error: Exception) -> None:
        strategy = run.config.get(AgentConfigOptions.CONDITION_EVALUATION_FAILURE_STRATEGY)
        if strategy is ConditionEvaluationFailureStrategy.FAIL:
            raise ActionFailed(identity.key, identity.seq, spec.name, error) from error
        log.warning(
            "trigger condition %r of action %r failed on a %s event (key %r, record #%d); counted false: %s",
            condition, spec.name, event.get_type(), identity.key, identity.seq, error,
        )

    return plan.actions_matching(
        event.get_type(), lambda: event_variables(event, lambda: json.loads(event.model_dump_json())), failed,
    )


def _run_begin(run: Run, first: InputEvent) -> Tuple[Event, Dict[str, Any]]:
    """The run's ``AgentRunBeginEvent`` with its encoded form: read from the
    journal when a run before this one stored it, else made from the key's
    short-term memory now and journaled (``execution.memory_events``)."""
    done = run.journal.completion(RUN_BEGIN_STEP)
    if done is not None:
        encoded = done["events"][0]
        return decode_event(encoded), encoded
    event = run_begin_event(
        run.identity.key, run.state.short_term_memory, first, run.identity.event_id(RUN_BEGIN_STEP, 0),
    )
    encoded = encode_event(event)
    run.journal.complete(RUN_BEGIN_STEP, {"events": [encoded], "sensory": {"set": {}, "del": []},
                                          "stm": {"set": {}, "del": []}})
    return event, encoded


# (id of spec) -> (spec, job config, its policy). The entry holds the spec and
# the config, so their ids cannot be reused while cached, and a hit checks both
# by identity: a plan's policies are worked out once, not at every step.
_POLICIES: Dict[int, Tuple[ActionSpec, Any, ErrorPolicy]] = {}
_MAX_CACHED_POLICIES = 4096


def _policy(spec: ActionSpec, job_config: Any) -> ErrorPolicy:
    cached = _POLICIES.get(id(spec))
    if cached is not None and cached[0] is spec and cached[1] is job_config:
        return cached[2]
    policy = ErrorPolicy.for_action(spec.config, job_config, spec.function.is_async, spec.name)
    if len(_POLICIES) >= _MAX_CACHED_POLICIES:
        _POLICIES.clear()
    _POLICIES[id(spec)] = (spec, job_config, policy)
    return policy


async def _within_timeout(action: Awaitable[Any], timeout_s: float | None, name: str, run: RunIdentity) -> Any:
    """Await a running async action (its return value); past ``timeout_s`` it is cancelled and
    fails with a ``TimeoutError`` naming it (an error like any other for its
    error strategy). A journal write in flight when the timeout fires lands
    first (``RunJournal._commit_async``), so the TimeoutError follows it."""
    if timeout_s is None:
        return await action
    deadline = timeout(timeout_s)
    try:
        async with deadline:
            returned = await action
    except TIMEOUT_ERRORS as exc:
        if not expired(deadline):
            raise  # the action's own TimeoutError
        raise _timed_out(name, timeout_s, run) from exc
    if expired(deadline):  # it swallowed the cancellation: still too late
        raise _timed_out(name, timeout_s, run)
    return returned


def _timed_out(name: str, timeout_s: float, run: RunIdentity) -> TimeoutError:
    return TimeoutError(f"action {name!r} timed out after {timeout_s:g} s on key {run.key!r}, record #{run.seq}")
