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

Flink Agents 0.3.1's field names work too: ``api_base_url`` for
``base_url``, ``timeout`` for ``timeout_s``.

Structured output: asked natively, with ``response_format = {"type":
"json_schema", "json_schema": {"name", "schema", "strict"}}`` (OpenAI's
Structured Outputs; ``strict`` is the setup's ``strict``).

Errors (``flink_agents.api.chat_models.errors``), raised after the SDK's own
retries (``max_retries``, with backoff, on connection errors, 408, 409, 429
and 5xx), with the SDK's exception as ``__cause__``: an HTTP error response
becomes the class for its status (``ModelRateLimited`` for 429,
``ModelAuthenticationError`` for 401/403, ``ModelServerError`` for 5xx, ...;
the error code ``context_length_exceeded`` is ``ModelContextTooLong``), no
response or a timeout ``ModelUnreachable``, and a reply whose tool-call
arguments are not a JSON object ``ModelResponseError``. In an agent they fail
the chat action (``ActionFailed`` with that cause); a terminal one is not
retried by the ``retry`` error strategy.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from typing import Any, ClassVar, Dict, List, Literal, Mapping, Sequence, Tuple

import openai
from pydantic import Field, PrivateAttr, model_validator

from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.tools.tool import Tool
from flink_agents.integrations.chat_models._per_loop import SdkClients
from flink_agents.integrations.chat_models.chat_model_utils import split_reasoning
from flink_agents.integrations.chat_models.openai.openai_utils import (
    api_key_or_placeholder,
    from_openai_completion,
    json_schema_response_format,
    strict_json_schema,
    openai_call_error,
    resolve_openai_credentials,
    to_openai_messages,
    to_openai_tools,
)

__all__ = [
    "ChatCompletionsConnection",
    "OpenAIChatModelConnection",
    "OpenAIChatModelSetup",
    "from_openai_completion",
    "split_reasoning",
    "to_openai_messages",
    "to_openai_tools",
]

API_KEY_ENV = "OPENAI_API_KEY"


def merge_alias(data: Any, name: str, alias: str) -> Any:
    """Fold the 0.3.1 spelling ``alias`` of field ``name`` into ``name``
    (a ``model_validator(mode="before")`` step).

    Raises:
        ValueError: Both are given with different values (names both).
    """
    if not isinstance(data, dict) or alias not in data:
        return data
    data = dict(data)
    value = data.pop(alias)
    if value is None:
        return data
    if data.get(name) is not None and data[name] != value:
        raise ValueError(
            f"{name}={data[name]!r} and {alias}={value!r} are two spellings of one setting with different "
            f"values; give one of them"
        )
    data[name] = value
    return data


class ChatCompletionsConnection(BaseChatModelConnection):
    """What the OpenAI and Azure OpenAI connections share: the request, the
    clients and the error mapping of the chat-completions API.

    ``chat`` uses a shared sync client (thread-safe); ``achat`` (what the
    runtime awaits, many keys at once) uses an async client per event loop,
    since an async client is bound to the loop it first ran on. Clients are
    created on first use and closed by ``close()``. A subclass gives
    ``provider``, ``_new_client`` and may adjust ``_settings``.
    """

    supports_output_schema: ClassVar[bool] = True
    provider: ClassVar[str] = "openai"

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _clients: SdkClients | None = PrivateAttr(default=None)

    @abstractmethod
    def _new_client(self, asynchronous: bool) -> Any:
        """A new SDK client: the async one (``AsyncOpenAI``...) if ``asynchronous``."""

    @property
    def reuses_client(self) -> bool:
        """Whether calls share clients (else each call opens and closes one)."""
        return True

    @property
    def client(self) -> Any:
        """The shared sync SDK client (as 0.3.1's ``client`` property)."""
        return self._sync()

    def _pool(self) -> SdkClients:
        # The private slot read directly: pydantic's __getattr__ costs a few
        # us, and every call asks (the pool, once made, is never replaced
        # while it is in use; close() drops it under the lock).
        made = self.__pydantic_private__.get("_clients")
        if made is not None:
            return made
        with self._lock:
            if self._clients is None:
                self._clients = SdkClients(lambda: self._new_client(False), lambda: self._new_client(True))
            return self._clients

    def _sync(self) -> Any:
        return self._pool().sync()

    def _settings(self, settings: Dict[str, Any]) -> Tuple[Dict[str, Any], str | None]:
        """Turn the call's settings into ``chat.completions.create``
        parameters (in place) and give the model name to report (None: the
        completion's). Called with ``model``, ``tools``, ``messages`` and
        ``output_schema`` already taken out."""
        return settings, None

    def _request(
        self, messages: Sequence[ChatMessage], tools: List[Tool] | None, kwargs: Mapping[str, Any]
    ) -> Tuple[Dict[str, Any], str | None]:
        settings = dict(kwargs)
        model = settings.pop("model", None)
        if not model:
            raise ValueError(
                f"a {type(self).__name__} call needs a model name (set the setup's `model`)"
            )
        schema = settings.pop("output_schema", None)
        strict = bool(settings.pop("strict", False))
        settings, model_name = self._settings(settings)
        request: Dict[str, Any] = {"model": model, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = to_openai_tools(tools)
            if strict:  # OpenAI's strict function calling: closed, all-required argument objects
                for spec in request["tools"]:
                    spec["function"]["strict"] = True
                    spec["function"]["parameters"] = strict_json_schema(spec["function"]["parameters"])
        if schema is not None:
            request["response_format"] = json_schema_response_format(schema, strict)
        request.update(settings)
        return request, model_name

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
            **kwargs: ``model`` (required), ``output_schema`` (an
                ``OutputSchema``: sent as a ``json_schema`` response format),
                ``strict`` (strict schemas and tool arguments) and other
                ``chat.completions.create`` parameters (``temperature``,
                ``max_tokens``, ``logprobs``, ...).

        Returns:
            The reply (see ``openai_utils.from_openai_completion``).

        Raises:
            ValueError: No model given.
            ModelCallError: The provider refused or failed the call, or its
                reply is malformed (see the module docstring).
        """
        request, model_name = self._request(messages, tools, kwargs)
        try:
            if self.reuses_client:
                completion = self._sync().chat.completions.create(**request)
            else:
                with self._new_client(False) as client:
                    completion = client.chat.completions.create(**request)
        except openai.APIError as exc:
            raise openai_call_error(exc, self.provider) from exc
        return from_openai_completion(completion, provider=self.provider, model_name=model_name)

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """Call the model without blocking the event loop; as ``chat``."""
        request, model_name = self._request(messages, tools, kwargs)
        try:
            if self.reuses_client:
                client = await self._pool().current()
                completion = await client.chat.completions.create(**request)
            else:
                async with self._new_client(True) as client:
                    completion = await client.chat.completions.create(**request)
        except openai.APIError as exc:
            raise openai_call_error(exc, self.provider) from exc
        return from_openai_completion(completion, provider=self.provider, model_name=model_name)

    def close(self) -> None:
        """Close the clients; a later call opens new ones.

        An async client is closed on its own loop: right away if that loop is
        idle or runs in another thread, at the loop's shutdown if ``close`` is
        called from inside it (as the local runner does).
        """
        with self._lock:
            clients = self._clients
        if clients is not None:
            clients.close()


class OpenAIChatModelConnection(ChatCompletionsConnection):
    """A connection to an OpenAI-compatible chat-completions endpoint (see
    ``ChatCompletionsConnection`` for clients and errors).

    Attributes:
        api_key: The API key; None falls back to ``OPENAI_API_KEY`` (then
            ``openai.api_key``), then to a placeholder that local servers
            accept; with none for OpenAI's own API, a call raises
            ``ModelAuthenticationError`` before any request.
        base_url: The API's base URL, e.g. ``http://localhost:8000/v1``; None
            is the SDK's default (``OPENAI_BASE_URL`` or api.openai.com).
            0.3.1 spelling: ``api_base_url``.
        timeout_s: Timeout of one HTTP request, in seconds. 0.3.1 spelling:
            ``timeout``.
        max_retries: How often the SDK retries a failed request (with backoff).
        default_headers: Headers sent with every request.
        reuse_client: False opens (and closes) a client per call instead of
            sharing one.

    ``http_client``/``async_http_client`` (constructor only, as in 0.3.1):
    ``httpx`` clients the SDK clients use; an async one is bound to the event
    loop it first runs on, so give one only if the connection is used from a
    single loop.
    """

    api_key: str | None = Field(default=None, repr=False)
    base_url: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    default_headers: Dict[str, str] | None = None
    reuse_client: bool = True

    _http_client: Any = PrivateAttr(default=None)
    _async_http_client: Any = PrivateAttr(default=None)

    def __init__(self, *, http_client: Any = None, async_http_client: Any = None, **data: Any) -> None:
        super().__init__(**data)
        self._http_client = http_client
        self._async_http_client = async_http_client

    extra_arguments: ClassVar[frozenset] = frozenset({"api_base_url", "timeout"})  # 0.3.1 spellings

    @model_validator(mode="before")
    @classmethod
    def _accept_031_names(cls, data: Any) -> Any:
        return merge_alias(merge_alias(data, "base_url", "api_base_url"), "timeout_s", "timeout")

    @property
    def api_base_url(self) -> str:
        """The base URL requests go to (0.3.1's name; ``base_url`` resolved)."""
        return self.base_url if self.base_url is not None else resolve_openai_credentials(self.api_key, None)[1]

    @property
    def timeout(self) -> float:
        """``timeout_s`` under 0.3.1's name."""
        return self.timeout_s

    @property
    def reuses_client(self) -> bool:
        return self.reuse_client

    def _new_client(self, asynchronous: bool) -> Any:
        options: Dict[str, Any] = {
            "api_key": api_key_or_placeholder(self.api_key, self.base_url, type(self).__name__),
            "base_url": self.base_url,
            "timeout": self.timeout_s,
            "max_retries": self.max_retries,
            "default_headers": self.default_headers,
        }
        if asynchronous:
            return openai.AsyncOpenAI(**options, http_client=self._async_http_client)
        return openai.OpenAI(**options, http_client=self._http_client)


class OpenAIChatModelSetup(BaseChatModelSetup):
    """Which OpenAI model to use over an ``OpenAIChatModelConnection``.

    Attributes:
        temperature: Sampling temperature (0..2); None is the server's default.
        max_tokens: Cap on the reply's tokens; None is the server's default.
        logprobs: Ask for the log probabilities of the reply's tokens.
        top_logprobs: With ``logprobs``, how many most likely tokens to
            report per position (0..20).
        additional_kwargs: Further ``chat.completions.create`` parameters,
            sent as given (over the fields above).
        strict: OpenAI's strict mode: a structured-output schema and the
            tools' argument schemas are enforced exactly (each object must
            list every property as required).
        reasoning_effort: ``"low"``, ``"medium"`` or ``"high"``, for
            reasoning models.
        extract_reasoning: Move ``<think>...</think>`` blocks out of the reply
            text into ``extra_args["reasoning"]`` (for reasoning models that
            inline their thoughts).
    """

    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    logprobs: bool | None = None
    top_logprobs: int = Field(default=0, ge=0, le=20)
    additional_kwargs: Dict[str, Any] = Field(default_factory=dict)
    strict: bool = False
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    extract_reasoning: bool = False

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model``, the settings that are set (``logprobs`` with
        ``top_logprobs`` only when true, ``strict`` only when true), then
        ``additional_kwargs``."""
        kwargs = super().model_kwargs
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if self.logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = self.top_logprobs
        if self.reasoning_effort is not None:
            kwargs["reasoning_effort"] = self.reasoning_effort
        if self.strict:
            kwargs["strict"] = True
        kwargs.update(self.additional_kwargs)
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
