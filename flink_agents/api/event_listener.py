"""Event listeners: user code told about every event an agent processed.

Flink Agents 0.3.1 offers event listeners in Java only
(``org.apache.flink.agents.api.listener.EventListener``, configured with
``event-listeners``); this is the Python counterpart, with the same shape:
``on_event_processed(context, event)``. Configure listeners by import path::

    env.get_config().set(AgentConfigOptions.EVENT_LISTENERS, ["my_pkg.listeners:AuditListener"])

Each class is built once per operator instance (subtask), without arguments.

When a listener is called: after the event was processed (every action
listening to it finished) and what produced and handled it is durable in
the journal, the rule the progress stream follows (``docs/operations.md``,
"Event log and metrics"), so a listener never sees an event that a
failover could undo. A run that journals nothing (no model,
tool or ``durable_execute`` call) delivers its events when it finished.
After a failover a record's events are delivered again as its run replays
(at least once); event ids are deterministic, so ``event.id`` deduplicates.
A listener runs on the runtime's event loop: keep it quick. An exception
it raises is logged and does not fail the run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, List

from flink_agents.api.events.event import Event

__all__ = ["EventContext", "EventListener"]


@dataclass(frozen=True)
class EventContext:
    """Where and when an event was processed.

    Attributes:
        event_type: The event's ``EVENT_TYPE`` (``"_input_event"``, ...).
        event_class: The event's class as ``module.QualName``.
        timestamp: When the action loop took the event, ISO 8601 UTC
            (``2026-01-15T10:30:00.123Z``).
        key: The record's key.
        seq: The record's sequence number within its key (from 0).
        action: The action that sent the event (None for the ``InputEvent``).
        handled_by: The actions that processed it, in order (empty: none
            listens to its type).
    """

    event_type: str
    event_class: str
    timestamp: str
    key: Any
    seq: int
    action: str | None
    handled_by: List[str]


class EventListener(ABC):
    """Told about each processed event (see the module docstring)."""

    @abstractmethod
    def on_event_processed(self, context: EventContext, event: Event) -> None:
        """``event`` was processed and is durable.

        Args:
            context: Key, record, sender, handlers and time of the event.
            event: A copy of the event as the action loop took it.
        """
