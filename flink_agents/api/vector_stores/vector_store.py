"""Vector stores: documents with embeddings, searched by meaning.

A vector store is a resource (``ResourceType.VECTOR_STORE``, declared with
``@vector_store`` or ``env.add_resource``). It embeds text with an embedding
model setup of the agent (``embedding_model``, by resource name) when a
document or a query brings no vector of its own, and keeps documents in
collections. Module path and names as Flink Agents 0.3.1's
``flink_agents.api.vector_stores.vector_store``.

From an action, ``ctx.get_resource(name, ResourceType.VECTOR_STORE)``
returns the store wrapped so that each call (``query``, ``add``, ``update``,
``get``, ``delete``, their async ``a``-variants, collection management) is
journaled: a replay after a failover returns the recorded result and writes
nothing again; documents added without an id get ids derived from the run,
so an add re-executed before its journal entry was committed replaces its
first copy (``runtime.execution.journaled_vector_store``). The built-in
retrieval action answers a ``ContextRetrievalRequestEvent`` the same way
(``runtime.features.retrieval``).

Implementations: ``add`` must be an upsert (a document whose id is stored
already is replaced), and must not change the order of the ids it returns.

Filter DSL (``filters`` of ``query``, ``get`` and ``delete``): equality only,
the subset every backend honours. ``{"field": value}`` matches documents
whose metadata ``field`` equals ``value`` (a JSON scalar); several keys are
AND-ed; ``None`` means no filter. Anything else (operators such as ``$gt``,
nested dicts, lists) raises ``NotImplementedError`` naming the field; pass a
backend's own filter through its keyword arguments instead (Chroma:
``where=``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Dict, List, TypeVar

from pydantic import BaseModel, Field

from flink_agents.api.embedding_models.embedding_model import BaseEmbeddingModelSetup
from flink_agents.api.resource import Resource, ResourceType

__all__ = [
    "BaseVectorStore",
    "CollectionManageableVectorStore",
    "Document",
    "VectorStoreQuery",
    "VectorStoreQueryMode",
    "VectorStoreQueryResult",
    "check_filters",
]


class VectorStoreQueryMode(str, Enum):
    """How a query searches. ``SEMANTIC``: by embedding similarity (the
    only mode in Flink Agents 0.3.1)."""

    SEMANTIC = "semantic"


class VectorStoreQuery(BaseModel):
    """A search.

    Attributes:
        mode: ``VectorStoreQueryMode.SEMANTIC``.
        query_text: The text embedded and searched for.
        limit: At most this many documents come back (>= 1; default 10).
        collection_name: The collection searched (default: the store's).
        filters: Equality filter on metadata (module docstring), or None.
        extra_args: Backend settings for this query (e.g. Chroma's ``where``).
    """

    mode: VectorStoreQueryMode = VectorStoreQueryMode.SEMANTIC
    query_text: str
    limit: int = Field(default=10, ge=1)
    collection_name: str | None = None
    filters: Dict[str, Any] | None = None
    extra_args: Dict[str, Any] = Field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.mode.value} query: {self.query_text!r} (limit={self.limit})"


class Document(BaseModel):
    """A piece of text in a vector store.

    Attributes:
        content: The text.
        metadata: JSON-scalar values (source, product id, ...); filters match them.
        id: Its id in the store (assigned by ``add`` when None).
        embedding: Its vector (``list[float]``), computed by ``add`` when None.
        score: From a query only: the backend's distance or similarity to
            the query (each store documents which; Chroma: distance, lower
            is closer); None elsewhere.
    """

    content: str
    metadata: Dict[str, Any] = Field(default_factory=dict)
    id: str | None = None
    embedding: List[float] | None = None
    score: float | None = None

    def __str__(self) -> str:
        preview = self.content if len(self.content) <= 50 else self.content[:50] + "..."
        return f"Document: {preview}"


class VectorStoreQueryResult(BaseModel):
    """What a query found: ``documents``, closest first."""

    documents: List[Document]

    def __str__(self) -> str:
        return f"QueryResult: {len(self.documents)} documents"


def check_filters(filters: Dict[str, Any] | None) -> Dict[str, Any] | None:
    """``filters`` if it is in the equality DSL (module docstring).

    Raises:
        NotImplementedError: A key is an operator (starts with ``$``) or a
            value is not a JSON scalar; names the field.
        TypeError: ``filters`` is not a dict.
    """
    if filters is None:
        return None
    if not isinstance(filters, dict):
        raise TypeError(f"filters must be a dict of metadata field -> value, got {type(filters).__name__}")
    for field, value in filters.items():
        if not isinstance(field, str) or field.startswith("$"):
            raise NotImplementedError(
                f"filter key {field!r}: only equality filters {{field: value}} are supported; "
                "pass backend filters through the store's own arguments (e.g. Chroma's where=)"
            )
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise NotImplementedError(
                f"filter on {field!r}: value {value!r} is not a JSON scalar; only equality filters are supported"
            )
    return filters


class BaseVectorStore(Resource, ABC):
    """A vector store (see the module docstring).

    Subclasses implement ``store_kwargs``, ``get``, ``delete``,
    ``_query_embedding``, ``_add_embedding`` and ``_update_embedding``;
    embedding text is done here.

    Attributes:
        embedding_model: Name of the agent's embedding model setup (or the
            setup itself) used for documents and queries without vectors;
            None when callers always bring vectors.
        collection: The collection used when a call names none (None: the
            backend's default).
    """

    embedding_model: str | BaseEmbeddingModelSetup | None = None
    collection: str | None = None

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.VECTOR_STORE

    @property
    @abstractmethod
    def store_kwargs(self) -> Dict[str, Any]:
        """Backend settings passed with every call (a call's own win)."""

    def open(self) -> None:
        """Resolve ``embedding_model`` by name.

        Raises:
            KeyError: The agent has no embedding model setup of that name.
        """
        if isinstance(self.embedding_model, str):
            if self.resource_context is None:
                raise RuntimeError(f"{type(self).__name__} was created outside a runtime")
            self.embedding_model = self.resource_context.get_resource(  # type: ignore[assignment]
                self.embedding_model, ResourceType.EMBEDDING_MODEL
            )

    def _embedding_model(self) -> BaseEmbeddingModelSetup:
        model = self.embedding_model
        if model is None:
            raise TypeError(
                f"{type(self).__name__} has no embedding_model: set embedding_model= to an embedding "
                "model setup's name, or give documents and queries their own vectors"
            )
        if isinstance(model, str):
            raise RuntimeError(f"{type(self).__name__}.embedding_model {model!r} is not resolved: open() was not called")
        return model

    def _embed(self, text: str) -> List[float]:
        vector = self._embedding_model().embed(text)
        if not isinstance(vector, list) or (vector and not isinstance(vector[0], (int, float))):
            raise TypeError(f"embedding model returned a {type(vector).__name__} for one text, not a list of floats")
        return [float(x) for x in vector]

    def _ensure_embeddings(self, documents: List[Document]) -> None:
        missing = [d for d in documents if d.embedding is None]
        if not missing:
            return
        vectors = self._embedding_model().embed([d.content for d in missing])
        if len(vectors) != len(missing):
            raise ValueError(f"embedding model returned {len(vectors)} vectors for {len(missing)} documents")
        for document, vector in zip(missing, vectors):
            document.embedding = [float(x) for x in vector]

    def add(self, documents: Document | List[Document], collection_name: str | None = None, **kwargs: Any) -> List[str]:
        """Store ``documents`` (embedding those without vectors, in one
        batch); a document whose id is stored already is replaced (upsert).

        Returns:
            Their ids, in order (assigned where a document had none).

        Raises:
            TypeError: A document needs embedding and the store has no model.
        """
        docs = _as_list(documents)
        self._ensure_embeddings(docs)
        return self._add_embedding(documents=docs, collection_name=collection_name, **{**self.store_kwargs, **kwargs})

    def query(self, query: VectorStoreQuery) -> VectorStoreQueryResult:
        """The documents closest to ``query.query_text`` (at most ``query.limit``).

        Raises:
            TypeError: The store has no embedding model.
            NotImplementedError: ``query.filters`` is outside the DSL.
        """
        embedding = self._embed(query.query_text)
        documents = self._query_embedding(
            embedding=embedding,
            limit=query.limit,
            collection_name=query.collection_name,
            filters=check_filters(query.filters),
            **{**self.store_kwargs, **query.extra_args},
        )
        return VectorStoreQueryResult(documents=documents)

    def update(self, documents: Document | List[Document], collection_name: str | None = None, **kwargs: Any) -> None:
        """Replace stored documents, matched by ``Document.id``.

        Raises:
            ValueError: No documents, or one without an ``id``.
        """
        docs = _as_list(documents)
        if not docs:
            raise ValueError("update needs at least one document")
        for index, document in enumerate(docs):
            if document.id is None:
                raise ValueError(f"documents[{index}] has no id; update matches documents by id")
        self._ensure_embeddings(docs)
        self._update_embedding(documents=docs, collection_name=collection_name, **{**self.store_kwargs, **kwargs})

    @abstractmethod
    def get(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        limit: int | None = 100,
        **kwargs: Any,
    ) -> List[Document]:
        """Documents by id, or (without ``ids``) up to ``limit`` matching
        ``filters`` (``limit=None``: all of them)."""

    @abstractmethod
    def delete(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Delete documents by id and/or filter."""

    @abstractmethod
    def _query_embedding(
        self,
        embedding: List[float],
        limit: int = 10,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> List[Document]:
        """The ``limit`` documents closest to ``embedding``, closest first, with ``score`` set."""

    @abstractmethod
    def _add_embedding(self, *, documents: List[Document], collection_name: str | None = None, **kwargs: Any) -> List[str]:
        """Store documents that all have embeddings; their ids."""

    @abstractmethod
    def _update_embedding(self, *, documents: List[Document], collection_name: str | None = None, **kwargs: Any) -> None:
        """Replace documents (all with ids and embeddings)."""


class CollectionManageableVectorStore(BaseVectorStore, ABC):
    """A vector store whose collections can be created and deleted."""

    @abstractmethod
    def create_collection_if_not_exists(self, name: str, **kwargs: Any) -> None:
        """Create collection ``name`` unless it exists (``kwargs``: backend
        options applied at creation, e.g. Chroma's ``metadata``)."""

    @abstractmethod
    def delete_collection(self, name: str) -> None:
        """Delete collection ``name`` and its documents."""


_T = TypeVar("_T")


def _as_list(value: _T | List[_T]) -> List[_T]:
    return list(value) if isinstance(value, list) else [value]
