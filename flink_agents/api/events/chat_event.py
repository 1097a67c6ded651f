"""Events of the built-in chat action."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List
from uuid import UUID

from pydantic import Field

from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.events.event import Event

__all__ = ["ChatRequestEvent", "ChatResponseEvent"]


class ChatRequestEvent(Event):
    """Asks the chat model setup named ``model`` to answer ``messages``.

    The built-in chat action fills the setup's prompt with ``prompt_args``,
    runs the tool-call loop, and sends a ``ChatResponseEvent`` with the final
    answer.
    """

    EVENT_TYPE: ClassVar[str] = "_chat_request_event"

    model: str
    messages: List[ChatMessage]
    prompt_args: Dict[str, Any] = Field(default_factory=dict)


class ChatResponseEvent(Event):
    """The final answer (no tool calls) to the request ``request_id``."""

    EVENT_TYPE: ClassVar[str] = "_chat_response_event"

    request_id: UUID
    response: ChatMessage
