"""Chat model resources: a connection (how to reach a provider) and a setup
(which model, prompt and tools to use over a connection).

Users subclass both for their own providers. The runtime's built-in chat action
calls ``BaseChatModelSetup.achat``; a connection that only implements ``chat``
is run on a worker thread so it does not block other keys.
"""

from __future__ import annotations

import asyncio
import functools
import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Dict, List, Literal, Mapping, Optional, Sequence

from pydantic import Field, PrivateAttr, field_validator

from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.chat_event import as_output_schema
from flink_agents.api.prompts.prompt import LocalPrompt, Prompt
from flink_agents.api.resource import Resource, ResourceType
from flink_agents.api.tools.tool import Tool

__all__ = ["BaseChatModelConnection", "BaseChatModelSetup", "output_schema_instruction", "with_system_message"]


class BaseChatModelConnection(Resource, ABC):
    """How to reach a model service (address, credentials, timeouts).

    One connection may serve several setups.

    Structured output: a connection whose class sets
    ``supports_output_schema = True`` receives ``output_schema`` (an
    ``api.agents.types.OutputSchema``) among the ``chat``/``achat`` keyword
    arguments when an answer must have a schema, and asks its provider with
    the provider's own mechanism (OpenAI ``response_format``, Ollama
    ``format``, Anthropic tool use). Other connections never receive it: the
    built-in chat action gives them the schema as a system instruction. In
    both cases the action validates the answer and re-asks on a mismatch.
    """

    supports_output_schema: ClassVar[bool] = False

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.CHAT_MODEL_CONNECTION

    @abstractmethod
    def chat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Send ``messages`` (and the tools offered) and return the reply.

        Args:
            messages: The conversation, oldest first.
            tools: Tools the model may call; their calls come back in
                ``ChatMessage.tool_calls`` with ``arguments`` as a dict.
            **kwargs: Model settings (``model``, ``temperature``, ...).
        """

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Async ``chat``; the default runs ``chat`` on a worker thread."""
        return await asyncio.to_thread(self.chat, messages, tools, **kwargs)


class BaseChatModelSetup(Resource):
    """Which model to use over which connection, with which prompt and tools.

    Attributes:
        connection: Name of a ``CHAT_MODEL_CONNECTION`` resource.
        model: The provider's model name.
        prompt: A ``Prompt`` or the name of a ``PROMPT`` resource; its filled
            messages go before the request's messages.
        tools: Names of ``TOOL`` resources offered to the model.
        conversation: ``"none"``: each request stands alone. ``"per_key"``:
            the built-in chat action keeps the key's conversation across
            records in short-term memory (each ``ChatRequestEvent`` is a
            turn; the model sees the earlier turns first); see
            ``docs/conversations.md``.
        conversation_max_messages: Bound of a ``per_key`` conversation, in
            messages (at least 2); whole oldest turns are dropped to keep it.
        conversation_max_tokens: Optional bound in estimated tokens
            (``ceil(chars / 4)`` plus 4 per message; at least 1).
        skills: Names of the agent's SKILL.md skills offered to the model
            (``flink_agents.api.skills``), as Flink Agents 0.3.1's ``skills``:
            each call gets a system message listing them (after the first
            system message), and the built-in ``load_skill`` tool is offered.
        output_schema: The schema final answers must match (structured
            output), used when a ``ChatRequestEvent`` has none: an
            ``OutputSchema``, a pydantic model class, a ``RowTypeInfo``, a
            JSON schema ``dict``, or the serialized form
            ``OutputSchema.model_dump()`` (which a plan written as JSON
            keeps); normalised to an ``OutputSchema``. See ``chat``.
    """

    connection: str
    model: str = ""
    prompt: Prompt | str | None = None
    tools: List[str] = Field(default_factory=list)
    conversation: Literal["none", "per_key"] = "none"
    conversation_max_messages: int = 40
    conversation_max_tokens: Optional[int] = None
    skills: Optional[List[str]] = None
    output_schema: Optional[OutputSchema] = None
    # Flink Agents 0.3.1's fields, so that its code reads and sets them:
    # the skills' system message, which ``open`` fills as 0.3.1's does (None
    # without skills), and its bash tool's settings, which this runtime
    # keeps but does not act on (it offers no bash tool: a plan setting them
    # gets a warning, ``flink_agents.plan.skills``).
    skill_discovery_prompt: Optional[str] = None
    allowed_commands: List[str] = Field(default_factory=list)
    allowed_script_dirs: List[str] = Field(default_factory=list)

    # 0.3.1's name: code (and tests) written for 0.3.1 may set it directly.
    _resolved_connection: BaseChatModelConnection | None = PrivateAttr(default=None)
    _prompt: Prompt | None = PrivateAttr(default=None)
    _tools: List[Tool] = PrivateAttr(default_factory=list)
    _opened: bool = PrivateAttr(default=False)

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.CHAT_MODEL

    @field_validator("output_schema", mode="before")
    @classmethod
    def _normalise_output_schema(cls, value: Any) -> Optional[OutputSchema]:
        return as_output_schema(value)

    @field_validator("conversation_max_messages")
    @classmethod
    def _check_max_messages(cls, value: int) -> int:
        if value < 2:
            raise ValueError(
                f"conversation_max_messages must be at least 2 (a user message and its answer), got {value}"
            )
        return value

    @field_validator("conversation_max_tokens")
    @classmethod
    def _check_max_tokens(cls, value: Optional[int]) -> Optional[int]:
        if value is not None and value < 1:
            raise ValueError(
                f"conversation_max_tokens must be at least 1 (or None: no token bound), got {value}"
            )
        return value

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """Settings passed to the connection with every call."""
        return {"model": self.model} if self.model else {}

    def open(self) -> None:
        """Resolve the prompt and tools by name. The connection is resolved
        when first used (``chat``/``achat``), so a setup that overrides
        ``chat`` and never uses it needs none, as in Flink Agents 0.3.1.

        Raises:
            KeyError: A named prompt or tool does not exist.
        """
        if self.get_resource is None and (isinstance(self.prompt, str) or self.skills or self.tools):
            raise RuntimeError(
                f"{type(self).__name__} was created outside a runtime: its prompt, tools or skills "
                "are named resources, which only a runtime resolves"
            )
        if isinstance(self.prompt, str):
            self._prompt = self.get_resource(self.prompt, ResourceType.PROMPT)
        else:
            self._prompt = self.prompt
        if self.skills:
            from flink_agents.api.skills import LOAD_SKILL_TOOL

            if LOAD_SKILL_TOOL not in self.tools:
                self.tools = [*self.tools, LOAD_SKILL_TOOL]
            self.skill_discovery_prompt = self.get_resource(LOAD_SKILL_TOOL, ResourceType.TOOL).discovery_prompt(
                self.skills)
        self._tools = [self.get_resource(t, ResourceType.TOOL) for t in self.tools]
        self._opened = True

    @property
    def offered_tools(self) -> List[Tool]:
        """The resolved tools offered to the model."""
        return list(self._tools)

    def _prepare(
        self, messages: Sequence[ChatMessage], prompt_args: Mapping[str, Any] | None
    ) -> List[ChatMessage]:
        # Read per call: private attributes from their slot, not through
        # pydantic's ``__getattr__`` (several microseconds each).
        private = self.__pydantic_private__
        if not private["_opened"]:
            self.open()
        if private["_resolved_connection"] is None:
            if self.get_resource is None:
                raise RuntimeError(
                    f"{type(self).__name__} was created outside a runtime: its connection "
                    f"{self.connection!r} is a named resource, which only a runtime resolves"
                )
            # KeyError naming this setup and the connection if it is missing.
            self._resolved_connection = self.get_resource(
                self.connection, ResourceType.CHAT_MODEL_CONNECTION
            )
        prompt = private["_prompt"]
        if prompt is None:
            return self._with_skills(list(messages))
        prepared = prompt.fill_messages(prompt_args or {})
        # Drop empty user/system messages (the prompt carries the text); keep
        # every assistant and tool message: a tool call needs its answer.
        prepared.extend(
            m for m in messages
            if m.content or m.role in (MessageRole.ASSISTANT, MessageRole.TOOL)
        )
        return self._with_skills(prepared)

    def _record_token_metrics(self, model_name: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Add a call's token counts to ``model.<model_name>.promptTokens``
        and ``.completionTokens`` under the bound metric group; nothing
        without one (0.3.1's protected method, which its chat action calls).

        The runtime does not call it: it counts tokens from the journaled
        usage of each call, once, never for a replayed call
        (``runtime.execution.metrics``); a setup calling it too would count
        its calls twice.
        """
        group = self.metric_group
        if group is None:
            return
        model_group = group.get_sub_group("model", model_name)
        model_group.get_counter("promptTokens").inc(prompt_tokens)
        model_group.get_counter("completionTokens").inc(completion_tokens)

    def _with_skills(self, messages: List[ChatMessage]) -> List[ChatMessage]:
        """Insert the skills' system message after the first system message
        (first if there is none), as Flink Agents 0.3.1 does."""
        skills_prompt = self.__dict__["skill_discovery_prompt"]  # set by ``open`` where skills are offered
        if not skills_prompt or not self.skills:
            return messages
        return with_system_message(messages, skills_prompt)

    def _schema_arguments(
        self, prepared: List[ChatMessage], kwargs: Dict[str, Any]
    ) -> tuple[List[ChatMessage], Dict[str, Any]]:
        """The messages and keyword arguments for the connection, with the
        ``output_schema`` keyword (if any) turned into what the connection
        understands: passed on to a connection whose class sets
        ``supports_output_schema`` (it asks its provider natively), else
        replaced by a system message asking for JSON matching the schema."""
        schema = as_output_schema(kwargs.pop("output_schema", None))
        arguments = {**self.model_kwargs, **kwargs}
        if schema is None:
            return prepared, arguments
        if getattr(type(self.__pydantic_private__["_resolved_connection"]), "supports_output_schema", False):
            arguments["output_schema"] = schema
            return prepared, arguments
        return with_system_message(prepared, output_schema_instruction(schema)), arguments

    def chat(
        self,
        messages: Sequence[ChatMessage],
        prompt_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Fill the prompt with ``prompt_args``, prepend it, and call the model.

        Args:
            messages: The conversation, oldest first.
            prompt_args: Values for the prompt's placeholders.
            **kwargs: Model settings over ``model_kwargs``; ``output_schema``
                (anything ``ChatRequestEvent`` takes as one) asks for an
                answer matching that schema: natively when the connection's
                class sets ``supports_output_schema``, else by a system
                message (after the first system message) asking for JSON
                matching ``schema.json_schema()``. The answer is not
                validated here (the built-in chat action does that).
        """
        prepared = self._prepare(messages, prompt_args)
        assert self._resolved_connection is not None  # set by _prepare
        prepared, arguments = self._schema_arguments(prepared, dict(kwargs))
        return self._resolved_connection.chat(prepared, tools=self._tools, **arguments)

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        prompt_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Async ``chat``. A subclass that overrides ``chat`` (and not
        ``achat``), as Flink Agents 0.3.1 setups do, has its ``chat`` run on
        a worker thread, so the built-in chat action uses it."""
        if type(self).chat is not BaseChatModelSetup.chat and type(self).achat is BaseChatModelSetup.achat:
            return await asyncio.to_thread(
                functools.partial(self.chat, messages, prompt_args=prompt_args, **kwargs)
            )
        private = self.__pydantic_private__
        prompt = private["_prompt"]
        if prompt is None or isinstance(prompt, LocalPrompt):
            prepared = self._prepare(messages, prompt_args)
        else:
            # Another prompt may do I/O to fill itself (an MCP prompt asks its
            # server): off the event loop, which runs other keys meanwhile.
            prepared = await asyncio.to_thread(self._prepare, messages, prompt_args)
        connection = private["_resolved_connection"]
        assert connection is not None  # set by _prepare
        prepared, arguments = self._schema_arguments(prepared, dict(kwargs))
        return await connection.achat(prepared, tools=private["_tools"], **arguments)


def output_schema_instruction(schema: OutputSchema) -> str:
    """The system instruction that asks a model without native structured
    output for an answer matching ``schema``."""
    return (
        "Answer only with a JSON value that matches this JSON schema, with no other text "
        f"(no Markdown code fence):\n{json.dumps(schema.json_schema(), sort_keys=True)}"
    )


def with_system_message(messages: List[ChatMessage], text: str) -> List[ChatMessage]:
    """``messages`` with a system message ``text`` inserted after the first
    system message (first when there is none), as Flink Agents 0.3.1 inserts
    its own instructions; a new list."""
    first = next((i for i, m in enumerate(messages) if m.role == MessageRole.SYSTEM), -1)
    out = list(messages)
    out.insert(first + 1, ChatMessage(role=MessageRole.SYSTEM, content=text))
    return out
