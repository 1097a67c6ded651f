"""``JournaledVectorStore``: a vector store as one action invocation sees it
(``ctx.get_resource(name, ResourceType.VECTOR_STORE)``).

Every call (``query``, ``add``, ``update``, ``get``, ``delete``,
``create_collection_if_not_exists``, ``delete_collection``, and their async
variants ``aquery``, ``aadd``, ...) is ONE journaled call with function id
``vector_store:<name>.<method>`` and the call's arguments as its digest,
positioned like the built-in model calls. A replay after a failover or a
retry returns the recorded result (documents, ids) or re-raises the recorded
error without touching the store; on replay a different call at that
position is a ``NondeterminismError`` naming both.

Writes re-executed after a crash. A write that reached the store but whose
journal entry was not committed runs again on the replay. ``add`` makes
that harmless: documents without an id get ids derived from the run (journal
id, key, record sequence), the step, the ordinal of the add within the task
and the document's index, the same on every execution, and the stores
treat ``add`` as an upsert (Chroma does), so the second execution replaces
the first one's documents instead of duplicating them. ``update`` and
``delete`` are idempotent by nature.

The store's own calls are blocking; the async variants run them on a
worker thread (``call_threads.run_in_thread``) so an async action's event loop keeps
running. In an ``async def`` action use the ``a``-methods.

Every other attribute is the store's own (``collection``,
``embedding_model``, ...); ``store`` is the store itself (not journaled).
Valid only while its action runs, like the context it came from.
"""

from __future__ import annotations

import functools
from typing import Any, Awaitable, Callable, Dict, List

from flink_agents.api.vector_stores.vector_store import (
    BaseVectorStore,
    CollectionManageableVectorStore,
    Document,
    VectorStoreQuery,
    VectorStoreQueryResult,
)
from flink_agents.runtime.durability.call_threads import run_in_thread

__all__ = ["JournaledVectorStore"]

CallSync = Callable[[str, Any, Callable[[], Any]], Any]
CallAsync = Callable[[str, Any, Callable[[], Awaitable[Any]]], Awaitable[Any]]


class JournaledVectorStore:
    """See the module docstring.

    Args:
        store: The vector store (shared by every key of the operator).
        name: Its resource name (in function ids and errors).
        call_sync: ``(function_id, digest_args, run) -> result``: the
            journal's synchronous call at the action's next position
            (``ActionContext.journaled_call_sync``).
        call_async: The same for an awaitable ``run``.
        new_ids: ``(count) -> ids`` for the documents of an ``add`` that have
            none; None: derived from the context that ``call_sync`` is bound
            to (its run identity and next ``vector_store_ids`` position).
    """

    def __init__(
        self,
        store: BaseVectorStore,
        name: str,
        call_sync: CallSync,
        call_async: CallAsync,
        new_ids: Callable[[int], List[str]] | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self._call_sync = call_sync
        self._call_async = call_async
        self._new_ids = new_ids

    # -- helpers --------------------------------------------------------------

    def _function_id(self, method: str) -> str:
        return f"vector_store:{self.name}.{method}"

    def _sync(self, method: str, digest: Any, run: Callable[[], Any]) -> Any:
        return self._call_sync(self._function_id(method), digest, run)

    async def _async(self, method: str, digest: Any, run: Callable[[], Any]) -> Any:
        return await self._call_async(self._function_id(method), digest, lambda: run_in_thread(run))

    def _manageable(self, method: str) -> CollectionManageableVectorStore:
        if not isinstance(self.store, CollectionManageableVectorStore):
            raise TypeError(
                f"vector store {self.name!r} ({type(self.store).__name__}) cannot manage collections: "
                f"it has no {method}"
            )
        return self.store

    def _with_ids(self, documents: Document | List[Document]) -> List[Document]:
        """Copies of ``documents``, those without an id given a deterministic one."""
        docs = list(documents) if isinstance(documents, list) else [documents]
        for index, document in enumerate(docs):
            if not isinstance(document, Document):
                raise TypeError(
                    f"vector store {self.name!r}: documents[{index}] is a {type(document).__name__}, not a Document"
                )
        missing = [index for index, document in enumerate(docs) if document.id is None]
        if not missing:
            return docs
        ids = self._ids_for(len(missing))
        docs = list(docs)
        for index, new_id in zip(missing, ids):
            docs[index] = docs[index].model_copy(update={"id": new_id})
        return docs

    def _ids_for(self, count: int) -> List[str]:
        if self._new_ids is not None:
            return list(self._new_ids(count))
        raise RuntimeError(
            f"vector store {self.name!r}: this view derives no document ids (built outside an action "
            "context); give the documents ids"
        )

    # -- queries ----------------------------------------------------------------

    def query(self, query: VectorStoreQuery) -> VectorStoreQueryResult:
        """Journaled ``store.query(query)``: the documents closest to
        ``query.query_text``, closest first (``Document.score`` as the store
        defines it).

        Raises:
            NondeterminismError: On replay, the journal recorded another call here.
            Whatever the store raises (on replay: the journaled error).
        """
        return self._sync("query", [query], lambda: self.store.query(query))

    async def aquery(self, query: VectorStoreQuery) -> VectorStoreQueryResult:
        """Async ``query`` (the store's call on a worker thread)."""
        return await self._async("query", [query], lambda: self.store.query(query))

    def get(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        limit: int | None = 100,
        **kwargs: Any,
    ) -> List[Document]:
        """Journaled ``store.get(...)``; see ``BaseVectorStore.get``."""
        digest = [ids, collection_name, filters, limit, kwargs]
        return self._sync("get", digest, lambda: self.store.get(ids, collection_name, filters, limit, **kwargs))

    async def aget(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        limit: int | None = 100,
        **kwargs: Any,
    ) -> List[Document]:
        """Async ``get``."""
        digest = [ids, collection_name, filters, limit, kwargs]
        return await self._async("get", digest, lambda: self.store.get(ids, collection_name, filters, limit, **kwargs))

    # -- writes -----------------------------------------------------------------

    def add(self, documents: Document | List[Document], collection_name: str | None = None, **kwargs: Any) -> List[str]:
        """Journaled ``store.add``: documents without an id get deterministic
        ids first (module docstring); the caller's objects are not changed.

        Returns:
            The documents' ids, in order.

        Raises:
            TypeError: An item is not a ``Document`` (names its index).
        """
        docs = self._with_ids(documents)
        return self._sync("add", [docs, collection_name, kwargs], lambda: self.store.add(docs, collection_name, **kwargs))

    async def aadd(self, documents: Document | List[Document], collection_name: str | None = None, **kwargs: Any) -> List[str]:
        """Async ``add``."""
        docs = self._with_ids(documents)
        return await self._async(
            "add", [docs, collection_name, kwargs], lambda: self.store.add(docs, collection_name, **kwargs)
        )

    def update(self, documents: Document | List[Document], collection_name: str | None = None, **kwargs: Any) -> None:
        """Journaled ``store.update`` (documents matched by id).

        Raises:
            ValueError: A document has no id (names its index).
        """
        docs = list(documents) if isinstance(documents, list) else [documents]
        self._sync("update", [docs, collection_name, kwargs], lambda: self.store.update(docs, collection_name, **kwargs))

    async def aupdate(self, documents: Document | List[Document], collection_name: str | None = None, **kwargs: Any) -> None:
        """Async ``update``."""
        docs = list(documents) if isinstance(documents, list) else [documents]
        await self._async(
            "update", [docs, collection_name, kwargs], lambda: self.store.update(docs, collection_name, **kwargs)
        )

    def delete(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Journaled ``store.delete``; see ``BaseVectorStore.delete``."""
        digest = [ids, collection_name, filters, kwargs]
        self._sync("delete", digest, lambda: self.store.delete(ids, collection_name, filters, **kwargs))

    async def adelete(
        self,
        ids: str | List[str] | None = None,
        collection_name: str | None = None,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Async ``delete``."""
        digest = [ids, collection_name, filters, kwargs]
        await self._async("delete", digest, lambda: self.store.delete(ids, collection_name, filters, **kwargs))

    # -- collections --------------------------------------------------------------

    def create_collection_if_not_exists(self, name: str, **kwargs: Any) -> None:
        """Journaled ``store.create_collection_if_not_exists``.

        Raises:
            TypeError: The store cannot manage collections (names it).
        """
        store = self._manageable("create_collection_if_not_exists")
        self._sync("create_collection_if_not_exists", [name, kwargs],
                   functools.partial(store.create_collection_if_not_exists, name, **kwargs))

    async def acreate_collection_if_not_exists(self, name: str, **kwargs: Any) -> None:
        """Async ``create_collection_if_not_exists``."""
        store = self._manageable("create_collection_if_not_exists")
        await self._async("create_collection_if_not_exists", [name, kwargs],
                          functools.partial(store.create_collection_if_not_exists, name, **kwargs))

    def delete_collection(self, name: str) -> None:
        """Journaled ``store.delete_collection``.

        Raises:
            TypeError: The store cannot manage collections (names it).
        """
        store = self._manageable("delete_collection")
        self._sync("delete_collection", [name], functools.partial(store.delete_collection, name))

    async def adelete_collection(self, name: str) -> None:
        """Async ``delete_collection``."""
        store = self._manageable("delete_collection")
        await self._async("delete_collection", [name], functools.partial(store.delete_collection, name))

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.store, attribute)

    def __repr__(self) -> str:
        return f"JournaledVectorStore({self.name!r}, {self.store!r})"
