"""Chat messages exchanged with chat models."""

from __future__ import annotations

from enum import Enum
from typing import Any, Dict, List, Sequence

from pydantic import BaseModel, Field

__all__ = ["ChatMessage", "MessageRole", "find_first_system_message"]


class MessageRole(str, Enum):
    """Role of a chat message's author (the OpenAI chat-completions roles)."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ChatMessage(BaseModel):
    """One message of a conversation.

    Attributes:
        role: Who wrote it.
        content: Its text.
        tool_calls: For an assistant message, the calls it asks for, each
            ``{"id": str, "type": "function", "function": {"name": str,
            "arguments": dict}, "original_id": str | None}``; ``id`` is the
            runtime's own call id, ``original_id`` the provider's.
        extra_args: Provider-specific extras; a tool message carries
            ``tool_call_id`` (the runtime's id) here.
    """

    role: MessageRole = MessageRole.USER
    content: str = ""
    tool_calls: List[Dict[str, Any]] = Field(default_factory=list)
    extra_args: Dict[str, Any] = Field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.role.value}: {self.content}"


def find_first_system_message(messages: Sequence[ChatMessage]) -> int:
    """The index of the first system message of ``messages``, or -1 if there
    is none (Flink Agents 0.3.1's helper of the same name and module; its
    chat model setup inserts skill text right after that message).

    Raises:
        TypeError: An element of ``messages`` is not a ``ChatMessage`` (the
            message names its index).
    """
    for index, message in enumerate(messages):
        if not isinstance(message, ChatMessage):
            raise TypeError(
                f"messages[{index}] is a {type(message).__name__}; expected a ChatMessage"
            )
        if message.role == MessageRole.SYSTEM:
            return index
    return -1
