"""Embedding model resources: a connection (how to reach a provider) and a
setup (which model, with which settings, over a connection), as in Flink
Agents 0.3.1's ``api/embedding_models/embedding_model.py``.

Inside an action, ``ctx.get_resource(name, ResourceType.EMBEDDING_MODEL)``
gives the setup; its ``embed`` (and ``aembed``) calls there are journaled
like model calls (``runtime.execution``), so a failover replays the vectors
instead of asking the provider again.
"""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from typing import Any, Dict, List, Sequence

from pydantic import Field, PrivateAttr

from flink_agents.api.resource import Resource, ResourceType

__all__ = ["BaseEmbeddingModelConnection", "BaseEmbeddingModelSetup", "Embedding", "texts_of"]

Embedding = List[float]


def texts_of(text: str | Sequence[str]) -> List[str]:
    """The texts of an ``embed`` call: ``[text]`` for one string, else the
    batch as a list.

    Raises:
        TypeError: An item of the batch is not a ``str`` (names its index).
    """
    if isinstance(text, str):
        return [text]
    texts = list(text)
    for index, item in enumerate(texts):
        if not isinstance(item, str):
            raise TypeError(f"text to embed #{index} must be a str, got {type(item).__name__}: {item!r:.80}")
    return texts


class BaseEmbeddingModelConnection(Resource, ABC):
    """How to reach an embedding service (address, credentials, timeouts).

    One connection may serve several setups.
    """

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.EMBEDDING_MODEL_CONNECTION

    @abstractmethod
    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Embed one text or a batch.

        Args:
            text: One string, or a sequence of strings (a batch).
            **kwargs: Model settings (``model``, ``dimensions``, ...).

        Returns:
            One vector (``list[float]``) for a string; one vector per input,
            in input order, for a sequence.

        Raises:
            flink_agents.api.chat_models.errors.ModelCallError: The provider
                refused or failed the call (classified retryable or not).
        """

    async def aembed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Async ``embed``; the default runs ``embed`` on a worker thread."""
        return await asyncio.to_thread(functools.partial(self.embed, text, **kwargs))


class BaseEmbeddingModelSetup(Resource):
    """Which embedding model to use over which connection.

    Attributes:
        connection: Name of an ``EMBEDDING_MODEL_CONNECTION`` resource (or the
            connection itself, as 0.3.1 allows).
        model: The provider's model name.
    """

    connection: Any = Field(description="Name of the connection resource, or the connection.")
    model: str = Field(default="", description="Name of the embedding model to use.")

    _connection: BaseEmbeddingModelConnection | None = PrivateAttr(default=None)

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.EMBEDDING_MODEL

    @property
    def model_kwargs(self) -> Dict[str, Any]:
        """Settings passed to the connection with every call (subclasses add theirs)."""
        return {"model": self.model} if self.model else {}

    def open(self) -> None:
        """Resolve the connection by name.

        Raises:
            KeyError: No embedding model connection has that name.
        """
        self._connection = self._get_connection()

    def _get_connection(self) -> BaseEmbeddingModelConnection:
        if isinstance(self.connection, BaseEmbeddingModelConnection):
            return self.connection
        if self._connection is None:
            if self.get_resource is None:
                raise RuntimeError(f"{type(self).__name__} was created outside a runtime")
            resource = self.get_resource(str(self.connection), ResourceType.EMBEDDING_MODEL_CONNECTION)
            if not isinstance(resource, BaseEmbeddingModelConnection):
                raise TypeError(
                    f"embedding model setup needs an embedding model connection; {self.connection!r} "
                    f"is a {type(resource).__name__}"
                )
            self._connection = resource
        return self._connection

    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Embed ``text`` (one string or a batch) with this setup's model and
        settings (``kwargs`` override them); see
        ``BaseEmbeddingModelConnection.embed``."""
        return self._get_connection().embed(text, **{**self.model_kwargs, **kwargs})

    async def aembed(self, text: str | Sequence[str], **kwargs: Any) -> Embedding | List[Embedding]:
        """Async ``embed``."""
        return await self._get_connection().aembed(text, **{**self.model_kwargs, **kwargs})
