"""Text embeddings from an Ollama server (``nomic-embed-text``,
``all-minilm``, ``mxbai-embed-large``, ...), through the official ``ollama``
SDK (the ``ollama`` extra: ``pip install -e '.[ollama]'``).

Requests follow Ollama's ``POST /api/embed`` (its ``docs/api.md``):
``{"model", "input": <text or list of texts>, "truncate"?, "dimensions"?,
"keep_alive"?, "options"?}``, answered with ``{"model", "embeddings":
[[float, ...], ...], ...}``, one vector per input in input order. A batch
goes in one request. Errors are those of the chat connection (see
``ollama_chat_model``): an HTTP error becomes the ``ModelCallError`` for its
status, a refused connection or a timeout ``ModelUnreachable``; the SDK does
not retry.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from pydantic import Field

from flink_agents.api.chat_models.errors import ModelResponseError
from flink_agents.api.embedding_models.embedding_model import (
    BaseEmbeddingModelConnection,
    BaseEmbeddingModelSetup,
    Embedding,
    texts_of,
)
from flink_agents.integrations.chat_models.ollama_chat_model import (
    PROVIDER,
    OllamaServer,
    ollama_call_error,
)

__all__ = ["OllamaEmbeddingModelConnection", "OllamaEmbeddingModelSetup"]

# Settings that are top-level fields of /api/embed; other settings are model options.
_TOP_LEVEL = ("truncate", "keep_alive", "dimensions")


class OllamaEmbeddingModelConnection(OllamaServer, BaseEmbeddingModelConnection):
    """A connection to an Ollama server for embeddings.

    Attributes:
        base_url: The server root, e.g. ``http://localhost:11434``.
        request_timeout: Timeout of one HTTP request, in seconds (None: none).
    """

    def _request(self, text: str | List[str], kwargs: Dict[str, Any]) -> Dict[str, Any]:
        settings = {k: v for k, v in kwargs.items() if v is not None}
        model = settings.pop("model", None)
        if not model:
            raise ValueError(f"a {type(self).__name__} call needs a model name (set the setup's `model`)")
        request: Dict[str, Any] = {"model": model, "input": text}
        for name in _TOP_LEVEL:
            if name in settings:
                request[name] = settings.pop(name)
        options = {**settings.pop("options", {}), **settings}
        if options:
            request["options"] = options
        return request

    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Embed one text or a batch (one request either way).

        Args:
            text: One string, or a sequence of strings.
            **kwargs: ``model`` (required); ``truncate`` (False: Ollama
                answers an error instead of cutting a text longer than the
                context), ``dimensions`` (vector size, for models that can
                shorten their vectors), ``keep_alive``; ``options`` (a dict)
                and any other setting (``num_ctx``, ...) go in ``options``.
                None values are left out.

        Returns:
            One vector for a string; one vector per text, in input order, for
            a sequence (``[]`` for an empty one, without a request).

        Raises:
            ValueError: No model given.
            TypeError: An item of the batch is not a string (names its index).
            ModelCallError: Ollama refused or failed the call, or its reply
                does not hold one vector per text.
            ImportError: The ``ollama`` SDK is not installed (names the extra).
        """
        texts = texts_of(text)
        if not texts:
            return []
        request = self._request(text if isinstance(text, str) else texts, kwargs)
        client = self._pool().sync()
        try:
            response = client.embed(**request)
        except Exception as exc:
            error = ollama_call_error(exc)
            if error is None:
                raise
            raise error from exc
        return _vectors(response, text, len(texts))

    async def aembed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Async ``embed``, on an ``ollama.AsyncClient`` per event loop."""
        texts = texts_of(text)
        if not texts:
            return []
        request = self._request(text if isinstance(text, str) else texts, kwargs)
        client = await self._pool().current()
        try:
            response = await client.embed(**request)
        except Exception as exc:
            error = ollama_call_error(exc)
            if error is None:
                raise
            raise error from exc
        return _vectors(response, text, len(texts))

    def close(self) -> None:
        """Close the clients; a later call opens new ones."""
        if self._clients is not None:
            self._clients.close()


def _vectors(response: Any, text: str | Sequence[str], count: int) -> Embedding | List[Embedding]:
    vectors = [[float(x) for x in vector] for vector in response.embeddings]
    if len(vectors) != count:
        raise ModelResponseError(
            f"Ollama returned {len(vectors)} embeddings for {count} input texts (model {response.model!r})", PROVIDER
        )
    return vectors[0] if isinstance(text, str) else vectors


class OllamaEmbeddingModelSetup(BaseEmbeddingModelSetup):
    """Which Ollama embedding model to use over an
    ``OllamaEmbeddingModelConnection`` (Flink Agents 0.3.1's fields, plus
    ``dimensions``).

    Attributes:
        model: The embedding model's Ollama name.
        truncate: Cut texts longer than the model's context (True, Ollama's
            default) instead of failing the request.
        keep_alive: How long the model stays loaded after the request; None
            is the server's default (5 minutes).
        dimensions: Vector size, for models that can shorten their vectors;
            None is the model's own size.
        additional_kwargs: Further settings (model options such as
            ``num_ctx``), over the fields above.
    """

    truncate: bool = Field(default=True, description="Cut texts longer than the context instead of failing.")
    keep_alive: float | str | None = Field(default=None, description="How long the model stays loaded.")
    dimensions: int | None = Field(default=None, gt=0, description="Vector size; None: the model's.")
    additional_kwargs: Dict[str, Any] = Field(default_factory=dict, description="Further /api/embed settings.")

    def __init__(
        self,
        *,
        connection: str,
        model: str,
        truncate: bool = True,
        additional_kwargs: Dict[str, Any] | None = None,
        keep_alive: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            connection=connection, model=model, truncate=truncate,
            additional_kwargs=additional_kwargs or {}, keep_alive=keep_alive, **kwargs,
        )

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """``model``, ``truncate``, ``keep_alive`` and ``dimensions`` when
        set, then ``additional_kwargs``."""
        kwargs: Dict[str, Any] = {**super().model_kwargs, "truncate": self.truncate}
        if self.keep_alive is not None:
            kwargs["keep_alive"] = self.keep_alive
        if self.dimensions is not None:
            kwargs["dimensions"] = self.dimensions
        return {**kwargs, **self.additional_kwargs}
