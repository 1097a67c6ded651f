"""Events of the built-in tool action."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Optional
from uuid import UUID

from pydantic import Field

from flink_agents.api.events.event import Event

__all__ = ["ToolRequestEvent", "ToolResponseEvent"]


class ToolRequestEvent(Event):
    """Asks the built-in tool action to run ``tool_calls`` for ``model``.

    Each call is ``{"id": str, "type": "function", "function": {"name": str,
    "arguments": dict}, "original_id": str | None}``.

    Attributes:
        offered_tools: Names of the tools the request offered the model (the
            ``tools`` of its chat model setup, built-in callback tools
            included); the tool action runs only these, and answers a call
            to any other name with an error result that lists them. The
            built-in chat action fills it in; ``None`` (an event built by
            user code, or queued by an earlier release) means the ``tools``
            of the chat model setup named ``model``.
    """

    EVENT_TYPE: ClassVar[str] = "_tool_request_event"

    model: str
    tool_calls: List[Dict[str, Any]]
    offered_tools: Optional[List[str]] = None


class ToolResponseEvent(Event):
    """Results of the calls of the request ``request_id``.

    Attributes:
        responses: Runtime call id -> the tool's result (or error text).
        external_ids: Runtime call id -> the provider's call id.
        errors: Runtime call id -> error text, for calls that raised.
    """

    EVENT_TYPE: ClassVar[str] = "_tool_response_event"

    request_id: UUID
    responses: Dict[str, Any]
    external_ids: Dict[str, str | None] = Field(default_factory=dict)
    errors: Dict[str, str] = Field(default_factory=dict)
