"""The agent's chat model, embedding model and vector store, as Mem0's LLM,
embedder and vector store.

Mem0 builds the three through its factories (``mem0.utils.factory``) from a
provider name: ``register_providers`` registers ``flink_agents`` with each
(``LlmFactory.register_provider`` and the factories' ``provider_to_class``
maps), and ``Mem0LongTermMemory`` hands Mem0 the resource objects in the
providers' configs. The resources given are the raw ones (not the journaled
views): Mem0's calls happen inside one journaled memory operation.

Vector scores: Mem0 ranks by similarity (higher is closer) and drops results
under its ``threshold``; ``BaseVectorStore`` documents report distances
(Chroma: lower is closer), so search results carry ``1 / (1 + distance)``,
as Mem0's own Chroma adapter does.
"""

from __future__ import annotations

from typing import Any, Dict, List

from mem0.configs.llms.base import BaseLlmConfig
from mem0.embeddings.base import EmbeddingBase
from mem0.llms.base import LLMBase
from mem0.utils.factory import EmbedderFactory, LlmFactory, VectorStoreFactory
from mem0.vector_stores.base import VectorStoreBase
from pydantic import BaseModel, ConfigDict

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.vector_stores.vector_store import CollectionManageableVectorStore, Document, check_filters

__all__ = ["PROVIDER", "FlinkAgentsEmbedding", "FlinkAgentsLLM", "FlinkAgentsMem0VectorStore", "VectorStoreProviderConfig",
           "register_providers"]

PROVIDER = "flink_agents"
_HERE = __name__


class FlinkAgentsEmbedding(EmbeddingBase):
    """Mem0 embedder over an embedding model setup (``config.model``)."""

    def embed(self, text: str, memory_action: Any = None) -> List[float]:
        return [float(x) for x in self.config.model.embed(text)]

    def embed_batch(self, texts: List[str], memory_action: Any = "add") -> List[List[float]]:
        return [[float(x) for x in vector] for vector in self.config.model.embed(list(texts))] if texts else []


class FlinkAgentsLLM(LLMBase):
    """Mem0 LLM over a chat model setup (``config.model``): Mem0's messages
    in, the reply's text out (Mem0 parses its JSON itself)."""

    def generate_response(self, messages: List[Dict[str, str]], tools: Any = None, tool_choice: str = "auto",
                          **kwargs: Any) -> str:
        chat = [ChatMessage(role=MessageRole(m["role"]), content=m["content"]) for m in messages]
        return self.config.model.chat(chat).content


class VectorStoreProviderConfig(BaseModel):
    """The ``flink_agents`` vector store provider's config: the live store
    and the collection Mem0 keeps memories in."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vector_store: Any
    collection_name: str

    def model_dump(self, **_: Any) -> Dict[str, Any]:  # type: ignore[override]
        """The constructor arguments, the store kept as the live object."""
        return {"vector_store": self.vector_store, "collection_name": self.collection_name}


def _payload(document: Document) -> Dict[str, Any]:
    return {**document.metadata, "data": document.metadata.get("data", document.content)}


class _Output(BaseModel):
    """What Mem0 reads from a vector store hit: ``id``, ``score``, ``payload``."""

    id: str | None = None
    score: float | None = None
    payload: Dict[str, Any] | None = None


class FlinkAgentsMem0VectorStore(VectorStoreBase):
    """Mem0 vector store over a ``CollectionManageableVectorStore``, pinned
    to one collection (Mem0 uses one per ``Memory``)."""

    def __init__(self, vector_store: CollectionManageableVectorStore, collection_name: str, **_: Any) -> None:
        if not isinstance(vector_store, CollectionManageableVectorStore):
            raise TypeError(
                f"Mem0 needs a vector store that manages collections (CollectionManageableVectorStore), "
                f"got {type(vector_store).__name__}"
            )
        self.store = vector_store
        self.collection_name = collection_name
        self.store.create_collection_if_not_exists(collection_name)

    def create_col(self, name: str, vector_size: Any = None, distance: Any = None) -> None:
        self.collection_name = name
        self.store.create_collection_if_not_exists(name)

    def insert(self, vectors: List[List[float]], payloads: List[Dict[str, Any]] | None = None,
               ids: List[str] | None = None) -> None:
        if ids is None:
            raise ValueError("Mem0 inserted vectors without ids")
        payloads = payloads or [{} for _ in vectors]
        self.store.add([
            Document(id=i, content=str(p.get("data", "")), metadata=_scalars(p), embedding=list(v))
            for i, p, v in zip(ids, payloads, vectors)
        ], collection_name=self.collection_name)

    def search(self, query: str, vectors: Any, top_k: int = 5, filters: Dict[str, Any] | None = None) -> List[_Output]:
        embedding = vectors[0] if vectors and isinstance(vectors[0], list) else vectors
        found = self.store._query_embedding(
            embedding=list(embedding), limit=top_k, collection_name=self.collection_name,
            filters=check_filters(filters or None), **self.store.store_kwargs,
        )
        return [_Output(id=d.id, score=None if d.score is None else 1.0 / (1.0 + d.score), payload=_payload(d))
                for d in found]

    def delete(self, vector_id: str) -> None:
        self.store.delete(ids=[vector_id], collection_name=self.collection_name)

    def update(self, vector_id: str, vector: List[float] | None = None, payload: Dict[str, Any] | None = None) -> None:
        old = self.get(vector_id)
        if old is None:
            raise ValueError(f"Mem0 updated memory {vector_id!r}, which is not in {self.collection_name!r}")
        merged = payload if payload is not None else old.payload or {}
        embedding = list(vector) if vector is not None else self.store.get(ids=[vector_id], collection_name=self.collection_name)[0].embedding
        self.store.update([Document(id=vector_id, content=str(merged.get("data", "")), metadata=_scalars(merged),
                                    embedding=embedding)], collection_name=self.collection_name)

    def get(self, vector_id: str) -> _Output | None:
        found = self.store.get(ids=[vector_id], collection_name=self.collection_name)
        return _Output(id=found[0].id, payload=_payload(found[0])) if found else None

    def list_cols(self) -> List[str]:
        return [self.collection_name]

    def delete_col(self) -> None:
        self.store.delete_collection(self.collection_name)

    def col_info(self) -> Dict[str, Any]:
        return {"name": self.collection_name}

    def list(self, filters: Dict[str, Any] | None = None, top_k: int | None = None) -> List[List[_Output]]:
        found = self.store.get(collection_name=self.collection_name, filters=check_filters(filters or None), limit=top_k)
        return [[_Output(id=d.id, payload=_payload(d)) for d in found]]

    def reset(self) -> None:
        self.store.delete_collection(self.collection_name)
        self.store.create_collection_if_not_exists(self.collection_name)


def _scalars(payload: Dict[str, Any]) -> Dict[str, Any]:
    """Mem0's payload as vector store metadata (JSON scalars; None dropped).

    Raises:
        TypeError: A value is a list or a dict (names the field).
    """
    out = {}
    for field, value in payload.items():
        if value is None:
            continue
        if not isinstance(value, (str, int, float, bool)):
            raise TypeError(f"Mem0 payload field {field!r} is a {type(value).__name__}; the vector store keeps scalars only")
        out[field] = value
    return out


def register_providers() -> None:
    """Make ``flink_agents`` a provider of Mem0's three factories (idempotent)."""
    LlmFactory.register_provider(PROVIDER, f"{_HERE}.FlinkAgentsLLM", BaseLlmConfig)
    EmbedderFactory.provider_to_class[PROVIDER] = f"{_HERE}.FlinkAgentsEmbedding"
    VectorStoreFactory.provider_to_class[PROVIDER] = f"{_HERE}.FlinkAgentsMem0VectorStore"
