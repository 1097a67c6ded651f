"""Events of the built-in tool action."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List
from uuid import UUID

from pydantic import Field

from flink_agents.api.events.event import Event

__all__ = ["ToolRequestEvent", "ToolResponseEvent"]


class ToolRequestEvent(Event):
    """Asks the built-in tool action to run ``tool_calls`` for ``model``.

    Each call is ``{"id": str, "type": "function", "function": {"name": str,
    "arguments": dict}, "original_id": str | None}``.
    """

    EVENT_TYPE: ClassVar[str] = "_tool_request_event"

    model: str
    tool_calls: List[Dict[str, Any]]


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
