"""Chat models served by Ollama (https://ollama.com), through the official
``ollama`` SDK (the ``ollama`` extra: ``pip install -e '.[ollama]'``).

Declare a connection and a setup over it::

    @chat_model_connection
    @staticmethod
    def ollama() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=ResourceName.ChatModel.OLLAMA_CONNECTION, base_url="http://localhost:11434"
        )

    @chat_model_setup
    @staticmethod
    def reviewer() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=ResourceName.ChatModel.OLLAMA_SETUP,
            connection="ollama", model="qwen3:8b", tools=["notify"],
        )

Requests follow Ollama's ``POST /api/chat`` (its ``docs/api.md``), never
streamed: ``messages`` with the roles ``system``, ``user``, ``assistant``
and ``tool``; an assistant message's ``tool_calls`` as ``{"function":
{"name", "arguments": <object>}}``; a tool result as ``{"role": "tool",
"content", "tool_name"}``. Ollama's tool calls carry no id, and results are
matched to calls by order, so no id is sent; a reply's calls get the ids
``ollama-0``, ``ollama-1``, ... (the runtime assigns its own). Sampling
settings go in ``options`` (``temperature``, ``num_ctx``, ``top_p``,
``seed``, ...); ``keep_alive``, ``think``, ``logprobs`` and ``top_logprobs``
are top-level fields. Structured output is asked natively: ``format`` is the
output schema's JSON schema.

The SDK converts ``tools`` through its own ``Tool`` type, which keeps of each
argument only ``type``, ``description``, ``enum`` and ``items``: an argument's
``anyOf`` or nested ``properties`` do not reach the server.

Errors (``flink_agents.api.chat_models.errors``), with the SDK's exception as
``__cause__``: an HTTP error (``ollama.ResponseError``, body ``{"error":
"..."}``) becomes the class for its status (404, e.g. a model not pulled:
``ModelBadRequest``; 429 ``ModelRateLimited``; 503 ``ModelOverloaded``; other
5xx ``ModelServerError``); a refused connection (the SDK's
``ConnectionError``) or a timeout ``ModelUnreachable``; a reply the SDK
cannot read (e.g. tool-call arguments that are not a JSON object)
``ModelResponseError``. The ``ollama`` SDK does not retry: a retryable error
is left to the agent's error strategy (``retry``).
"""

from __future__ import annotations

import json
import threading
from typing import Any, ClassVar, Dict, List, Literal, Mapping, Sequence

from pydantic import BaseModel, Field, PrivateAttr

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.chat_models.errors import (
    ModelBadRequest,
    ModelCallError,
    ModelResponseError,
    ModelServerError,
    ModelUnreachable,
    error_for_status,
)
from flink_agents.api.tools.tool import Tool
from flink_agents.integrations.chat_models._per_loop import SdkClients
from flink_agents.integrations.chat_models.chat_model_utils import split_reasoning, to_openai_tool
from flink_agents.integrations.sdk import import_sdk

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_REQUEST_TIMEOUT",
    "OllamaChatModelConnection",
    "OllamaChatModelSetup",
    "OllamaServer",
    "ollama_clients",
    "from_ollama_response",
    "ollama_call_error",
    "to_ollama_messages",
]

PROVIDER = "ollama"
DEFAULT_BASE_URL = "http://localhost:11434"
DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_CONTEXT_WINDOW = 2048
# Chat parameters that are top-level fields of /api/chat; other settings are model options.
_TOP_LEVEL = ("keep_alive", "think", "logprobs", "top_logprobs", "format")


def _sdk(what: str) -> Any:
    return import_sdk("ollama", "ollama", what)


def ollama_clients(base_url: str, timeout_s: float | None, what: str) -> SdkClients:
    """The SDK clients of one connection: a shared ``ollama.Client`` for
    blocking calls, an ``ollama.AsyncClient`` per event loop for async ones.

    Args:
        base_url: The server root, e.g. ``http://localhost:11434``.
        timeout_s: Timeout of one HTTP request, in seconds (None: no timeout).
        what: The connection class, named when the SDK is missing.
    """
    return SdkClients(
        lambda: _sdk(what).Client(host=base_url, timeout=timeout_s),
        lambda: _sdk(what).AsyncClient(host=base_url, timeout=timeout_s),
    )


def ollama_call_error(exc: BaseException) -> ModelCallError | None:
    """The ``ModelCallError`` for an exception of an ``ollama`` SDK call (to
    raise ``from exc``), or None if it is none of the SDK's failures.

    * ``ollama.ResponseError`` (an HTTP error; ``error`` is the ``"error"``
      text of Ollama's body): the class for its ``status_code``
      (``error_for_status``); an error without a status (a failure reported
      inside a stream) is ``ModelServerError``;
    * ``ConnectionError`` (the SDK's answer to a refused connection) and
      ``httpx`` transport errors, timeouts included: ``ModelUnreachable``;
    * a response body that is not JSON or does not fit the SDK's response
      types: ``ModelResponseError``; request arguments the SDK's request
      types refuse: ``ModelBadRequest``.
    """
    import httpx  # the ollama SDK's HTTP library
    import pydantic

    ollama = _sdk("ollama_call_error")
    if isinstance(exc, ollama.ResponseError):
        message = str(exc.error)
        status = exc.status_code
        if status is None or status < 100:
            return ModelServerError(message, PROVIDER)
        return error_for_status(status, message, PROVIDER)
    if isinstance(exc, httpx.TimeoutException):
        return ModelUnreachable(f"request timed out ({type(exc).__name__}: {exc})", PROVIDER)
    if isinstance(exc, (ConnectionError, httpx.TransportError)):
        return ModelUnreachable(f"{type(exc).__name__}: {exc}", PROVIDER)
    if isinstance(exc, json.JSONDecodeError):
        return ModelResponseError(f"the reply is not JSON: {exc}", PROVIDER)
    if isinstance(exc, pydantic.ValidationError):
        if exc.title.endswith("Response"):  # ChatResponse, EmbedResponse
            return ModelResponseError(f"unreadable reply: {exc}", PROVIDER)
        return ModelBadRequest(f"the ollama SDK refused the request: {exc}", PROVIDER)
    return None


def _arguments_object(name: Any, arguments: Any) -> Dict[str, Any]:
    if isinstance(arguments, str):
        arguments = json.loads(arguments) if arguments.strip() else {}
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise ValueError(f"tool call {name!r}: arguments must be a JSON object, got {arguments!r:.120}")
    return dict(arguments)


def to_ollama_messages(messages: Sequence[ChatMessage]) -> List[Dict[str, Any]]:
    """A conversation as ``/api/chat`` ``messages``.

    Args:
        messages: Oldest first; an assistant message's ``tool_calls`` in the
            runtime's shape (``{"id", "type", "function": {"name",
            "arguments"}}``), a tool message with the call's runtime id in
            ``extra_args["tool_call_id"]``.

    Returns:
        ``{"role", "content"}`` per message; an assistant message that calls
        tools adds ``tool_calls: [{"function": {"name", "arguments":
        dict}}]`` (no ids: Ollama has none); a tool message adds
        ``tool_name``, the name of the call it answers (looked up by
        ``tool_call_id`` among the earlier calls, else
        ``extra_args["tool_name"]``; left out when neither is known).

    Raises:
        ValueError: A tool call's arguments are not a JSON object (names the tool).
    """
    names: Dict[str, str] = {}
    out: List[Dict[str, Any]] = []
    for message in messages:
        role = MessageRole(message.role)
        entry: Dict[str, Any] = {"role": role.value, "content": message.content}
        if role == MessageRole.ASSISTANT and message.tool_calls:
            calls = []
            for call in message.tool_calls:
                function = call.get("function") or {}
                name = function.get("name")
                if call.get("id") is not None:
                    names[str(call["id"])] = name
                arguments = _arguments_object(name, function.get("arguments"))
                calls.append({"function": {"name": name, "arguments": arguments}})
            entry["tool_calls"] = calls
        elif role == MessageRole.TOOL:
            name = names.get(str(message.extra_args.get("tool_call_id"))) or message.extra_args.get("tool_name")
            if name:
                entry["tool_name"] = name
        out.append(entry)
    return out


def from_ollama_response(response: Any, model_name: str | None = None) -> ChatMessage:
    """The runtime's message for an ``/api/chat`` reply.

    Args:
        response: The SDK's ``ChatResponse``.
        model_name: Reported as ``extra_args["model_name"]``; None takes the
            response's ``model``.

    Returns:
        ``ChatMessage(role=ASSISTANT)`` with ``content`` (``""`` if none),
        the tool calls as ``{"id": "ollama-<n>", "type": "function",
        "function": {"name", "arguments": dict}, "original_id":
        "ollama-<n>"}`` (``n`` the call's position), and ``extra_args``:
        ``usage`` ``{"prompt_tokens": prompt_eval_count, "completion_tokens":
        eval_count}`` when reported, ``model_name``, ``stop_reason``
        (``done_reason``) and ``reasoning`` (the reply's ``thinking``).

    Raises:
        ModelResponseError: A tool call's arguments are not a JSON object.
    """
    message = response.message
    calls = []
    for index, call in enumerate(message.tool_calls or []):
        name = call.function.name
        arguments = call.function.arguments
        if not isinstance(arguments, Mapping):
            raise ModelResponseError(f"the model called tool {name!r} with arguments that are not a JSON "
                                     f"object: {arguments!r:.200}", PROVIDER)
        call_id = f"ollama-{index}"
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": dict(arguments)},
                      "original_id": call_id})
    extra: Dict[str, Any] = {}
    if response.prompt_eval_count is not None or response.eval_count is not None:
        extra["usage"] = {"prompt_tokens": response.prompt_eval_count or 0,
                          "completion_tokens": response.eval_count or 0}
    name = model_name or response.model
    if name:
        extra["model_name"] = name
    if response.done_reason:
        extra["stop_reason"] = response.done_reason
    if message.thinking:
        extra["reasoning"] = message.thinking
    return ChatMessage(role=MessageRole.ASSISTANT, content=message.content or "", tool_calls=calls, extra_args=extra)


class OllamaServer(BaseModel):
    """The fields and SDK clients every Ollama connection (chat,
    embeddings) has, with 0.3.1's positional order ``(base_url,
    request_timeout)``.

    Attributes:
        base_url: The server root, e.g. ``http://localhost:11434``.
        request_timeout: Timeout of one HTTP request, in seconds (None: none).
    """

    base_url: str = Field(default=DEFAULT_BASE_URL, description="Root URL of the Ollama server.")
    request_timeout: float | None = Field(
        default=DEFAULT_REQUEST_TIMEOUT, gt=0, description="Timeout of one HTTP request, in seconds."
    )

    _clients: SdkClients | None = PrivateAttr(default=None)
    _clients_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        super().__init__(base_url=base_url, request_timeout=request_timeout, **kwargs)

    def _pool(self) -> SdkClients:
        with self._clients_lock:
            if self._clients is None:
                self._clients = ollama_clients(self.base_url, self.request_timeout, type(self).__name__)
            return self._clients

    @property
    def client(self) -> Any:
        """The shared sync ``ollama.Client`` (0.3.1's ``client`` property).

        Raises:
            ImportError: The ``ollama`` SDK is not installed (names the extra).
        """
        return self._pool().sync()


class OllamaChatModelConnection(OllamaServer, BaseChatModelConnection):
    """A connection to an Ollama server (``ollama serve``; ``ollama pull
    <model>`` downloads a model).

    Attributes:
        base_url: The server root, e.g. ``http://localhost:11434``.
        request_timeout: Timeout of one HTTP request, in seconds (None: none).
    """

    supports_output_schema: ClassVar[bool] = True

    def _request(
        self, messages: Sequence[ChatMessage], tools: List[Tool] | None, kwargs: Mapping[str, Any]
    ) -> tuple[Dict[str, Any], bool]:
        settings = {k: v for k, v in kwargs.items() if v is not None}
        model = settings.pop("model", None)
        if not model:
            raise ValueError(f"a {type(self).__name__} call needs a model name (set the setup's `model`)")
        schema = settings.pop("output_schema", None)
        extract_reasoning = bool(settings.pop("extract_reasoning", False))
        request: Dict[str, Any] = {"model": model, "messages": to_ollama_messages(messages), "stream": False}
        if tools:
            request["tools"] = [to_openai_tool(metadata=t.metadata, skip_length_check=True) for t in tools]
        for name in _TOP_LEVEL:
            if name in settings:
                request[name] = settings.pop(name)
        if schema is not None:
            request["format"] = schema.json_schema()
        options = {**settings.pop("options", {}), **settings}
        if options:
            request["options"] = options
        return request, extract_reasoning

    def _reply(self, response: Any, model: str, extract_reasoning: bool) -> ChatMessage:
        reply = from_ollama_response(response, model)
        if not extract_reasoning:
            return reply
        answer, inline = split_reasoning(reply.content)
        if not inline:
            return reply
        reasoning = "\n\n".join(r for r in (reply.extra_args.get("reasoning"), inline) if r)
        return reply.model_copy(update={"content": answer, "extra_args": {**reply.extra_args, "reasoning": reasoning}})

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
            **kwargs: ``model`` (required); ``output_schema`` (an
                ``OutputSchema``, sent as ``format``); ``keep_alive``
                (``"5m"``, seconds, ``0`` unloads at once), ``think`` (bool or
                ``"low"``/``"medium"``/``"high"``), ``format`` (``"json"``
                or a JSON schema), ``logprobs``, ``top_logprobs``;
                ``extract_reasoning`` (move ``<think>`` blocks out of the
                answer); ``options`` (a dict) and any other setting
                (``temperature``, ``num_ctx``, ``top_p``, ``seed``,
                ``num_predict``, ...) go in ``options``. None values are left out.

        Returns:
            The reply (see ``from_ollama_response``).

        Raises:
            ValueError: No model given, or a tool call of the conversation
                has arguments that are not an object.
            ModelCallError: Ollama refused or failed the call, or its reply
                is malformed (see the module docstring).
            ImportError: The ``ollama`` SDK is not installed (names the extra).
        """
        request, extract_reasoning = self._request(messages, tools, kwargs)
        client = self._pool().sync()
        try:
            response = client.chat(**request)
        except Exception as exc:
            error = ollama_call_error(exc)
            if error is None:
                raise
            raise error from exc
        return self._reply(response, request["model"], extract_reasoning)

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Call the model without blocking the event loop (an
        ``ollama.AsyncClient`` per loop); as ``chat``."""
        request, extract_reasoning = self._request(messages, tools, kwargs)
        client = await self._pool().current()
        try:
            response = await client.chat(**request)
        except Exception as exc:
            error = ollama_call_error(exc)
            if error is None:
                raise
            raise error from exc
        return self._reply(response, request["model"], extract_reasoning)

    def close(self) -> None:
        """Close the clients; a later call opens new ones (an async client is
        closed on its own loop, see ``PerLoopClients``)."""
        if self._clients is not None:
            self._clients.close()


class OllamaChatModelSetup(BaseChatModelSetup):
    """Which Ollama model to use over an ``OllamaChatModelConnection``, with
    Flink Agents 0.3.1's fields.

    Attributes:
        model: The model's Ollama name (``llama3.2``, ``qwen3:8b``, ...).
        temperature: Sampling temperature, sent in ``options``.
        num_ctx: Context window in tokens, sent in ``options`` (over the
            model's default, as in 0.3.1).
        additional_kwargs: Further settings, over the fields above: the
            top-level ``/api/chat`` fields (``format``, ``logprobs``, ...) or
            model options (``top_p``, ``seed``, ``num_predict``, ``stop``, ...).
        keep_alive: How long the model stays loaded after the request
            (``"5m"``, seconds, ``0``); None is the server's default (5 minutes).
        think: Ask a thinking model to think (True/False or
            ``"low"``/``"medium"``/``"high"``); None leaves it to the model.
            0.3.1 sends True by default, which Ollama refuses (HTTP 400) for
            models that cannot think, so the default here is None.
        extract_reasoning: Also move ``<think>...</think>`` blocks out of the
            answer into ``extra_args["reasoning"]`` (where the reply's
            ``thinking`` always goes).

    ``request_timeout`` is accepted for 0.3.1 code; the connection's
    ``request_timeout`` is the one that applies.
    """

    temperature: float = Field(default=0.75, ge=0.0, le=2.0, description="Sampling temperature.")
    num_ctx: int = Field(default=DEFAULT_CONTEXT_WINDOW, gt=0, description="Context window, in tokens.")
    additional_kwargs: Dict[str, Any] = Field(default_factory=dict, description="Further /api/chat settings.")
    keep_alive: float | str | None = Field(default=None, description="How long the model stays loaded.")
    extract_reasoning: bool = Field(default=True, description="Move <think> blocks into extra_args['reasoning'].")
    think: bool | Literal["low", "medium", "high"] | None = Field(
        default=None, description="Whether a thinking model thinks, or how hard."
    )

    def __init__(
        self,
        connection: str,
        model: str,
        temperature: float = 0.75,
        num_ctx: int = DEFAULT_CONTEXT_WINDOW,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        additional_kwargs: Dict[str, Any] | None = None,
        keep_alive: float | str | None = None,
        think: bool | Literal["low", "medium", "high"] | None = None,
        extract_reasoning: bool = True,
        **kwargs: Any,
    ) -> None:
        del request_timeout  # the connection's timeout applies
        super().__init__(
            connection=connection, model=model, temperature=temperature, num_ctx=num_ctx,
            additional_kwargs=additional_kwargs or {}, keep_alive=keep_alive, think=think,
            extract_reasoning=extract_reasoning, **kwargs,
        )

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model``, ``temperature``, ``num_ctx``, ``extract_reasoning``,
        ``keep_alive`` and ``think`` when set, then ``additional_kwargs``."""
        kwargs: Dict[str, Any] = {
            **super().model_kwargs,
            "temperature": self.temperature,
            "num_ctx": self.num_ctx,
            "extract_reasoning": self.extract_reasoning,
        }
        if self.keep_alive is not None:
            kwargs["keep_alive"] = self.keep_alive
        if self.think is not None:
            kwargs["think"] = self.think
        return {**kwargs, **self.additional_kwargs}
