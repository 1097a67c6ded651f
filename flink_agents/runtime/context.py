"""``ActionContext``: the ``RunnerContext`` one action invocation sees."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from typing import Any, Callable, Dict, List

from flink_agents.api.events.event import Event
from flink_agents.api.memory_object import MemoryObject
from flink_agents.api.resource import Resource, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.runtime.memory import MemoryNode, StagedMemory

__all__ = ["ActionContext", "RunIdentity"]

# Namespace of the ids the runtime derives; fixed forever (ids are journaled).
_ID_NAMESPACE = uuid.UUID("3f0b3f5e-6d1c-4d8e-9a57-6c1f4a7b9e21")


class RunIdentity:
    """Who is running: job, key and record sequence number. Event ids derive
    from it and an ordinal, never from randomness, so a replay re-derives them."""

    __slots__ = ("job_id", "key", "seq", "_ordinal")

    def __init__(self, job_id: str, key: Any, seq: int) -> None:
        self.job_id = job_id
        self.key = key
        self.seq = seq
        self._ordinal = 0

    def next_event_id(self) -> uuid.UUID:
        self._ordinal += 1
        return uuid.uuid5(_ID_NAMESPACE, f"{self.job_id}/{self.key!r}/{self.seq}/{self._ordinal}")


class ActionContext(RunnerContext):
    """Context of one action invocation; valid only while the action runs.

    Sent events and memory writes are staged here; the action loop applies
    them only when the action returns without raising.
    """

    def __init__(
        self,
        run: RunIdentity,
        action_name: str,
        action_config: Dict[str, Any],
        sensory: StagedMemory,
        short_term: StagedMemory,
        resources: Callable[[str, ResourceType], Resource],
        job_config: Dict[str, Any],
    ) -> None:
        self._run = run
        self.action_name = action_name
        self._action_config = action_config
        self.sensory = sensory
        self.short_term = short_term
        self._resources = resources
        self._job_config = job_config
        self.sent_events: List[Event] = []

    @property
    def key(self) -> Any:
        return self._run.key

    @property
    def seq(self) -> int:
        """Sequence number of the record being processed (per key, from 0)."""
        return self._run.seq

    def send_event(self, event: Event) -> None:
        if not isinstance(event, Event):
            raise TypeError(
                f"action {self.action_name!r} sent a {type(event).__name__}; send_event takes an Event"
            )
        event.id = self._run.next_event_id()
        self.sent_events.append(event)

    @property
    def sensory_memory(self) -> MemoryObject:
        return MemoryNode(self.sensory)

    @property
    def short_term_memory(self) -> MemoryObject:
        return MemoryNode(self.short_term)

    def get_resource(self, name: str, type: ResourceType) -> Resource:
        return self._resources(name, type)

    @property
    def config(self) -> Dict[str, Any]:
        return dict(self._job_config)

    @property
    def action_config(self) -> Dict[str, Any]:
        return dict(self._action_config)

    def durable_execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"durable_execute got coroutine function {fn.__qualname__}; "
                "use 'await ctx.durable_execute_async(...)' in an async action"
            )
        return fn(*args, **kwargs)

    async def durable_execute_async(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)
