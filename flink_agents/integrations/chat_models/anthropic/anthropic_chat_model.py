"""Claude chat models over Anthropic's Messages API (``POST /v1/messages``),
through the official ``anthropic`` SDK (the ``anthropic`` extra: ``pip install -e '.[anthropic]'``).

Declare a connection and a setup over it (Flink Agents 0.3.1's names)::

    @chat_model_connection
    @staticmethod
    def anthropic() -> ResourceDescriptor:
        return ResourceDescriptor(clazz=ResourceName.ChatModel.ANTHROPIC_CONNECTION)

    @chat_model_setup
    @staticmethod
    def reviewer() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=ResourceName.ChatModel.ANTHROPIC_SETUP,
            connection="anthropic", model="claude-sonnet-4-20250514", tools=["notify"],
        )

How a conversation maps onto the Messages API (its public reference):

* system messages go to the top-level ``system`` parameter (text blocks, in
  order), never into ``messages``;
* ``messages`` holds only ``user`` and ``assistant`` turns. Consecutive
  messages of one role are merged into one turn (content blocks in order):
  the API wants the results of all tool calls of a turn in the one user
  message that follows it, and the runtime sends one tool message per call;
* an assistant message's tool calls are ``tool_use`` blocks whose ``id`` is
  the runtime's call id (providers reuse ids across turns; the runtime's are
  unique), a tool message is a ``tool_result`` block (``tool_use_id`` from
  ``extra_args["tool_call_id"]``) in a user turn, tool results first;
* a reply's ``thinking`` blocks are not kept, so extended thinking combined
  with tool use (which needs them sent back) is not supported.

Errors (after the SDK's own retries, ``max_retries`` with backoff, on
connection errors, 408, 409, 429 and 5xx): ``anthropic.APIStatusError`` becomes
the ``ModelCallError`` subclass for its status and the message of Anthropic's
error body (``error_for_status``): 429 ``rate_limit_error`` is
``ModelRateLimited``, 529 ``overloaded_error`` ``ModelOverloaded``, 400
"prompt is too long" ``ModelContextTooLong``, 401/403
``ModelAuthenticationError``; ``APIConnectionError``/``APITimeoutError``
become ``ModelUnreachable``. The SDK's exception is the ``__cause__``.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
from typing import Any, ClassVar, Dict, List, Sequence

from pydantic import Field, PrivateAttr

from flink_agents.api.agents.types import OutputSchema
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.chat_models.errors import (
    ModelAuthenticationError,
    ModelCallError,
    ModelResponseError,
    ModelUnreachable,
    error_for_status,
    retry_after_s,
)
from flink_agents.api.events.chat_event import as_output_schema
from flink_agents.api.tools.tool import Tool, ToolMetadata
from flink_agents.integrations.chat_models._per_loop import SdkClients
from flink_agents.integrations.sdk import import_sdk

__all__ = [
    "AnthropicChatModelConnection",
    "AnthropicChatModelSetup",
    "convert_to_anthropic_message",
    "convert_to_anthropic_messages",
    "convert_to_anthropic_system_prompts",
    "from_anthropic_message",
    "to_anthropic_tool",
]

PROVIDER = "anthropic"
API_KEY_ENV = "ANTHROPIC_API_KEY"
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-20250514"
DEFAULT_MAX_TOKENS = 1024
DEFAULT_TEMPERATURE = 0.1
_MAX_DESCRIPTION_CHARS = 1024
# Messages API body fields that the installed SDK's ``messages.create`` may
# not declare as keyword arguments (2.x dropped the sampling ones): sent in
# ``extra_body`` then, so the request body is the same.
_BODY_ONLY_FIELDS = ("temperature", "top_p", "top_k")


def _sdk() -> Any:
    return import_sdk("anthropic", extra="anthropic", what="AnthropicChatModelConnection")


# -- conversation -> Messages API ------------------------------------------------------


def to_anthropic_tool(*, metadata: ToolMetadata, skip_length_check: bool = False) -> Dict[str, Any]:
    """A tool as the Messages API's ``tools`` entry: ``{"name", "description",
    "input_schema"}``, ``input_schema`` being the arguments' JSON schema
    (``type: "object"``, as the API requires).

    Raises:
        ValueError: The description is longer than 1024 characters (Flink
            Agents 0.3.1's check; ``skip_length_check`` skips it).
    """
    if not skip_length_check and len(metadata.description) > _MAX_DESCRIPTION_CHARS:
        raise ValueError(
            f"tool {metadata.name!r}: description has {len(metadata.description)} characters, more than "
            f"{_MAX_DESCRIPTION_CHARS}; shorten it or move the detail into the prompt"
        )
    schema = {"type": "object", **metadata.get_parameters_dict()}
    return {"name": metadata.name, "description": metadata.description, "input_schema": schema}


def _arguments_of(call: Dict[str, Any]) -> Dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        arguments = json.loads(arguments) if arguments.strip() else {}
    if not isinstance(arguments, dict):
        raise ValueError(f"tool call {call.get('id')!r}: arguments must be a JSON object, got {arguments!r:.80}")
    return arguments


def convert_to_anthropic_message(message: ChatMessage) -> Dict[str, Any]:
    """One user, assistant or tool message as a Messages API turn ``{"role",
    "content"}``.

    A tool message becomes a user turn holding one ``tool_result`` block; an
    assistant message with tool calls a list of blocks (its text, if any,
    then one ``tool_use`` block per call, ``id`` the runtime's call id).

    Raises:
        ValueError: A system message (it belongs in ``system``: see
            ``convert_to_anthropic_system_prompts``), a tool message without
            ``extra_args["tool_call_id"]``, or tool-call arguments that are
            not a JSON object.
    """
    role = MessageRole(message.role)
    if role == MessageRole.SYSTEM:
        raise ValueError("a system message is not a Messages API turn; send it as the `system` parameter")
    if role == MessageRole.TOOL:
        call_id = message.extra_args.get("tool_call_id")
        if not call_id:
            raise ValueError(f"tool message has no extra_args['tool_call_id']: {message.content[:80]!r}")
        block = {"type": "tool_result", "tool_use_id": str(call_id), "content": message.content}
        return {"role": "user", "content": [block]}
    if role == MessageRole.ASSISTANT and message.tool_calls:
        blocks: List[Dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
        for call in message.tool_calls:
            blocks.append({
                "type": "tool_use",
                "id": str(call["id"]),  # the runtime's id, never original_id
                "name": (call.get("function") or {}).get("name"),
                "input": _arguments_of(call),
            })
        return {"role": "assistant", "content": blocks}
    return {"role": role.value, "content": message.content}


def _as_blocks(content: Any) -> List[Dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def convert_to_anthropic_messages(messages: Sequence[ChatMessage]) -> List[Dict[str, Any]]:
    """The conversation's user, assistant and tool messages as Messages API
    ``messages`` (system messages are left out).

    Consecutive turns of one role are merged into one turn whose content is
    the blocks of each, in order (empty texts dropped); in a merged user turn
    the ``tool_result`` blocks come first, as the API requires.

    Raises:
        ValueError: As ``convert_to_anthropic_message``.
    """
    turns: List[Dict[str, Any]] = []
    for message in messages:
        if message.role == MessageRole.SYSTEM:
            continue
        turn = convert_to_anthropic_message(message)
        if turns and turns[-1]["role"] == turn["role"]:
            merged = _as_blocks(turns[-1]["content"]) + _as_blocks(turn["content"])
            # Stable sort: tool results first, the rest in order.
            merged.sort(key=lambda block: block.get("type") != "tool_result")
            turns[-1] = {"role": turn["role"], "content": merged}
        else:
            turns.append(turn)
    return turns


def convert_to_anthropic_system_prompts(messages: Sequence[ChatMessage]) -> List[Dict[str, Any]]:
    """The conversation's system messages, in order, as the Messages API's
    ``system`` text blocks ``{"type": "text", "text"}`` (empty ones left out)."""
    return [
        {"type": "text", "text": m.content} for m in messages if m.role == MessageRole.SYSTEM and m.content
    ]


# -- Messages API -> reply ---------------------------------------------------------------


def _structured_output_tool(schema: OutputSchema) -> Dict[str, Any]:
    input_schema = schema.json_schema()
    if input_schema.get("type") != "object":
        raise ValueError(
            f"output schema {schema.name!r}: Anthropic answers structured output through a tool, whose "
            f"input must be a JSON object; got a schema of type {input_schema.get('type')!r}"
        )
    return {
        "name": schema.name,
        "description": "Give your final answer as this tool's input; call it once you have the answer.",
        "input_schema": input_schema,
    }


def anthropic_usage(usage: Any) -> Dict[str, int]:
    """An Anthropic ``Usage`` as ``{"prompt_tokens" (every input token:
    uncached, cache reads and cache writes), "completion_tokens"[,
    "cached_tokens" (cache reads)]}``."""
    read = getattr(usage, "cache_read_input_tokens", None)
    created = getattr(usage, "cache_creation_input_tokens", None)
    fields = {
        "prompt_tokens": (usage.input_tokens or 0) + (read or 0) + (created or 0),
        "completion_tokens": usage.output_tokens or 0,
    }
    if isinstance(read, int):
        fields["cached_tokens"] = read
    return fields


def from_anthropic_message(message: Any, output_tool: str | None = None) -> ChatMessage:
    """A Messages API response as the reply message.

    Args:
        message: The SDK's ``Message`` (``content`` blocks, ``model``,
            ``stop_reason``, ``usage``).
        output_tool: The name of the structured-output tool offered, if any:
            when it is the only tool the model called, the reply's content is
            its input as JSON text and the reply has no tool calls. When the
            model called other tools too, those are returned (they have
            effects the answer must not skip) and it is asked again after.

    Returns:
        ``ChatMessage(role=ASSISTANT)``: the text blocks joined, tool calls
        ``{"id", "type": "function", "function": {"name", "arguments":
        dict}, "original_id"}`` (both ids Anthropic's ``tool_use`` id; the
        runtime assigns its own), ``extra_args`` ``{"model_name",
        "stop_reason", "usage": {"prompt_tokens", "completion_tokens"[,
        "cached_tokens"]}}``. ``prompt_tokens`` is the whole input, as
        OpenAI counts it: Anthropic's ``input_tokens`` (the uncached rest)
        plus ``cache_read_input_tokens`` plus ``cache_creation_input_tokens``;
        ``cached_tokens`` is ``cache_read_input_tokens``, present when the
        response reports it (``runtime.execution.usage``).

    Raises:
        ModelResponseError: A ``tool_use`` input is not a JSON object.
    """
    text = "".join(block.text for block in message.content if block.type == "text")
    calls = []
    answer = None
    for block in message.content:
        if block.type != "tool_use":
            continue
        if not isinstance(block.input, dict):
            raise ModelResponseError(
                f"the model called tool {block.name!r} with an input that is not a JSON object: {block.input!r:.200}",
                PROVIDER,
            )
        if output_tool is not None and block.name == output_tool:
            answer = block.input
            continue
        calls.append({
            "id": block.id,
            "type": "function",
            "function": {"name": block.name, "arguments": block.input},
            "original_id": block.id,
        })
    if answer is not None and not calls:
        text = json.dumps(answer)
    extra: Dict[str, Any] = {"model_name": message.model, "stop_reason": message.stop_reason}
    if message.usage is not None:
        extra["usage"] = anthropic_usage(message.usage)
    return ChatMessage(role=MessageRole.ASSISTANT, content=text, tool_calls=calls, extra_args=extra)


def _sdk_call_errors() -> tuple[type, ...]:
    """What a failed call raises: an HTTP error status, or no response."""
    anthropic = _sdk()
    return (anthropic.APIStatusError, anthropic.APIConnectionError)


def _failure(exc: Exception) -> ModelCallError:
    """The ``ModelCallError`` for an exception of the SDK (see the module docstring)."""
    anthropic = _sdk()
    if isinstance(exc, anthropic.APIStatusError):
        message = getattr(exc, "api_message", None)
        if not message and isinstance(exc.body, dict):
            message = (exc.body.get("error") or {}).get("message")
        return error_for_status(
            exc.status_code, message or str(exc), PROVIDER,
            retry_after_s=retry_after_s(getattr(getattr(exc, "response", None), "headers", None)),
        )
    return ModelUnreachable(f"{type(exc).__name__}: {exc}", PROVIDER)


class AnthropicChatModelConnection(BaseChatModelConnection):
    """A connection to Anthropic's Messages API.

    ``chat`` uses a shared ``anthropic.Anthropic`` client (thread-safe);
    ``achat`` (what the runtime awaits) an ``anthropic.AsyncAnthropic`` client
    per event loop, since an async client is bound to the loop it first ran
    on. Clients are created on first use and closed by ``close()``.

    Structured output (``supports_output_schema``): with ``output_schema``
    among the call's keywords, a tool named after the schema, whose
    ``input_schema`` is the schema, is offered and forced (``tool_choice``
    ``{"type": "tool", "name"}``, or ``{"type": "any"}`` beside other tools);
    its input comes back as the reply's JSON content (``from_anthropic_message``).
    The API refuses a forced tool with extended ``thinking``.

    Attributes:
        api_key: The API key; None reads ``ANTHROPIC_API_KEY``.
        base_url: The API root, e.g. ``http://127.0.0.1:8080`` (the SDK posts
            to ``{base_url}/v1/messages``); None is the SDK's default
            (``ANTHROPIC_BASE_URL`` or https://api.anthropic.com).
        max_retries: How often the SDK retries a failed request (with backoff).
        timeout: Timeout of one HTTP request, in seconds (0.3.1's name).
    """

    supports_output_schema: ClassVar[bool] = True

    api_key: str | None = Field(default=None, repr=False)
    base_url: str | None = None
    max_retries: int = Field(default=3, ge=0)
    timeout: float = Field(default=60.0, gt=0)

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _clients: SdkClients | None = PrivateAttr(default=None)

    def _client_options(self) -> Dict[str, Any]:
        key = self.api_key or os.environ.get(API_KEY_ENV)
        if not key:
            raise ModelAuthenticationError(
                f"no Anthropic API key: set the connection's api_key or the {API_KEY_ENV} environment variable",
                PROVIDER,
            )
        return {"api_key": key, "base_url": self.base_url, "max_retries": self.max_retries, "timeout": self.timeout}

    @property
    def client(self) -> Any:
        """The shared ``anthropic.Anthropic`` client of ``chat`` (created on
        first use, as 0.3.1's ``client``); ``achat`` uses an
        ``AsyncAnthropic`` client per event loop instead."""
        return self._sync()

    def _pool(self) -> SdkClients:
        with self._lock:
            if self._clients is None:
                self._clients = SdkClients(
                    lambda: _sdk().Anthropic(**self._client_options()),
                    lambda: _sdk().AsyncAnthropic(**self._client_options()),
                )
            return self._clients

    def _sync(self) -> Any:
        return self._pool().sync()

    @staticmethod
    def _request(
        create: Any, messages: Sequence[ChatMessage], tools: List[Tool] | None, kwargs: Dict[str, Any]
    ) -> tuple[Dict[str, Any], str | None]:
        """The ``messages.create`` keywords, and the structured-output tool's name."""
        settings = dict(kwargs)
        schema = as_output_schema(settings.pop("output_schema", None))
        if not settings.get("model"):
            raise ValueError("an Anthropic chat call needs a model name (set AnthropicChatModelSetup.model)")
        if settings.get("stream"):
            raise ValueError("AnthropicChatModelConnection does not stream; remove stream=True from the settings")
        request: Dict[str, Any] = {"max_tokens": DEFAULT_MAX_TOKENS, "messages": convert_to_anthropic_messages(messages)}
        system = convert_to_anthropic_system_prompts(messages)
        if system:
            request["system"] = system
        offered = [to_anthropic_tool(metadata=t.metadata) for t in tools or []]
        output_tool = None
        if schema is not None:
            tool = _structured_output_tool(schema)
            output_tool = tool["name"]
            if any(t["name"] == output_tool for t in offered):
                raise ValueError(f"output schema {output_tool!r} has the name of an offered tool; rename one")
            request["tool_choice"] = {"type": "any"} if offered else {"type": "tool", "name": output_tool}
            offered.append(tool)
        if offered:
            request["tools"] = offered
        declared = inspect.signature(create).parameters
        body_only = {}
        for name, value in settings.items():
            if name in declared:
                request[name] = value
            elif name in _BODY_ONLY_FIELDS:
                body_only[name] = value
            else:
                raise ValueError(f"unknown Anthropic Messages API setting {name!r} (see messages.create)")
        if body_only:
            request["extra_body"] = {**body_only, **(request.get("extra_body") or {})}
        return request, output_tool

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        """Call the model (blocking).

        Args:
            messages: The conversation, oldest first (see the module docstring).
            tools: Tools offered to the model.
            **kwargs: ``model`` (required), ``max_tokens`` (default 1024),
                ``temperature``, ``top_p``, ``top_k``, other ``messages.create``
                parameters, and ``output_schema`` (see the class docstring).

        Returns:
            The reply (see ``from_anthropic_message``).

        Raises:
            ValueError: No model, an unknown setting, or a message that cannot
                be converted.
            ModelCallError: The call failed (see the module docstring).
        """
        client = self._sync()
        request, output_tool = self._request(client.messages.create, messages, tools, kwargs)
        try:
            response = client.messages.create(**request)
        except _sdk_call_errors() as exc:
            raise _failure(exc) from exc
        return from_anthropic_message(response, output_tool)

    async def achat(
        self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any
    ) -> ChatMessage:
        """Call the model without blocking the event loop; as ``chat``."""
        client = await self._pool().current()
        request, output_tool = self._request(client.messages.create, messages, tools, kwargs)
        try:
            response = await client.messages.create(**request)
        except _sdk_call_errors() as exc:
            raise _failure(exc) from exc
        return from_anthropic_message(response, output_tool)

    def close(self) -> None:
        """Close the clients; a later call opens new ones (an async client is
        closed on its own loop, see ``PerLoopClients``)."""
        with self._lock:
            clients = self._clients
        if clients is not None:
            clients.close()


class AnthropicChatModelSetup(BaseChatModelSetup):
    """Which Claude model to use over an ``AnthropicChatModelConnection``
    (Flink Agents 0.3.1's fields and defaults).

    Attributes:
        model: The model name; defaults to ``claude-sonnet-4-20250514``.
        max_tokens: Cap on the reply's tokens (the API requires one); 1024.
        temperature: Sampling temperature, 0.0 to 1.0; 0.1.
        additional_kwargs: Further ``messages.create`` parameters
            (``top_p``, ``top_k``, ``stop_sequences``, ``metadata``, ...),
            as 0.3.1's documentation lists them.
    """

    model: str = DEFAULT_ANTHROPIC_MODEL
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    temperature: float = Field(default=DEFAULT_TEMPERATURE, ge=0.0, le=1.0)
    additional_kwargs: Dict[str, Any] = Field(default_factory=dict)

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model``, ``max_tokens``, ``temperature``, then ``additional_kwargs``."""
        return {
            "model": self.model, "max_tokens": self.max_tokens, "temperature": self.temperature,
            **self.additional_kwargs,
        }
