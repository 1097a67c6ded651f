"""Prompt templates: text or a list of chat messages with ``{name}`` slots."""

from __future__ import annotations

import re
from typing import Any, List, Mapping, Sequence

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.resource import ResourceType, SerializableResource

__all__ = ["Prompt"]

# Only ``{identifier}`` is a slot, so JSON examples in a prompt ({"score": 1})
# stay as written; str.format would reject them.
_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _fill(template: str, values: dict[str, Any]) -> str:
    return _SLOT.sub(
        lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
        template,
    )


class Prompt(SerializableResource):
    """A prompt template.

    Build it with ``Prompt.from_text(text)`` or ``Prompt.from_messages(messages)``.
    Slots are ``{name}``; a slot with no value is left as written.
    """

    template: str | List[ChatMessage]

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.PROMPT

    @staticmethod
    def from_text(text: str) -> "Prompt":
        """A prompt of one text template."""
        return Prompt(template=text)

    @staticmethod
    def from_messages(messages: Sequence[ChatMessage]) -> "Prompt":
        """A prompt of several message templates (system, user, ...)."""
        return Prompt(template=list(messages))

    def format_string(self, **kwargs: Any) -> str:
        """The filled template as one string (messages joined as ``role: text``)."""
        if isinstance(self.template, str):
            return _fill(self.template, kwargs)
        return "\n".join(
            f"{m.role.value}: {_fill(m.content, kwargs)}" for m in self.template
        )

    def format_messages(
        self, role: MessageRole = MessageRole.SYSTEM, **kwargs: Any
    ) -> List[ChatMessage]:
        """The filled template as chat messages; a text template becomes one
        message of ``role``."""
        return self.fill_messages(kwargs, role)

    def fill_messages(
        self, values: Mapping[str, Any], role: MessageRole = MessageRole.SYSTEM
    ) -> List[ChatMessage]:
        """``format_messages`` with the slot values as a mapping, so that any
        slot name works, ``role`` included (the chat action uses this for
        ``ChatRequestEvent.prompt_args``)."""
        values = dict(values)
        if isinstance(self.template, str):
            return [ChatMessage(role=role, content=_fill(self.template, values))]
        return [
            m.model_copy(update={"content": _fill(m.content, values)})
            for m in self.template
        ]
