"""Prompt templates: text or a list of chat messages with ``{name}`` slots.

As in Flink Agents 0.3.1, ``Prompt`` is the abstract resource (users may
subclass it with their own ``format_string``/``format_messages``) and
``LocalPrompt`` the template prompt that ``Prompt.from_text`` and
``Prompt.from_messages`` build. Slots are filled by
``flink_agents.api.prompts.utils.format_string``: a slot with no value is
left as written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, List, Mapping, Sequence

from pydantic import model_validator

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.prompts.utils import format_string
from flink_agents.api.resource import ResourceType, SerializableResource

__all__ = ["LocalPrompt", "Prompt"]


class Prompt(SerializableResource, ABC):
    """A prompt: a resource that turns slot values into text or messages.

    Build a template prompt with ``Prompt.from_text(text)`` or
    ``Prompt.from_messages(messages)`` (both give a ``LocalPrompt``), or
    subclass ``Prompt`` and implement ``format_string`` and
    ``format_messages``. Validating a plain dict as a ``Prompt`` (a setup's
    ``prompt`` field read back from JSON) gives a ``LocalPrompt``.
    """

    @model_validator(mode="wrap")
    @classmethod
    def _dict_to_local_prompt(cls, data: Any, handler: Any) -> Any:
        if cls is Prompt and isinstance(data, Mapping):
            return LocalPrompt.model_validate(data)
        return handler(data)

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.PROMPT

    @staticmethod
    def from_text(text: str) -> "LocalPrompt":
        """A prompt of one text template."""
        return LocalPrompt(template=text)

    @staticmethod
    def from_messages(messages: Sequence[ChatMessage]) -> "LocalPrompt":
        """A prompt of several message templates (system, user, ...)."""
        return LocalPrompt(template=list(messages))

    @abstractmethod
    def format_string(self, **kwargs: Any) -> str:
        """The prompt filled with ``kwargs``, as one string."""

    @abstractmethod
    def format_messages(
        self, role: MessageRole = MessageRole.SYSTEM, **kwargs: Any
    ) -> List[ChatMessage]:
        """The prompt filled with ``kwargs``, as chat messages."""

    def fill_messages(
        self, values: Mapping[str, Any], role: MessageRole = MessageRole.SYSTEM
    ) -> List[ChatMessage]:
        """``format_messages`` with the slot values as a mapping (the chat
        action passes ``ChatRequestEvent.prompt_args`` here). Values are
        passed as ``str``, as Flink Agents 0.3.1's chat model setup passes
        them; a value named ``role`` sets the role, as it does there."""
        return self.format_messages(**{"role": role, **{str(k): str(v) for k, v in values.items()}})


class LocalPrompt(Prompt):
    """A template prompt (Flink Agents 0.3.1's ``LocalPrompt``).

    Attributes:
        template: One text template, or message templates whose ``content``
            holds the slots.
    """

    template: str | List[ChatMessage]

    def format_string(self, **kwargs: Any) -> str:
        """The filled template as one string; message templates are joined
        one per line as ``role: text`` (followed by the message's
        ``extra_args`` when it has any, as 0.3.1 writes them)."""
        if isinstance(self.template, str):
            return format_string(self.template, **kwargs)
        lines = []
        for message in self.template:
            line = f"{message.role.value}: {format_string(message.content, **kwargs)}"
            if message.extra_args:
                line += f"{message.extra_args}"
            lines.append(line)
        return "\n".join(lines)

    def format_messages(
        self, role: MessageRole = MessageRole.SYSTEM, **kwargs: Any
    ) -> List[ChatMessage]:
        """The filled template as chat messages; a text template becomes one
        message of ``role``; message templates keep their own roles."""
        return self.fill_messages(kwargs, role)

    def fill_messages(
        self, values: Mapping[str, Any], role: MessageRole = MessageRole.SYSTEM
    ) -> List[ChatMessage]:
        """``format_messages`` with the slot values as a mapping, so that any
        slot name works, ``role`` included."""
        values = {str(k): v for k, v in values.items()}
        if isinstance(self.template, str):
            return [ChatMessage(role=role, content=format_string(self.template, **values))]
        return [
            m.model_copy(update={"content": format_string(m.content, **values)})
            for m in self.template
        ]
