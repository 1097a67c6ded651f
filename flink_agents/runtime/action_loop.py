"""The action loop: one input record of one key, from ``InputEvent`` to the
last event.

    InputEvent -> every action listening to its type runs once, in plan order
               -> the events it sent are queued (only if it finished)
               -> ... until the queue is empty.

``OutputEvent`` outputs go to the driver as they are dequeued. An action's
memory writes become visible to later actions when it finishes and are
dropped if it raises (``StagedMemory``). Sensory memory lives for this run
only.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from typing import Any, Callable, Deque, Dict

from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import Resource, ResourceType
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.context import ActionContext, RunIdentity
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.memory import StagedMemory
from flink_agents.runtime.metrics import RunCounters
from flink_agents.runtime.state import KeyState, PendingRecord

__all__ = ["run_record"]

log = logging.getLogger(__name__)


async def run_record(
    plan: AgentPlan,
    job_id: str,
    key: Any,
    state: KeyState,
    record: PendingRecord,
    resources: Callable[[str, ResourceType], Resource],
    job_config: Dict[str, Any],
    emit: Callable[[Any], None],
    counters: RunCounters,
) -> None:
    """Run ``record`` of ``key`` to completion, updating ``state`` in place.

    A run is all-or-nothing for short-term memory: if an action raises,
    ``state.short_term_memory`` is put back as it was when the record started
    (so a retried record does not apply its earlier actions' writes twice).

    Raises:
        ActionFailed: An action raised.
    """
    run = RunIdentity(job_id, key, record.seq)
    first = InputEvent(input=record.value)
    first.id = run.next_event_id()
    queue: Deque[Event] = deque([first])
    sensory: Dict[str, Any] = {}
    # Commits replace the map rather than mutate it, so this is a snapshot.
    memory_at_start = state.short_term_memory

    while queue:
        event = queue.popleft()
        counters.events += 1
        if isinstance(event, OutputEvent):
            emit(event.output)
            counters.outputs += 1
        actions = plan.actions_for(event.EVENT_TYPE)
        if not actions and not isinstance(event, OutputEvent):
            counters.unhandled_events += 1
            log.debug("no action listens to %s (key %r, record #%d)", event.EVENT_TYPE, key, record.seq)
        for spec in actions:
            ctx = ActionContext(
                run,
                spec.name,
                spec.config,
                StagedMemory(sensory, "sensory_memory"),
                StagedMemory(state.short_term_memory, "short_term_memory"),
                resources,
                job_config,
            )
            try:
                result = spec.function.resolve()(event, ctx)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                state.short_term_memory = memory_at_start
                raise ActionFailed(key, record.seq, spec.name, exc) from exc
            counters.actions += 1
            sensory = ctx.sensory.commit()
            state.short_term_memory = ctx.short_term.commit()
            queue.extend(ctx.sent_events)
