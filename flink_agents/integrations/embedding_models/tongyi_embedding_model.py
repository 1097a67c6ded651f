"""Text embeddings of Alibaba DashScope (``text-embedding-v1`` .. ``v4``),
through the official ``dashscope`` SDK (the ``tongyi`` extra: ``pip install -e '.[tongyi]'``).

The SDK's ``TextEmbedding.call`` posts ``{"model", "input": {"texts": [...]},
"parameters": {"text_type"?, "dimension"?, ...}}`` to
``{base_url}/services/embeddings/text-embedding/text-embedding`` and gets
``{"output": {"embeddings": [{"text_index", "embedding"}]}, "usage", "request_id"}``.
DashScope takes at most 10 texts per request for ``text-embedding-v3``/``v4``
and 25 for ``v1``/``v2`` (its text-embedding API reference), so a longer
batch is sent in several requests; vectors come back in input order.

Errors are those of the chat connection (see ``tongyi_chat_model``): an HTTP
error response becomes the ``ModelCallError`` for its status, a transport
failure ``ModelUnreachable``.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Dict, List, Sequence

from pydantic import Field

from flink_agents.api.chat_models.errors import ModelResponseError
from flink_agents.api.embedding_models.embedding_model import (
    BaseEmbeddingModelConnection,
    BaseEmbeddingModelSetup,
    Embedding,
    texts_of,
)
from flink_agents.integrations._dashscope import PROVIDER, check_response, dashscope_failure, resolve_api_key
from flink_agents.integrations.sdk import import_sdk

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_REQUEST_TIMEOUT",
    "TongyiEmbeddingModelConnection",
    "TongyiEmbeddingModelSetup",
    "max_texts_per_request",
]

DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_MODEL = "text-embedding-v4"
# Texts per request, from DashScope's text-embedding API reference.
_LEGACY_MODEL_BATCH = {"text-embedding-v1": 25, "text-embedding-v2": 25}
_DEFAULT_BATCH = 10


def max_texts_per_request(model: str) -> int:
    """How many texts DashScope takes in one request for ``model``:
    25 for ``text-embedding-v1``/``v2``, 10 otherwise (``v3``, ``v4``)."""
    return _LEGACY_MODEL_BATCH.get(model, _DEFAULT_BATCH)


class TongyiEmbeddingModelConnection(BaseEmbeddingModelConnection):
    """A connection to DashScope's text-embedding API.

    Attributes:
        api_key: The DashScope API key; None reads ``DASHSCOPE_API_KEY`` at
            call time (a missing key is ``ModelAuthenticationError``).
        request_timeout: Timeout of one HTTP request, in seconds.
        base_url: The API root (``.../api/v1``); None is the SDK's default.
        max_batch_size: Texts per request; None follows the model
            (``max_texts_per_request``).
    """

    api_key: str | None = Field(default=None, repr=False, description="Your DashScope API key.")
    request_timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT, gt=0, description="HTTP timeout, in seconds.")
    base_url: str | None = Field(default=None, description="DashScope API root; None is the SDK's default.")
    max_batch_size: int | None = Field(default=None, ge=1, description="Texts per request; None: the model's limit.")

    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Embed one text or a batch.

        Args:
            text: One string, or a sequence of strings.
            **kwargs: ``model`` (default ``text-embedding-v4``), ``text_type``
                (``"query"`` or ``"document"``), ``dimension`` (v3/v4), and
                other ``TextEmbedding.call`` parameters.

        Returns:
            One vector for a string; one vector per text, in input order, for
            a sequence (``[]`` for an empty one).

        Raises:
            ModelCallError: DashScope refused or failed a request, or its
                reply does not hold one vector per text.
            TypeError: An item of the batch is not a string (names its index).
            ImportError: The ``dashscope`` SDK is not installed (names the extra).
        """
        dashscope = import_sdk("dashscope", "tongyi", "TongyiEmbeddingModelConnection")
        texts = texts_of(text)
        settings = dict(kwargs)
        model = settings.pop("model", None) or DEFAULT_MODEL
        settings = {k: v for k, v in settings.items() if v is not None}
        api_key = resolve_api_key(settings.pop("api_key", None) or self.api_key)
        if self.base_url:
            settings["base_address"] = self.base_url
        size = self.max_batch_size or max_texts_per_request(model)
        vectors: List[Embedding] = []
        for start in range(0, len(texts), size):
            batch = texts[start:start + size]
            try:
                response = dashscope.TextEmbedding.call(
                    model=model, input=batch, api_key=api_key, request_timeout=self.request_timeout, **settings
                )
            except Exception as exc:
                raise dashscope_failure(exc, "DashScope text embedding call failed") from exc
            check_response(response)
            vectors.extend(_vectors_of(response, len(batch)))
        return vectors[0] if isinstance(text, str) else vectors

    async def aembed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Async ``embed``. The ``dashscope`` SDK has no async text-embedding
        API (only ``AioGeneration`` and ``AioMultiModalEmbedding``), so this
        runs ``embed`` on a worker thread."""
        return await asyncio.to_thread(functools.partial(self.embed, text, **kwargs))


def _vectors_of(response: Any, count: int) -> List[Embedding]:
    """The vectors of one response, ordered by ``text_index``."""
    items = (response.output or {}).get("embeddings") or []
    indexes = sorted(int(item["text_index"]) for item in items)
    if indexes != list(range(count)):
        raise ModelResponseError(
            f"DashScope returned embeddings for text_index {indexes} of a request with {count} texts "
            f"(request_id {response.request_id})",
            PROVIDER,
        )
    ordered = sorted(items, key=lambda item: int(item["text_index"]))
    return [[float(x) for x in item["embedding"]] for item in ordered]


class TongyiEmbeddingModelSetup(BaseEmbeddingModelSetup):
    """Which DashScope embedding model to use over a
    ``TongyiEmbeddingModelConnection`` (the fields of Flink Agents 0.3.1's setup).

    Attributes:
        model: ``text-embedding-v1`` .. ``text-embedding-v4`` (default v4).
        text_type: ``"query"`` or ``"document"`` (DashScope's default);
            None leaves it out.
        dimension: Vector size (v3/v4 only: 64 .. 2048); None is the model's default.
        additional_kwargs: Further ``TextEmbedding.call`` parameters
            (``output_type``, ``instruct``, ...); they override the fields above.
    """

    model: str = Field(default=DEFAULT_MODEL, description="DashScope embedding model name.")
    text_type: str | None = Field(default=None, description='"query" or "document".')
    dimension: int | None = Field(default=None, gt=0, description="Vector size (v3/v4).")
    additional_kwargs: Dict[str, Any] = Field(
        default_factory=dict, description="Further TextEmbedding.call parameters."
    )

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model``, ``text_type`` and ``dimension`` when set, then ``additional_kwargs``."""
        kwargs: Dict[str, Any] = {"model": self.model}
        if self.text_type is not None:
            kwargs["text_type"] = self.text_type
        if self.dimension is not None:
            kwargs["dimension"] = self.dimension
        return {**kwargs, **self.additional_kwargs}
