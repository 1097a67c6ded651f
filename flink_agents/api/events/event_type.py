"""``EventType``: the built-in event types as constants (Flink Agents HEAD).

``@action(EventType.InputEvent)`` listens to ``"_input_event"``, exactly as
``@action(InputEvent)`` or ``@action("_input_event")`` do; inside a trigger
condition expression ``EventType`` is a value: ``type ==
EventType.InputEvent && attributes.urgent == true``.
"""

from __future__ import annotations

from typing import Dict

from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.context_retrieval_event import (
    ContextRetrievalRequestEvent, ContextRetrievalResponseEvent,
)
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.events.memory_event import (
    LongTermGetEvent, LongTermSearchEvent, LongTermUpdateEvent, SensoryReadEvent, SensoryWriteEvent,
    ShortTermReadEvent, ShortTermWriteEvent,
)
from flink_agents.api.events.run_event import AgentRunBeginEvent
from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent

__all__ = ["EventType", "BUILTIN_EVENT_TYPES"]


class EventType:
    """Namespace of the built-in event types (each a class's ``EVENT_TYPE``)."""

    InputEvent: str = InputEvent.EVENT_TYPE
    OutputEvent: str = OutputEvent.EVENT_TYPE
    ChatRequestEvent: str = ChatRequestEvent.EVENT_TYPE
    ChatResponseEvent: str = ChatResponseEvent.EVENT_TYPE
    ToolRequestEvent: str = ToolRequestEvent.EVENT_TYPE
    ToolResponseEvent: str = ToolResponseEvent.EVENT_TYPE
    ContextRetrievalRequestEvent: str = ContextRetrievalRequestEvent.EVENT_TYPE
    ContextRetrievalResponseEvent: str = ContextRetrievalResponseEvent.EVENT_TYPE
    ShortTermWriteEvent: str = ShortTermWriteEvent.EVENT_TYPE
    ShortTermReadEvent: str = ShortTermReadEvent.EVENT_TYPE
    SensoryWriteEvent: str = SensoryWriteEvent.EVENT_TYPE
    SensoryReadEvent: str = SensoryReadEvent.EVENT_TYPE
    LongTermUpdateEvent: str = LongTermUpdateEvent.EVENT_TYPE
    LongTermGetEvent: str = LongTermGetEvent.EVENT_TYPE
    LongTermSearchEvent: str = LongTermSearchEvent.EVENT_TYPE
    AgentRunBeginEvent: str = AgentRunBeginEvent.EVENT_TYPE


# Constant name -> event type, for trigger condition expressions.
BUILTIN_EVENT_TYPES: Dict[str, str] = {
    name: value for name, value in vars(EventType).items() if not name.startswith("_")
}
