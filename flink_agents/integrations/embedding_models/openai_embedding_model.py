"""Text embeddings of OpenAI (``text-embedding-3-small`` ...) or any server
speaking its embeddings API, through the official ``openai`` SDK.

``client.embeddings.create`` posts ``{"model", "input": [text, ...],
"encoding_format"?, "dimensions"?, "user"?}`` to ``{base_url}/embeddings`` and
gets ``{"object": "list", "data": [{"object": "embedding", "index",
"embedding"}], "model", "usage"}``. A batch is one request; the API takes at
most 2048 inputs per request (its embeddings reference), so a longer batch is
sent in several requests. Vectors come back in input order (the response's
``data`` is sorted by ``index``).

Errors are those of the OpenAI chat connection
(``openai_utils.openai_call_error``): an HTTP error response becomes the
``ModelCallError`` for its status, no response ``ModelUnreachable``.
"""

from __future__ import annotations

import base64
import struct
import threading
from typing import Any, Dict, List, Sequence

from pydantic import Field, PrivateAttr

from flink_agents.api.chat_models.errors import ModelResponseError
from flink_agents.api.embedding_models.embedding_model import (
    BaseEmbeddingModelConnection,
    BaseEmbeddingModelSetup,
    Embedding,
    texts_of,
)
from flink_agents.integrations.chat_models._per_loop import SdkClients
from flink_agents.integrations.chat_models.openai.openai_utils import api_key_or_placeholder, openai_call_error
from flink_agents.integrations.sdk import import_sdk

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_REQUEST_TIMEOUT",
    "MAX_INPUTS_PER_REQUEST",
    "OpenAIEmbeddingModelConnection",
    "OpenAIEmbeddingModelSetup",
]

PROVIDER = "openai"
DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 3
# Inputs per request, from OpenAI's embeddings API reference.
MAX_INPUTS_PER_REQUEST = 2048


def _vector(value: Any) -> Embedding:
    """A float vector from an ``embedding`` (a list, or base64 of
    little-endian float32 when ``encoding_format="base64"`` was asked)."""
    if isinstance(value, str):
        raw = base64.b64decode(value)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return [float(x) for x in value]


def _vectors_of(response: Any, count: int) -> List[Embedding]:
    """The vectors of one response, ordered by ``index``."""
    items = sorted(response.data, key=lambda item: item.index)
    indexes = [item.index for item in items]
    if indexes != list(range(count)):
        raise ModelResponseError(
            f"embeddings came back for indexes {indexes} of a request with {count} inputs", PROVIDER
        )
    return [_vector(item.embedding) for item in items]


class OpenAIEmbeddingModelConnection(BaseEmbeddingModelConnection):
    """A connection to an OpenAI-compatible embeddings endpoint.

    ``embed`` uses a shared ``openai.OpenAI`` client; ``aembed`` an
    ``openai.AsyncOpenAI`` client per event loop. Both are created on first
    use and closed by ``close()``.

    Attributes:
        api_key: The API key; None reads ``OPENAI_API_KEY``, else sends a
            placeholder that local servers accept.
        base_url: The API's base URL (``.../v1``); None is the SDK's default
            (``OPENAI_BASE_URL`` or api.openai.com).
        request_timeout: Timeout of one HTTP request, in seconds.
        max_retries: How often the SDK retries a failed request (with backoff).
        organization: The ``OpenAI-Organization`` to bill.
        project: The ``OpenAI-Project`` to bill.
    """

    api_key: str | None = Field(default=None, repr=False)
    base_url: str | None = None
    request_timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT, gt=0)
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0)
    organization: str | None = None
    project: str | None = None

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _clients: SdkClients | None = PrivateAttr(default=None)

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        organization: str | None = None,
        project: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Positional parameters in 0.3.1's order."""
        super().__init__(
            api_key=api_key, base_url=base_url, request_timeout=request_timeout, max_retries=max_retries,
            organization=organization, project=project, **kwargs,
        )

    def _new_client(self, asynchronous: bool) -> Any:
        openai = import_sdk("openai", "all", type(self).__name__)
        options = {
            "api_key": api_key_or_placeholder(self.api_key, self.base_url, type(self).__name__),
            "base_url": self.base_url, "timeout": self.request_timeout,
            "max_retries": self.max_retries, "organization": self.organization, "project": self.project,
        }
        return openai.AsyncOpenAI(**options) if asynchronous else openai.OpenAI(**options)

    def _pool(self) -> SdkClients:
        with self._lock:
            if self._clients is None:
                self._clients = SdkClients(lambda: self._new_client(False), lambda: self._new_client(True))
            return self._clients

    @property
    def client(self) -> Any:
        """The shared ``openai.OpenAI`` client."""
        return self._pool().sync()

    @staticmethod
    def _requests(text: str | Sequence[str], kwargs: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The ``embeddings.create`` arguments of each request, in order."""
        settings = {k: v for k, v in kwargs.items() if v is not None}
        if not settings.get("model"):
            raise ValueError("an OpenAI embedding call needs a model name (set OpenAIEmbeddingModelSetup.model)")
        texts = texts_of(text)
        size = MAX_INPUTS_PER_REQUEST
        return [{**settings, "input": texts[start:start + size]} for start in range(0, len(texts), size)]

    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Embed one text or a batch.

        Args:
            text: One string, or a sequence of strings.
            **kwargs: ``model`` (required), ``encoding_format`` (``"float"``
                or ``"base64"``; either way vectors come back as floats),
                ``dimensions`` (``text-embedding-3`` and later), ``user``, and
                other ``embeddings.create`` parameters; None values are not sent.

        Returns:
            One vector for a string; one vector per text, in input order, for
            a sequence (``[]`` for an empty one, without a request).

        Raises:
            ValueError: No model given.
            TypeError: An item of the batch is not a string (names its index).
            ModelCallError: The provider refused or failed a request, or its
                reply does not hold one vector per input.
        """
        import openai

        vectors: List[Embedding] = []
        for request in self._requests(text, kwargs):
            try:
                response = self.client.embeddings.create(**request)
            except openai.APIError as exc:
                raise openai_call_error(exc, PROVIDER) from exc
            vectors.extend(_vectors_of(response, len(request["input"])))
        return vectors[0] if isinstance(text, str) else vectors

    async def aembed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Async ``embed`` over an ``openai.AsyncOpenAI`` client of the
        running loop; requests of a long batch are sent one after another."""
        import openai

        vectors: List[Embedding] = []
        for request in self._requests(text, kwargs):
            try:
                client = await self._pool().current()
                response = await client.embeddings.create(**request)
            except openai.APIError as exc:
                raise openai_call_error(exc, PROVIDER) from exc
            vectors.extend(_vectors_of(response, len(request["input"])))
        return vectors[0] if isinstance(text, str) else vectors

    def close(self) -> None:
        """Close the clients (async ones on their loops, as the chat
        connection does); a later call opens new ones."""
        with self._lock:
            clients = self._clients
        if clients is not None:
            clients.close()


class OpenAIEmbeddingModelSetup(BaseEmbeddingModelSetup):
    """Which OpenAI embedding model to use, with which settings.

    Attributes:
        encoding_format: ``"float"`` or ``"base64"`` on the wire; vectors are
            floats either way.
        dimensions: Length of the vectors (``text-embedding-3`` and later);
            None is the model's own.
        user: An end-user id, for OpenAI's abuse monitoring.
        additional_kwargs: Further ``embeddings.create`` parameters.
    """

    encoding_format: str = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None
    additional_kwargs: Dict[str, Any] = Field(default_factory=dict)

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model``, ``encoding_format``, the settings that are set, then
        ``additional_kwargs``."""
        kwargs = {**super().model_kwargs, "encoding_format": self.encoding_format}
        if self.dimensions is not None:
            kwargs["dimensions"] = self.dimensions
        if self.user is not None:
            kwargs["user"] = self.user
        kwargs.update(self.additional_kwargs)
        return kwargs
