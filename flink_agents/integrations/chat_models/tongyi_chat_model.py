"""Chat models of Alibaba Tongyi Qianwen (Qwen) over DashScope's native API,
through the official ``dashscope`` SDK (the ``tongyi`` extra: ``pip install -e '.[tongyi]'``).

Declare a connection and a setup over it::

    @chat_model_connection
    @staticmethod
    def tongyi() -> ResourceDescriptor:
        return ResourceDescriptor(clazz=ResourceName.ChatModel.TONGYI_CONNECTION)

    @chat_model_setup
    @staticmethod
    def reviewer() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=ResourceName.ChatModel.TONGYI_SETUP,
            connection="tongyi", model="qwen-plus", tools=["notify"],
        )

The SDK posts to ``{base_url}/services/aigc/text-generation/generation``
(``base_url`` defaults to the SDK's ``https://dashscope.aliyuncs.com/api/v1``,
or ``DASHSCOPE_HTTP_BASE_URL``) with ``Authorization: Bearer <key>``. The base
URL is passed with every call (the SDK's ``base_address`` argument), so
connections with different base URLs coexist; the SDK's module global
``dashscope.base_http_api_url`` is never changed.

Errors: the SDK does not raise for an HTTP error; it returns a response whose
``status_code``, ``code`` and ``message`` come from DashScope's error body.
Such a response becomes the ``ModelCallError`` subclass for its status
(``error_for_status``): 429 ``Throttling`` is ``ModelRateLimited``, 400
``InvalidParameter`` "Range of input length ..." is ``ModelContextTooLong``,
401 ``InvalidApiKey`` is ``ModelAuthenticationError``, 5xx is
``ModelServerError``. Connection failures and timeouts (the SDK's
``requests``/``aiohttp`` exceptions) become ``ModelUnreachable``, with the
SDK's exception as ``__cause__``. The SDK retries only a request whose pooled
connection was dropped before it was sent (once); throttling and server
errors are left to the agent's error strategy (they are retryable).
"""

from __future__ import annotations

import json
import threading
from typing import Any, ClassVar, Dict, List, Mapping, Sequence, Tuple

from pydantic import Field, PrivateAttr

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.chat_models.errors import ModelResponseError
from flink_agents.api.tools.tool import Tool, ToolMetadata
from flink_agents.integrations._dashscope import PROVIDER, check_response, dashscope_failure, resolve_api_key
from flink_agents.integrations.chat_models._per_loop import PerLoopClients
from flink_agents.integrations.chat_models.chat_model_utils import parse_tool_arguments
from flink_agents.integrations.sdk import import_sdk

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_REQUEST_TIMEOUT",
    "TongyiChatModelConnection",
    "TongyiChatModelSetup",
    "check_response",
    "dashscope_failure",
    "from_dashscope_response",
    "resolve_api_key",
    "to_dashscope_messages",
    "to_dashscope_tool",
]

DEFAULT_REQUEST_TIMEOUT = 60.0
DEFAULT_MODEL = "qwen-plus"
# DashScope refuses a longer function description.
MAX_TOOL_DESCRIPTION_CHARS = 1024


def to_dashscope_tool(metadata: ToolMetadata, skip_length_check: bool = False) -> Dict[str, Any]:  # noqa: FBT001
    """A tool in DashScope's function shape (as Flink Agents 0.3.1's helper).

    Args:
        metadata: The tool's name, description and argument schema.
        skip_length_check: Send a description longer than DashScope's limit.

    Returns:
        ``{"type": "function", "function": {"name", "description",
        "parameters"}}``, ``parameters`` being the arguments' JSON schema.

    Raises:
        ValueError: The description is longer than 1024 characters (DashScope
            refuses it) and ``skip_length_check`` is false.
    """
    if not skip_length_check and len(metadata.description) > MAX_TOOL_DESCRIPTION_CHARS:
        raise ValueError(
            f"tool {metadata.name!r}: the description has {len(metadata.description)} characters, "
            f"DashScope allows {MAX_TOOL_DESCRIPTION_CHARS}; shorten it or move the detail into the prompt"
        )
    return {
        "type": "function",
        "function": {
            "name": metadata.name,
            "description": metadata.description,
            "parameters": metadata.get_parameters_dict(),
        },
    }


def _message_to_dashscope(message: ChatMessage) -> Dict[str, Any]:
    role = MessageRole(message.role)
    if role == MessageRole.TOOL:
        call_id = message.extra_args.get("tool_call_id")
        if not call_id:
            raise ValueError(f"tool message has no extra_args['tool_call_id']: {message.content[:80]!r}")
        return {"role": "tool", "content": message.content, "tool_call_id": str(call_id)}
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
        return {"role": "assistant", "content": message.content or "", "tool_calls": calls}
    return {"role": role.value, "content": message.content}


def to_dashscope_messages(messages: Sequence[ChatMessage]) -> List[Dict[str, Any]]:
    """A conversation as DashScope's ``input.messages``.

    Args:
        messages: Oldest first; an assistant message's ``tool_calls`` in the
            runtime's shape, a tool message with the call's runtime id in
            ``extra_args["tool_call_id"]``.

    Returns:
        ``{"role", "content"}`` per message, plus ``tool_calls`` (arguments as
        JSON text) on an assistant message that calls tools, or
        ``tool_call_id`` on a tool message. The system messages are joined
        (blank line between, in order) into one that comes first: Qwen models
        take a single system message, at the start (a later one is refused,
        "System message must be at the beginning").

    Raises:
        ValueError: A tool message has no ``tool_call_id``, or a role is unknown.
    """
    converted = [_message_to_dashscope(m) for m in messages]
    system = [m["content"] for m in converted if m["role"] == "system" and m["content"]]
    rest = [m for m in converted if m["role"] != "system"]
    return ([{"role": "system", "content": "\n\n".join(system)}] if system else []) + rest


def _schema_instruction(schema: Any) -> str:
    # json_object mode needs the word "JSON" in a system or user message
    # (DashScope's structured-output guide); this sentence carries it.
    return (
        "Answer with one JSON object only (no prose, no code fence) that conforms to this JSON schema "
        f"named {schema.name!r}:\n{json.dumps(schema.json_schema(), sort_keys=True)}"
    )


def _with_schema_instruction(messages: List[Dict[str, Any]], schema: Any) -> List[Dict[str, Any]]:
    """Put the schema into the leading system message (see
    ``to_dashscope_messages``), or add one."""
    instruction = _schema_instruction(schema)
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0])
        first["content"] = f"{first['content']}\n\n{instruction}" if first["content"] else instruction
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


def _text_of(content: Any) -> str:
    """A message's text: DashScope gives a string (or a list of
    ``{"text": ...}`` parts for multimodal models)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return str(content)


def dashscope_usage(usage: Any) -> Dict[str, int]:
    """DashScope's ``usage`` (a dict) as ``{"prompt_tokens",
    "completion_tokens"[, "cached_tokens"][, "reasoning_tokens"]}``."""
    fields = {
        "prompt_tokens": int(usage.get("input_tokens") or 0),
        "completion_tokens": int(usage.get("output_tokens") or 0),
    }
    for name, details, key in (("cached_tokens", "prompt_tokens_details", "cached_tokens"),
                               ("reasoning_tokens", "output_tokens_details", "reasoning_tokens")):
        found = usage.get(details)
        value = found.get(key) if isinstance(found, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            fields[name] = value
    return fields


def from_dashscope_response(response: Any, model: str, extract_reasoning: bool = False) -> ChatMessage:  # noqa: FBT001
    """A successful generation response (``result_format="message"``) as the reply.

    Args:
        response: The SDK's ``GenerationResponse`` with status 200:
            ``output.choices[0]`` = ``{"finish_reason", "message": {"role",
            "content", "tool_calls"?, "reasoning_content"?}}``, ``usage`` =
            ``{"input_tokens", "output_tokens", ...}``.
        model: The model asked (the response does not name it).
        extract_reasoning: Copy ``reasoning_content`` (thinking models) to
            ``extra_args["reasoning"]``.

    Returns:
        ``ChatMessage(role=ASSISTANT)``: the text (``""`` if none), tool calls
        as ``{"id", "type": "function", "function": {"name", "arguments":
        dict (the model's text when it is not a JSON object: the tool action
        answers it with an error result)}, "original_id"}``, ``extra_args`` with ``usage``
        (``prompt_tokens``/``completion_tokens``, and ``cached_tokens`` /
        ``reasoning_tokens`` from ``prompt_tokens_details.cached_tokens`` /
        ``output_tokens_details.reasoning_tokens`` when DashScope reports
        them), ``model_name`` and
        ``stop_reason`` (DashScope's ``finish_reason``).

    Raises:
        ModelResponseError: No choice came back, or a tool call is not a
            function call.
    """
    output = response.output or {}
    choices = output.get("choices") or []
    if not choices:
        raise ModelResponseError(
            f"DashScope response {response.request_id!r} has no choices; was result_format 'message'?", PROVIDER
        )
    choice = choices[0]
    message = choice.get("message") or {}
    calls = []
    for n, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        if call.get("type", "function") != "function":
            raise ModelResponseError(
                f"the model made a {call.get('type')!r} tool call; only function calls are supported", PROVIDER
            )
        name = function.get("name")
        call_id = call.get("id") or f"call_{n}"
        calls.append({
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": parse_tool_arguments(name, function.get("arguments"), PROVIDER)},
            "original_id": call_id,
        })
    extra: Dict[str, Any] = {"model_name": model}
    usage = response.usage
    if usage:
        extra["usage"] = dashscope_usage(usage)
    if choice.get("finish_reason"):
        extra["stop_reason"] = choice["finish_reason"]
    reasoning = message.get("reasoning_content")
    if extract_reasoning and reasoning:
        extra["reasoning"] = reasoning
    return ChatMessage(
        role=MessageRole.ASSISTANT, content=_text_of(message.get("content")), tool_calls=calls, extra_args=extra
    )


def _new_session() -> Any:
    """An aiohttp session as the SDK makes its own: certifi's CA bundle,
    proxies from the environment (``HTTPS_PROXY``, ...)."""
    import ssl

    aiohttp = import_sdk("aiohttp", "tongyi", "TongyiChatModelConnection")
    certifi = import_sdk("certifi", "tongyi", "TongyiChatModelConnection")
    connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=certifi.where()))
    return aiohttp.ClientSession(connector=connector, trust_env=True)


async def _close_session(session: Any) -> None:
    await session.close()


class TongyiChatModelConnection(BaseChatModelConnection):
    """A connection to DashScope's text-generation API (Qwen models).

    ``chat`` calls ``dashscope.Generation.call`` (the SDK's pooled
    ``requests`` session); ``achat`` calls ``dashscope.AioGeneration.call``
    with an ``aiohttp`` session of this connection per event loop (an
    aiohttp session is bound to its loop), closed by ``close()`` or at the
    loop's shutdown.

    Attributes:
        api_key: The DashScope API key; None reads ``DASHSCOPE_API_KEY`` at
            call time (a missing key is ``ModelAuthenticationError``).
        request_timeout: Timeout of one HTTP request, in seconds.
        base_url: The API root, e.g. ``https://dashscope-intl.aliyuncs.com/api/v1``;
            None is the SDK's default (``DASHSCOPE_HTTP_BASE_URL`` or the
            Beijing endpoint).
    """

    supports_output_schema: ClassVar[bool] = True

    api_key: str | None = Field(default=None, repr=False, description="Your DashScope API key.")
    request_timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT, gt=0, description="HTTP timeout, in seconds.")
    base_url: str | None = Field(default=None, description="DashScope API root; None is the SDK's default.")

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _sessions: PerLoopClients[Any] | None = PrivateAttr(default=None)

    def _request(
        self, messages: Sequence[ChatMessage], tools: List[Tool] | None, kwargs: Mapping[str, Any]
    ) -> Tuple[Dict[str, Any], bool]:
        settings = dict(kwargs)
        model = settings.pop("model", None) or DEFAULT_MODEL
        extract_reasoning = bool(settings.pop("extract_reasoning", False))
        schema = settings.pop("output_schema", None)
        if settings.pop("stream", False):
            raise ValueError("TongyiChatModelConnection does not stream; remove stream=True from the settings")
        wire_messages = to_dashscope_messages(messages)
        if schema is not None:
            wire_messages = _with_schema_instruction(wire_messages, schema)
            settings["response_format"] = {"type": "json_object"}
        request: Dict[str, Any] = {
            "model": model,
            "messages": wire_messages,
            "result_format": "message",
            "api_key": resolve_api_key(settings.pop("api_key", None) or self.api_key),
            "request_timeout": self.request_timeout,
        }
        if self.base_url:
            request["base_address"] = self.base_url
        if tools:
            request["tools"] = [to_dashscope_tool(t.metadata) for t in tools]
        request.update(settings)
        return request, extract_reasoning

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
            **kwargs: ``model`` (default ``qwen-plus``), ``extract_reasoning``,
                ``output_schema`` (JSON mode: ``response_format`` json_object
                plus the schema in the system message), and other
                ``Generation.call`` parameters (``temperature``,
                ``max_tokens``, ``enable_thinking``, ...).

        Returns:
            The reply (see ``from_dashscope_response``).

        Raises:
            ModelCallError: DashScope refused or failed the call, or the reply
                is unreadable (see the module docstring).
            ValueError: A tool message without ``tool_call_id``, a tool
                description over 1024 characters, or ``stream=True``.
            ImportError: The ``dashscope`` SDK is not installed (names the extra).
        """
        dashscope = import_sdk("dashscope", "tongyi", "TongyiChatModelConnection")
        request, extract_reasoning = self._request(messages, tools, kwargs)
        try:
            response = dashscope.Generation.call(**request)
        except Exception as exc:
            raise dashscope_failure(exc, "DashScope generation call failed") from exc
        check_response(response)
        return from_dashscope_response(response, request["model"], extract_reasoning)

    def _async_sessions(self) -> PerLoopClients[Any]:
        sessions = self._sessions
        if sessions is None:
            with self._lock:
                if self._sessions is None:
                    self._sessions = PerLoopClients(_new_session, _close_session)
                sessions = self._sessions
        return sessions

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Call the model without blocking the event loop
        (``dashscope.AioGeneration``); as ``chat``."""
        dashscope = import_sdk("dashscope", "tongyi", "TongyiChatModelConnection")
        request, extract_reasoning = self._request(messages, tools, kwargs)
        session = await self._async_sessions().get()
        try:
            response = await dashscope.AioGeneration.call(session=session, **request)
        except Exception as exc:
            raise dashscope_failure(exc, "DashScope generation call failed") from exc
        check_response(response)
        return from_dashscope_response(response, request["model"], extract_reasoning)

    def close(self) -> None:
        """Close the async sessions (each on its own loop; see ``PerLoopClients``)."""
        with self._lock:
            sessions, self._sessions = self._sessions, None
        if sessions is not None:
            sessions.close()


class TongyiChatModelSetup(BaseChatModelSetup):
    """Which Qwen model to use over a ``TongyiChatModelConnection``
    (the fields of Flink Agents 0.3.1's setup).

    Attributes:
        model: DashScope model name (default ``qwen-plus``).
        temperature: Sampling temperature, 0..2.
        additional_kwargs: Further ``Generation.call`` parameters
            (``top_p``, ``max_tokens``, ``enable_thinking``, ...); they
            override the fields above.
        extract_reasoning: Put a thinking model's ``reasoning_content`` into
            the reply's ``extra_args["reasoning"]``.
    """

    model: str = Field(default=DEFAULT_MODEL, description="DashScope model name.")
    temperature: float = Field(default=0.7, ge=0.0, le=2.0, description="Sampling temperature.")
    additional_kwargs: Dict[str, Any] = Field(default_factory=dict, description="Further Generation.call parameters.")
    extract_reasoning: bool = Field(default=False, description="Copy reasoning_content to extra_args['reasoning'].")

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model``, ``temperature``, ``extract_reasoning``, then ``additional_kwargs``."""
        return {
            "model": self.model,
            "temperature": self.temperature,
            "extract_reasoning": self.extract_reasoning,
            **self.additional_kwargs,
        }
