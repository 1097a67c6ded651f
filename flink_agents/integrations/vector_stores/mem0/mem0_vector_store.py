"""A vector store on Mem0's vector store providers (``mem0ai``, the ``mem0``
extra): pgvector, Qdrant, Milvus, Redis, Chroma, ... through
``mem0.utils.factory.VectorStoreFactory``. Class name, module path and
fields as Flink Agents 0.3.1's.

Mem0's stores hold one collection each; this class opens one per
collection on first use (the provider creates it if missing) and keeps it.
A document is stored as the provider's payload ``{**metadata, "data":
content}`` (Mem0's own convention), so ``"data"`` cannot be a metadata key.

Embeddings come from this project's embedding model (``embedding_model``);
the provider gets vectors only. ``Document.score`` is what the provider
reports, closest first (Mem0 2.2's Chroma provider: ``1 / (1 +
distance)``, higher is closer; each provider documents its own).

``add`` is an upsert: ids already stored are updated, the others
inserted (one ``get`` per id to tell them apart). Filters: the equality
DSL, passed to the provider as Mem0 itself passes them.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Dict, List

from pydantic import Field, PrivateAttr

from flink_agents.api.vector_stores.vector_store import (
    CollectionManageableVectorStore,
    Document,
    check_filters,
)
from flink_agents.integrations.sdk import import_sdk

__all__ = ["Mem0VectorStore"]

_CONTENT_KEY = "data"
_ALL = 1_000_000  # what ``limit=None`` lists at most (Mem0's ``list`` needs a number)


def _as_document(output: Any) -> Document:
    """A Mem0 ``OutputData`` (``id``, ``score``, ``payload``) as a ``Document``."""
    payload = getattr(output, "payload", None) or {}
    metadata = {k: v for k, v in payload.items() if k != _CONTENT_KEY}
    score = getattr(output, "score", None)
    return Document(
        id=getattr(output, "id", None), content=payload.get(_CONTENT_KEY) or "", metadata=metadata,
        score=None if score is None else float(score),
    )


def _flat(listed: Any) -> List[Any]:
    """Mem0's ``list`` answers ``[outputs]`` for some providers, ``outputs`` for others."""
    if not listed:
        return []
    if isinstance(listed, (list, tuple)) and isinstance(listed[0], (list, tuple)):
        return list(listed[0])
    return list(listed)


class Mem0VectorStore(CollectionManageableVectorStore):
    """Documents in a Mem0 vector store provider (module docstring).

    Attributes:
        embedding_model: Name of the agent's embedding model setup.
        provider: Mem0's provider name (``"chroma"``, ``"qdrant"``, ``"pgvector"``, ...).
        provider_config: The provider's config (Mem0's keys, e.g. Chroma:
            ``{"path": DIR}``); ``collection_name`` is set per collection.
        collection: The collection used when a call names none.
    """

    provider: str
    provider_config: Dict[str, Any] = Field(default_factory=dict)
    collection: str = "flink_agents_mem0_vs"

    _stores: Dict[str, Any] = PrivateAttr(default_factory=dict)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def store_kwargs(self) -> Dict[str, Any]:
        """None: Mem0's stores take their settings at creation (``provider_config``)."""
        return {}

    def _store(self, collection_name: str | None) -> Any:
        """The provider's store of the collection, opened (and created) on first use.

        Raises:
            ImportError: ``mem0ai`` is not installed (names the extra).
            ValueError: Mem0 does not know ``provider``.
        """
        name = collection_name or self.collection
        found = self._stores.get(name)
        if found is not None:
            return found
        with self._lock:
            if name not in self._stores:
                factory = import_sdk("mem0.utils.factory", "mem0", "Mem0VectorStore").VectorStoreFactory
                self._stores[name] = factory.create(self.provider, {**self.provider_config, "collection_name": name})
            return self._stores[name]

    def create_collection_if_not_exists(self, name: str, **kwargs: Any) -> None:
        """Open (so create) collection ``name``; ``kwargs`` are not used."""
        self._store(name)

    def delete_collection(self, name: str) -> None:
        """Delete collection ``name`` and its documents."""
        store = self._store(name)
        with self._lock:
            self._stores.pop(name, None)
        store.delete_col()

    def get(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        limit: int | None = 100,
        **kwargs: Any,
    ) -> List[Document]:
        """Documents by id (missing ids left out), or up to ``limit``
        matching ``filters`` (``None``: up to 1,000,000)."""
        store = self._store(collection_name)
        if ids is not None:
            found = [store.get(vector_id=i) for i in ([ids] if isinstance(ids, str) else ids)]
            return [_as_document(output) for output in found if output is not None and getattr(output, "id", None)]
        listed = store.list(filters=check_filters(filters), top_k=_ALL if limit is None else limit)
        return [_as_document(output) for output in _flat(listed)]

    def delete(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Delete by id, else every document matching ``filters`` (None:
        all), one provider call per document."""
        store = self._store(collection_name)
        if ids is None:
            ids = [output.id for output in _flat(store.list(filters=check_filters(filters), top_k=_ALL))]
        for vector_id in [ids] if isinstance(ids, str) else ids:
            store.delete(vector_id=vector_id)

    def _query_embedding(
        self,
        embedding: List[float],
        limit: int = 10,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> List[Document]:
        found = self._store(collection_name).search(query="", vectors=embedding, top_k=limit, filters=filters)
        return [_as_document(output) for output in found]

    def _add_embedding(self, *, documents: List[Document], collection_name: str | None = None, **kwargs: Any) -> List[str]:
        store = self._store(collection_name)
        payloads = [_payload(index, document) for index, document in enumerate(documents)]
        ids = [document.id or str(uuid.uuid4()) for document in documents]
        stored = {i for i, document in zip(ids, documents) if document.id is not None and store.get(vector_id=i) is not None}
        fresh = [n for n, i in enumerate(ids) if i not in stored]
        if fresh:
            store.insert(
                vectors=[documents[n].embedding for n in fresh], payloads=[payloads[n] for n in fresh],
                ids=[ids[n] for n in fresh],
            )
        for n, vector_id in enumerate(ids):
            if vector_id in stored:
                store.update(vector_id=vector_id, vector=documents[n].embedding, payload=payloads[n])
        return ids

    def _update_embedding(self, *, documents: List[Document], collection_name: str | None = None, **kwargs: Any) -> None:
        store = self._store(collection_name)
        for index, document in enumerate(documents):
            store.update(vector_id=document.id, vector=document.embedding, payload=_payload(index, document))


def _payload(index: int, document: Document) -> Dict[str, Any]:
    """Mem0's payload of a document.

    Raises:
        ValueError: The metadata has a ``"data"`` key (names the document's index).
    """
    if _CONTENT_KEY in document.metadata:
        raise ValueError(
            f"documents[{index}].metadata['data']: 'data' holds the document's content in a Mem0 "
            "payload; rename that metadata field"
        )
    return {**document.metadata, _CONTENT_KEY: document.content}
