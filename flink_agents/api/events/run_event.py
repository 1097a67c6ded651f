"""Run lifecycle events (Flink Agents HEAD's ``run_event`` module)."""

from __future__ import annotations

from typing import Any, ClassVar, Dict

from flink_agents.api.events.event import Event
from flink_agents.api.events.memory_event import REBUILT, observation_attributes

__all__ = ["AGENT_RUN_BEGIN_ACTION", "AgentRunBeginEvent"]

# The framework's virtual action named as the sender of an AgentRunBeginEvent.
AGENT_RUN_BEGIN_ACTION = "agent_run_begin_action"


class AgentRunBeginEvent(Event):
    """The key's short-term memory values as a run starts.

    Sent only when ``agent-run.begin-event`` is true (default false), before
    any action of the run; ``attributes = {"key": <key as text>, "value":
    {dotted path: value}}`` with the value nodes only (no object markers,
    no runtime-reserved entries). Its lineage points to the run's
    ``InputEvent`` through the virtual action ``agent_run_begin_action``.
    The runtime journals it, so a replay sends the same snapshot.
    """

    EVENT_TYPE: ClassVar[str] = "_agent_run_begin_event"

    def __init__(self, *, key: Any = REBUILT, value: Any = REBUILT, **data: Any) -> None:
        """Raises: see ``memory_event.observation_attributes``."""
        if key is REBUILT and value is REBUILT and "attributes" in data:
            super().__init__(**data)  # read back (journal, JSON)
            return
        data.setdefault("type", AgentRunBeginEvent.EVENT_TYPE)
        super().__init__(attributes=observation_attributes(key, value), **data)

    @classmethod
    def from_event(cls, event: Event) -> "AgentRunBeginEvent":  # type: ignore[override]
        """The typed view of ``event`` (same id and lineage)."""
        if isinstance(event, AgentRunBeginEvent):
            return event
        made = AgentRunBeginEvent(key=event.attributes.get("key"), value=event.attributes.get("value"))
        return made.reconstruct_from(event)

    @property
    def key(self) -> str:
        """The run's key, as text."""
        return self.attributes.get("key")

    @property
    def value(self) -> Dict[str, Any]:
        """Short-term memory values at the run's start, by dotted path."""
        return self.attributes.get("value")
