"""Chat models over the OpenAI chat-completions API, or any server speaking it
(vLLM, llama.cpp, LM Studio, LiteLLM, ...), through the official ``openai`` SDK.

Declare a connection and a setup over it::

    @chat_model_connection
    @staticmethod
    def openai() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION,
            base_url="http://localhost:8000/v1",
        )

    @chat_model_setup
    @staticmethod
    def reviewer() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
            connection="openai", model="gpt-4o-mini", tools=["notify"],
        )

Errors: the SDK's exceptions propagate unchanged, after the SDK's own retries
(``max_retries``, with backoff, on connection errors, 408, 409, 429 and 5xx):
``openai.APIStatusError`` subclasses for HTTP errors (``AuthenticationError``
401, ``RateLimitError`` 429, ``InternalServerError`` 5xx, ...),
``openai.APIConnectionError`` and ``openai.APITimeoutError``. In an agent they
fail the chat action, which the runtime reports as ``ActionFailed`` with the
SDK error as its cause. A reply whose tool-call arguments are not a JSON object
raises ``ValueError``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any, Dict, List, Mapping, Sequence

import openai
from pydantic import Field, PrivateAttr

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.tools.tool import Tool
from flink_agents.integrations.chat_models._per_loop import PerLoopClients

__all__ = [
    "OpenAIChatModelConnection",
    "OpenAIChatModelSetup",
    "from_openai_completion",
    "to_openai_messages",
    "to_openai_tools",
]

API_KEY_ENV = "OPENAI_API_KEY"
# Sent when no key is configured: local OpenAI-compatible servers ignore it,
# the SDK refuses to start without one.
_PLACEHOLDER_API_KEY = "unused"
_MAX_SHOWN_ARGUMENTS = 500


def _message_to_openai(message: ChatMessage) -> Dict[str, Any]:
    role = MessageRole(message.role)
    if role == MessageRole.TOOL:
        call_id = message.extra_args.get("tool_call_id")
        if not call_id:
            raise ValueError(f"tool message has no extra_args['tool_call_id']: {message.content[:80]!r}")
        return {"role": "tool", "tool_call_id": str(call_id), "content": message.content}
    if role == MessageRole.ASSISTANT and message.tool_calls:
        calls = []
        for call in message.tool_calls:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments or {})
            # The runtime's id, never original_id: providers reuse ids across turns.
            calls.append({
                "id": str(call["id"]),
                "type": "function",
                "function": {"name": function.get("name"), "arguments": arguments},
            })
        return {"role": "assistant", "content": message.content or None, "tool_calls": calls}
    return {"role": role.value, "content": message.content}


def to_openai_messages(messages: Sequence[ChatMessage]) -> List[Dict[str, Any]]:
    """Convert a conversation to chat-completions ``messages``.

    Args:
        messages: The conversation, oldest first. An assistant message's
            ``tool_calls`` are in the runtime's shape (``{"id", "type",
            "function": {"name", "arguments": dict}, "original_id"}``); a tool
            message carries the call's runtime id in
            ``extra_args["tool_call_id"]``.

    Returns:
        One dict per message: ``{"role", "content"}``, plus ``tool_calls``
        (arguments as JSON text, ids the runtime's) for an assistant message
        that calls tools, or ``tool_call_id`` for a tool message.

    Raises:
        ValueError: A tool message has no ``tool_call_id``, or a role is unknown.
    """
    return [_message_to_openai(m) for m in messages]


def to_openai_tools(tools: Sequence[Tool]) -> List[Dict[str, Any]]:
    """Convert tools to chat-completions ``tools``.

    Args:
        tools: The tools offered to the model.

    Returns:
        One ``{"type": "function", "function": {"name", "description",
        "parameters"}}`` per tool, ``parameters`` being its argument JSON schema.
    """
    return [
        {
            "type": "function",
            "function": {
                "name": t.metadata.name,
                "description": t.metadata.description,
                "parameters": t.metadata.args_schema,
            },
        }
        for t in tools
    ]


def _parse_arguments(tool_name: str, text: str | None) -> Dict[str, Any]:
    if text is None or not text.strip():
        return {}
    shown = text if len(text) <= _MAX_SHOWN_ARGUMENTS else text[:_MAX_SHOWN_ARGUMENTS] + "..."
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"the model called tool {tool_name!r} with arguments that are not valid JSON "
            f"({exc.msg} at char {exc.pos}): {shown!r}"
        ) from exc
    if not isinstance(value, dict):
        raise ValueError(
            f"the model called tool {tool_name!r} with arguments that are not a JSON object: {shown!r}"
        )
    return value


def from_openai_completion(completion: Any) -> ChatMessage:
    """Convert a ``ChatCompletion`` to the reply message.

    Args:
        completion: The SDK's ``ChatCompletion``; its first choice is used.

    Returns:
        ``ChatMessage(role=ASSISTANT)`` with the text (``""`` if none), the
        tool calls as ``{"id", "type": "function", "function": {"name",
        "arguments": dict}, "original_id"}`` (both ids the provider's; the
        runtime assigns its own), and ``extra_args["usage"] =
        {"prompt_tokens": int, "completion_tokens": int}`` when reported.

    Raises:
        ValueError: No choice came back, a tool call is not a function call,
            or its arguments are not a JSON object (the message names the
            tool and shows the text).
    """
    if not completion.choices:
        raise ValueError(f"chat completion {getattr(completion, 'id', '?')!r} has no choices")
    message = completion.choices[0].message
    calls = []
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if getattr(call, "type", "function") != "function" or function is None:
            raise ValueError(f"the model made a {call.type!r} tool call; only function calls are supported")
        calls.append({
            "id": call.id,
            "type": "function",
            "function": {"name": function.name, "arguments": _parse_arguments(function.name, function.arguments)},
            "original_id": call.id,
        })
    extra: Dict[str, Any] = {}
    usage = getattr(completion, "usage", None)
    if usage is not None:
        extra["usage"] = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
        }
    return ChatMessage(
        role=MessageRole.ASSISTANT, content=message.content or "", tool_calls=calls, extra_args=extra
    )


async def _close_async_client(client: openai.AsyncOpenAI) -> None:
    await client.close()


class OpenAIChatModelConnection(BaseChatModelConnection):
    """A connection to an OpenAI-compatible chat-completions endpoint.

    ``chat`` uses a shared ``openai.OpenAI`` client (thread-safe); ``achat``
    (what the runtime awaits, many keys at once) uses an ``openai.AsyncOpenAI``
    client per event loop, since an async client is bound to the loop it
    first ran on. Clients are created on first use and closed by ``close()``.

    Attributes:
        api_key: The API key; None falls back to the ``OPENAI_API_KEY``
            environment variable, then to a placeholder that local servers
            accept.
        base_url: The API's base URL, e.g. ``http://localhost:8000/v1``; None
            is the SDK's default (``OPENAI_BASE_URL`` or api.openai.com).
        timeout_s: Timeout of one HTTP request, in seconds.
        max_retries: How often the SDK retries a failed request (with backoff).
    """

    api_key: str | None = Field(default=None, repr=False)
    base_url: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _sync_client: openai.OpenAI | None = PrivateAttr(default=None)
    _async_clients: PerLoopClients[openai.AsyncOpenAI] | None = PrivateAttr(default=None)

    def _client_options(self) -> Dict[str, Any]:
        return {
            "api_key": self.api_key or os.environ.get(API_KEY_ENV) or _PLACEHOLDER_API_KEY,
            "base_url": self.base_url,
            "timeout": self.timeout_s,
            "max_retries": self.max_retries,
        }

    def _sync(self) -> openai.OpenAI:
        client = self._sync_client
        if client is None:
            with self._lock:
                if self._sync_client is None:
                    self._sync_client = openai.OpenAI(**self._client_options())
                client = self._sync_client
        return client

    def _async(self) -> PerLoopClients[openai.AsyncOpenAI]:
        clients = self._async_clients
        if clients is None:
            with self._lock:
                if self._async_clients is None:
                    self._async_clients = PerLoopClients(
                        lambda: openai.AsyncOpenAI(**self._client_options()), _close_async_client
                    )
                clients = self._async_clients
        return clients

    @staticmethod
    def _request(messages: Sequence[ChatMessage], tools: List[Tool] | None, kwargs: Mapping[str, Any]) -> Dict[str, Any]:
        settings = dict(kwargs)
        model = settings.pop("model", None)
        if not model:
            raise ValueError("an OpenAI chat call needs a model name (set OpenAIChatModelSetup.model)")
        request: Dict[str, Any] = {"model": model, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = to_openai_tools(tools)
        request.update(settings)
        return request

    def chat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Call the model (blocking).

        Args:
            messages: The conversation, oldest first.
            tools: Tools offered to the model.
            **kwargs: ``model`` (required) and other ``chat.completions.create``
                parameters (``temperature``, ``max_tokens``, ...).

        Returns:
            The reply (see ``from_openai_completion``).

        Raises:
            ValueError: No model given, or a malformed tool call came back.
            openai.OpenAIError: The SDK's errors (see the module docstring).
        """
        request = self._request(messages, tools, kwargs)
        return from_openai_completion(self._sync().chat.completions.create(**request))

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Call the model without blocking the event loop; as ``chat``."""
        request = self._request(messages, tools, kwargs)
        client = await self._async().get()
        return from_openai_completion(await client.chat.completions.create(**request))

    def close(self) -> None:
        """Close the clients; a later call opens new ones.

        An async client is closed on its own loop: right away if that loop is
        idle or runs in another thread, at the loop's shutdown if ``close`` is
        called from inside it (as the local runner does).
        """
        with self._lock:
            sync_client, self._sync_client = self._sync_client, None
            async_clients = self._async_clients
        try:
            if async_clients is not None:
                async_clients.close()
        finally:
            if sync_client is not None:
                sync_client.close()


_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_THINK_END = "</think>"


def split_reasoning(text: str) -> tuple[str, str]:
    """Split ``<think>...</think>`` blocks off a reply.

    A reply that closes a block it never opened (some servers drop the
    opening tag) has everything before ``</think>`` taken as reasoning.

    Returns:
        ``(answer, reasoning)``, both stripped; ``reasoning`` is ``""`` if
        there was none, blocks are joined by blank lines.
    """
    parts = [m.strip() for m in _THINK_BLOCK.findall(text)]
    answer = _THINK_BLOCK.sub("", text)
    if _THINK_END in answer:
        head, _, answer = answer.rpartition(_THINK_END)
        parts.insert(0, head.replace("<think>", "").strip())
    return answer.strip(), "\n\n".join(p for p in parts if p)


class OpenAIChatModelSetup(BaseChatModelSetup):
    """Which OpenAI model to use over an ``OpenAIChatModelConnection``.

    Attributes:
        temperature: Sampling temperature (0..2); None is the server's default.
        max_tokens: Cap on the reply's tokens; None is the server's default.
        extract_reasoning: Move ``<think>...</think>`` blocks out of the reply
            text into ``extra_args["reasoning"]`` (for reasoning models that
            inline their thoughts).
    """

    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)
    extract_reasoning: bool = False

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model`` plus the settings that are not None."""
        kwargs = super().model_kwargs
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        return kwargs

    def _finish(self, reply: ChatMessage) -> ChatMessage:
        if not self.extract_reasoning:
            return reply
        answer, reasoning = split_reasoning(reply.content)
        if not reasoning:
            return reply
        return reply.model_copy(
            update={"content": answer, "extra_args": {**reply.extra_args, "reasoning": reasoning}}
        )

    def chat(
        self,
        messages: Sequence[ChatMessage],
        prompt_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """As ``BaseChatModelSetup.chat``, then split off the reasoning if asked."""
        return self._finish(super().chat(messages, prompt_args, **kwargs))

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        prompt_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """As ``BaseChatModelSetup.achat``, then split off the reasoning if asked."""
        return self._finish(await super().achat(messages, prompt_args, **kwargs))
