"""A vector store on Chroma (``chromadb``, the ``chroma`` extra: ``pip
install -e '.[chroma]'``), with Flink Agents 0.3.1's class name, module path
and fields.

Where the documents live (chosen by the fields, first match wins):

- ``host`` set: a Chroma server (``chroma run --path DIR --host H --port
  P``, or a hosted one) reached over HTTP by ``chromadb.HttpClient``;
  ``api_key`` goes in the ``x-chroma-token`` header. Use a server when
  several processes (Flink's Python workers at parallelism > 1, or a job and
  a loader script) share the documents.
- ``persist_directory`` set: an embedded ``chromadb.PersistentClient``
  keeping the collection in that directory (SQLite plus index files). A
  directory must be used by ONE process at a time (Chroma's documented
  limit of the embedded client: two processes writing it corrupt or lose
  data); threads of one process share it safely through the one client of
  this store.
- neither: an in-memory ``chromadb.EphemeralClient`` (gone when the process
  ends; tests and examples).

Embeddings always come from this project's embedding model
(``embedding_model``), never from Chroma: every add and query passes its
vectors and every collection is opened with ``embedding_function=None``,
so Chroma never downloads or runs its default ONNX model.

Scores: ``Document.score`` is Chroma's distance, lower is closer, in the
collection's space. Collections created here use Chroma's default space,
squared L2 (as Flink Agents 0.3.1 does); for unit-length vectors (e.g. the
hashing embedding, OpenAI's) that is ``2 - 2 * cosine similarity``, so it
ranks as cosine does. For cosine distance (``1 - cosine similarity``) create
the collection with ``collection_metadata={"hnsw:space": "cosine"}``; the
space of an existing collection does not change.

``add`` is an upsert: a document whose id is already stored is replaced,
so an add re-executed after a failover (``runtime.execution``'s journaled
view gives documents without ids deterministic ids) leaves one copy.
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

__all__ = ["DEFAULT_COLLECTION", "ChromaVectorStore"]

DEFAULT_COLLECTION = "flink_agents_chroma_collection"
_API_KEY_HEADER = "x-chroma-token"


def _chromadb() -> Any:
    return import_sdk("chromadb", "chroma", "ChromaVectorStore")


_CLIENT_CREATION = threading.Lock()  # see ChromaVectorStore.client

class ChromaVectorStore(CollectionManageableVectorStore):
    """Documents in a Chroma collection (module docstring for where they live).

    Attributes:
        embedding_model: Name of the agent's embedding model setup.
        persist_directory: Directory of an embedded persistent store (one
            process only).
        host: Host of a Chroma server (takes precedence over ``persist_directory``).
        port: Its port (default 8000).
        api_key: Sent to the server as the ``x-chroma-token`` header.
        client_settings: A ``chromadb.config.Settings`` for the client (for
            a server: ``chroma_server_ssl_enabled``, ``chroma_server_headers``
            are kept). Default: ``Settings(anonymized_telemetry=False)``,
            so workers send Chroma no usage telemetry.
        tenant: Chroma tenant (default ``"default_tenant"``).
        database: Chroma database (default ``"default_database"``).
        collection: The collection used when a call names none.
        collection_metadata: Metadata of collections this store creates
            (e.g. ``{"hnsw:space": "cosine"}``).
        auto_create_collection: Create a missing collection on first use
            (True); False: using a missing collection raises Chroma's
            ``NotFoundError`` naming it.

    The Chroma client is created on first use, once per store instance,
    and shared by every key the operator runs (Chroma's clients are safe to
    call from several threads).
    """

    persist_directory: str | None = None
    host: str | None = None
    port: int | None = 8000
    api_key: str | None = Field(default=None, repr=False)
    client_settings: Any = None
    tenant: str = "default_tenant"
    database: str = "default_database"
    collection: str = DEFAULT_COLLECTION
    collection_metadata: Dict[str, Any] = Field(default_factory=dict)
    auto_create_collection: bool = True

    _client: Any = PrivateAttr(default=None)

    @property
    def client(self) -> Any:
        """The ``chromadb`` client (created on first use, under a lock).

        Raises:
            ImportError: ``chromadb`` is not installed (names the extra).
        """
        if self._client is not None:
            return self._client
        # One lock per process, not per store: chromadb 1.5's client
        # creation is not thread-safe (two stores opening the same
        # directory at once, as subtasks of one worker in thread mode do,
        # fail with "Could not connect to tenant default_tenant").
        with _CLIENT_CREATION:
            if self._client is None:
                self._client = self._new_client()
        return self._client

    def _new_client(self) -> Any:
        chromadb = _chromadb()
        settings = self.client_settings
        if settings is None:
            # Chroma's product telemetry is on by default; a job's workers
            # should not phone home unless the user's own settings say so.
            from chromadb.config import Settings

            settings = Settings(anonymized_telemetry=False)
        common = {"settings": settings, "tenant": self.tenant, "database": self.database}
        if self.host is not None:
            # HttpClient overwrites these two settings with its arguments: keep the given ones.
            headers = dict(getattr(settings, "chroma_server_headers", None) or {})
            if self.api_key:
                headers[_API_KEY_HEADER] = self.api_key
            ssl = bool(getattr(settings, "chroma_server_ssl_enabled", False))
            return chromadb.HttpClient(
                host=self.host, port=self.port or 8000, ssl=ssl, headers=headers or None, **common
            )
        if self.persist_directory is not None:
            return chromadb.PersistentClient(path=self.persist_directory, **common)
        return chromadb.EphemeralClient(**common)

    @property
    def store_kwargs(self) -> Dict[str, Any]:
        """Settings of every call: ``collection_metadata`` and
        ``auto_create_collection`` (a call may override them)."""
        return {
            "collection_metadata": self.collection_metadata,
            "auto_create_collection": self.auto_create_collection,
        }

    def close(self) -> None:
        """Forget the client (a later call creates a new one)."""
        self._client = None

    # -- collections --------------------------------------------------------

    def create_collection_if_not_exists(self, name: str, **kwargs: Any) -> None:
        """Create collection ``name`` unless it exists.

        Args:
            name: 3-512 characters of ``[a-zA-Z0-9._-]`` (Chroma's rule).
            **kwargs: ``metadata``: the new collection's metadata
                (default: ``collection_metadata``).
        """
        metadata = kwargs.get("metadata", self.collection_metadata) or None
        self.client.get_or_create_collection(name=name, metadata=metadata, embedding_function=None)

    def delete_collection(self, name: str) -> None:
        """Delete collection ``name`` and its documents.

        Raises:
            chromadb.errors.NotFoundError: No such collection.
        """
        self.client.delete_collection(name=name)

    def _collection(self, name: str | None, kwargs: Dict[str, Any]) -> Any:
        name = name or self.collection
        if not kwargs.get("auto_create_collection", self.auto_create_collection):
            return self.client.get_collection(name=name, embedding_function=None)
        metadata = kwargs.get("collection_metadata", self.collection_metadata) or None
        return self.client.get_or_create_collection(name=name, metadata=metadata, embedding_function=None)

    # -- reads --------------------------------------------------------------

    def get(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        limit: int | None = 100,
        **kwargs: Any,
    ) -> List[Document]:
        """Documents by id, or up to ``limit`` matching ``filters`` / ``where``.

        Args:
            ids: One id or several (missing ids are left out).
            collection_name: Default: ``collection``.
            filters: Equality filter DSL (``api.vector_stores``).
            limit: At most this many (None: all).
            **kwargs: Chroma's ``where``, ``where_document``, ``offset``.

        Returns:
            Documents with ``id``, ``content`` and ``metadata`` (no embedding).
        """
        kwargs = {**self.store_kwargs, **kwargs}
        results = self._collection(collection_name, kwargs).get(
            ids=[ids] if isinstance(ids, str) else ids,
            where=chroma_where(filters, kwargs.get("where")),
            limit=limit,
            offset=kwargs.get("offset"),
            where_document=kwargs.get("where_document"),
            include=["documents", "metadatas"],
        )
        return [
            Document(id=rid, content=content or "", metadata=dict(metadata or {}))
            for rid, content, metadata in zip(results["ids"], results["documents"], results["metadatas"])
        ]

    def _query_embedding(
        self,
        embedding: List[float],
        limit: int = 10,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> List[Document]:
        results = self._collection(collection_name, kwargs).query(
            query_embeddings=[embedding],
            n_results=limit,
            where=chroma_where(filters, kwargs.get("where")),
            where_document=kwargs.get("where_document"),
            include=["documents", "metadatas", "distances"],
        )
        ids = results["ids"][0] if results.get("ids") else []
        contents = (results.get("documents") or [[]])[0]
        metadatas = (results.get("metadatas") or [[None] * len(ids)])[0]
        distances = (results.get("distances") or [[None] * len(ids)])[0]
        return [
            Document(id=rid, content=content or "", metadata=dict(metadata or {}),
                     score=None if distance is None else float(distance))
            for rid, content, metadata, distance in zip(ids, contents, metadatas, distances)
        ]

    # -- writes -------------------------------------------------------------

    def delete(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Delete documents by id and/or filter; with neither, every
        document of the collection (as 0.3.1).

        Args:
            **kwargs: Chroma's ``where``, ``where_document``.
        """
        kwargs = {**self.store_kwargs, **kwargs}
        collection = self._collection(collection_name, kwargs)
        where = chroma_where(filters, kwargs.get("where"))
        where_document = kwargs.get("where_document")
        id_list = [ids] if isinstance(ids, str) else ids
        if id_list is None and where is None and where_document is None:
            id_list = collection.get(include=[])["ids"]
            if not id_list:
                return
        collection.delete(ids=id_list, where=where, where_document=where_document)

    def _add_embedding(self, *, documents: List[Document], collection_name: str | None = None, **kwargs: Any) -> List[str]:
        collection = self._collection(collection_name, kwargs)
        ids = [document.id or str(uuid.uuid4()) for document in documents]
        self._write(collection.upsert, ids, documents)
        return ids

    def _update_embedding(self, *, documents: List[Document], collection_name: str | None = None, **kwargs: Any) -> None:
        collection = self._collection(collection_name, kwargs)
        self._write(collection.update, [str(document.id) for document in documents], documents)

    def _write(self, write: Any, ids: List[str], documents: List[Document]) -> None:
        """``write`` (upsert or update) in chunks of Chroma's max batch size."""
        metadatas = [chroma_metadata(index, document) for index, document in enumerate(documents)]
        batch = max(1, int(self.client.get_max_batch_size()))
        for start in range(0, len(documents), batch):
            end = start + batch
            write(
                ids=ids[start:end],
                embeddings=[document.embedding for document in documents[start:end]],
                documents=[document.content for document in documents[start:end]],
                metadatas=metadatas[start:end],
            )


def chroma_metadata(index: int, document: Document) -> Dict[str, Any] | None:
    """``document.metadata`` as Chroma stores it (None for an empty dict,
    which Chroma refuses).

    Raises:
        ValueError: A key is not a string or a value is not a str, int,
            float or bool (None, lists and dicts are refused); names the
            document's index and the field.
    """
    for field, value in document.metadata.items():
        if not isinstance(field, str) or not isinstance(value, (str, int, float, bool)):
            raise ValueError(
                f"documents[{index}].metadata[{field!r}] = {value!r:.80}: Chroma stores only str, int, "
                "float or bool metadata values (no None, lists or dicts)"
            )
    return dict(document.metadata) or None


def chroma_where(filters: Dict[str, Any] | None, where: Dict[str, Any] | None = None) -> Dict[str, Any] | None:
    """Chroma's ``where`` for the equality DSL ``filters`` and a native
    ``where`` (both: AND-ed).

    ``{"k": v}`` -> ``{"k": v}``; several keys -> ``{"$and": [{"k1": v1}, ...]}``.

    Raises:
        NotImplementedError: ``filters`` is outside the DSL (names the field).
        ValueError: A filter value is None (Chroma cannot match it; names the field).
    """
    clauses: List[Dict[str, Any]] = []
    for field, value in (check_filters(filters) or {}).items():
        if value is None:
            raise ValueError(f"filter on {field!r}: Chroma cannot match a None metadata value")
        clauses.append({field: value})
    if where:
        clauses.append(where)
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}
