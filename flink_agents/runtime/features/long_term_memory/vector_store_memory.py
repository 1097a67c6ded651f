"""``VectorStoreLongTermMemory``: long-term memory kept in a vector store of the agent.

Layout in the store:

- a memory set ``<set>`` is the collection ``ltm_<set>`` when the store can
  manage collections (``CollectionManageableVectorStore``; created on first
  use), else the store's own collection; set names are therefore 1 to 59
  characters of ``[A-Za-z0-9._-]``, starting and ending with a letter or
  digit, without ``..`` (valid Chroma collection names once prefixed);
- each item is a ``Document`` (content: the item's text) whose metadata holds
  the caller's metadata plus ``ltm_scope`` (whose item it is: the key as
  stable text, ``runtime.durability.ids.key_text``, prefixed with the job's
  ``job-identifier`` and ``|`` when one is configured), ``ltm_set`` (the set
  name) and ``ltm_created_at_ms`` / ``ltm_updated_at_ms`` (Unix ms);
  metadata keys starting ``ltm_`` are reserved. Every read, search and
  delete is restricted to the scope, so a key never sees another key's
  items; jobs configured with different ``job-identifier`` values do not
  see each other's items, jobs without one share them per key.

Every operation is one journaled call (function id ``ltm:<set>.<operation>``;
arguments digested): a replay after a failover returns the recorded result
and touches the store not at all. Item ids are UUIDv5s of the record (journal
id, key, sequence), the calling task's step and its ordinal among this
task's ``add`` calls, the item's index and a digest of its text
(``runtime.durability.ids.memory_item_id``), so an ``add`` that ran but whose
result a crash lost runs again with the same ids and overwrites its own
items instead of adding copies (and keeps their ``created_at``).
Timestamps are the runtime clock's (``Run.clock``), read when the call runs,
never on replay.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List

from pydantic import ConfigDict, Field, PrivateAttr

from flink_agents.api.memory.long_term_memory import BaseLongTermMemory, MemorySet, MemorySetItem
from flink_agents.api.vector_stores.vector_store import (
    BaseVectorStore,
    CollectionManageableVectorStore,
    Document,
    VectorStoreQuery,
    check_filters,
)
from flink_agents.runtime.durability.ids import memory_item_id

__all__ = ["VectorStoreLongTermMemory", "collection_of", "scope_of", "validate_set_name"]

RESERVED_PREFIX = "ltm_"
SCOPE, SET, CREATED, UPDATED = "ltm_scope", "ltm_set", "ltm_created_at_ms", "ltm_updated_at_ms"
_SET_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,57}[A-Za-z0-9])?$")
_ALL = None  # ``limit`` for "every matching document" (``BaseVectorStore.get``)


def validate_set_name(name: Any) -> str:
    """``name`` if it can name a memory set (module docstring).

    Raises:
        ValueError: It cannot; the message gives the rule.
    """
    if not isinstance(name, str) or not _SET_NAME.match(name) or ".." in name:
        raise ValueError(
            f"memory set name {name!r} is invalid: use 1 to 59 characters of ASCII letters, digits, '.', '_' and '-', "
            "starting and ending with a letter or digit, without '..' (e.g. 'product_facts')"
        )
    return name


def collection_of(name: str) -> str:
    """The collection that holds memory set ``name`` (in a store that manages collections)."""
    return f"{RESERVED_PREFIX}{name}"


def scope_of(key_text: str, job_identifier: str | None) -> str:
    """The ``ltm_scope`` of a key's items (module docstring)."""
    return key_text if not job_identifier else f"{job_identifier}|{key_text}"


def _utc(ms: Any) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(int(ms) / 1000, timezone.utc)


def _check_metadata(where: str, metadata: Any) -> Dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise TypeError(f"{where} must be a dict of str -> str/int/float/bool, got {type(metadata).__name__}")
    for field, value in metadata.items():
        if not isinstance(field, str) or field.startswith(RESERVED_PREFIX):
            raise ValueError(f"{where}: key {field!r} is not allowed (keys are str, not starting {RESERVED_PREFIX!r})")
        if not isinstance(value, (str, int, float, bool)):
            raise TypeError(f"{where}[{field!r}] is a {type(value).__name__}; metadata values are str, int, float or bool")
    return dict(metadata)


def _as_ids(ids: str | List[str]) -> List[str]:
    listed = [ids] if isinstance(ids, str) else list(ids)
    for index, item_id in enumerate(listed):
        if not isinstance(item_id, str):
            raise TypeError(f"ids[{index}] is a {type(item_id).__name__}, not a str")
    return listed


class VectorStoreLongTermMemory(BaseLongTermMemory):
    """The long-term memory of one key, in one vector store, for one action
    invocation (see the module docstring). Built by
    ``runtime.features.long_term_memory.long_term_memory_of``.

    Attributes:
        store_name: The ``VECTOR_STORE`` resource's name (in function ids' digests).
        store: The store itself (not the journaled view: calls are journaled here).
        scope: The ``ltm_scope`` of this key's items.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store_name: str
    store: BaseVectorStore = Field(exclude=True, repr=False)
    scope: str
    _ctx: Any = PrivateAttr(default=None)

    def bind(self, ctx: Any) -> "VectorStoreLongTermMemory":
        """Bind to the action invocation ``ctx`` (journal, clock, ids); self."""
        self._ctx = ctx
        return self

    # -- the invocation --------------------------------------------------

    def _live(self, what: str) -> Any:
        ctx = self._ctx
        if ctx is None:
            raise RuntimeError(f"long-term memory {what}: this memory is bound to no action; use ctx.long_term_memory")
        if not ctx.active:
            raise RuntimeError(
                f"long-term memory {what} after action {ctx.action_name!r} returned: a memory set is valid only "
                "during the action that got it; get it again from ctx.long_term_memory in the action that uses it"
            )
        return ctx

    def _journaled(self, set_name: str, operation: str, args: Any, run: Callable[[], Any]) -> Any:
        ctx = self._live(f"{set_name!r}.{operation}")
        return ctx.journaled_call_sync(f"ltm:{set_name}.{operation}", (self.store_name, set_name, args), run)

    def _set(self, memory_set: MemorySet) -> str:
        if not isinstance(memory_set, MemorySet):
            raise TypeError(f"memory_set must be a MemorySet, got {type(memory_set).__name__}")
        return validate_set_name(memory_set.name)

    # -- the store -------------------------------------------------------

    def _collection(self, set_name: str) -> str | None:
        if isinstance(self.store, CollectionManageableVectorStore):
            collection = collection_of(set_name)
            self.store.create_collection_if_not_exists(collection)
            return collection
        return None

    def _where(self, set_name: str, filters: Dict[str, Any] | None = None) -> Dict[str, Any]:
        user = check_filters(filters) or {}
        for field in user:
            if field.startswith(RESERVED_PREFIX):
                raise ValueError(f"filter key {field!r} is reserved (keys starting {RESERVED_PREFIX!r} are the memory's own)")
        return {**user, SCOPE: self.scope, SET: set_name}

    def _mine(self, documents: List[Document], set_name: str) -> List[Document]:
        return [d for d in documents if d.metadata.get(SCOPE) == self.scope and d.metadata.get(SET) == set_name]

    @staticmethod
    def _item(set_name: str, document: Document) -> MemorySetItem:
        metadata = document.metadata or {}
        return MemorySetItem(
            memory_set_name=set_name,
            id=str(document.id),
            value=document.content,
            created_at=_utc(metadata.get(CREATED)),
            updated_at=_utc(metadata.get(UPDATED)),
            additional_metadata={k: v for k, v in metadata.items() if not k.startswith(RESERVED_PREFIX)},
        )

    # -- BaseLongTermMemory ------------------------------------------------

    def get_memory_set(self, name: str) -> MemorySet:
        """The set ``name`` of this key (nothing is written until an ``add``).

        Raises:
            ValueError: ``name`` is not a valid set name (``validate_set_name``).
            RuntimeError: The action that got this memory has returned.
        """
        self._live(f"get_memory_set({name!r})")
        return MemorySet(name=validate_set_name(name), ltm=self)

    def delete_memory_set(self, name: str) -> bool:
        """Delete this key's items of set ``name``; whether there were any.
        Other keys' items (and the collection) stay."""
        set_name = validate_set_name(name)

        def run() -> bool:
            collection = self._collection(set_name)
            found = self.store.get(collection_name=collection, filters=self._where(set_name), limit=1)
            if found:
                self.store.delete(collection_name=collection, filters=self._where(set_name))
            return bool(found)

        return self._journaled(set_name, "delete_memory_set", None, run)

    def add(
        self,
        memory_set: MemorySet,
        memory_items: str | List[str],
        metadatas: Dict[str, Any] | List[Dict[str, Any]] | None = None,
    ) -> List[str]:
        """Add ``memory_items`` to this key's ``memory_set``; their ids, in order.

        ``metadatas``: one dict for every item, or a list with one per item;
        values are str, int, float or bool.

        Raises:
            ValueError: ``metadatas`` is a list of another length than the
                items, or a metadata key starts with ``ltm_``.
            TypeError: An item is not a str, or a metadata value not a scalar.
        """
        set_name = self._set(memory_set)
        items = [memory_items] if isinstance(memory_items, str) else list(memory_items)
        for index, item in enumerate(items):
            if not isinstance(item, str):
                raise TypeError(f"memory_items[{index}] is a {type(item).__name__}, not a str")
        if isinstance(metadatas, list):
            if len(metadatas) != len(items):
                raise ValueError(f"metadatas has {len(metadatas)} dicts for {len(items)} memory items; give one per item, or one dict for all")
            metas = [_check_metadata(f"metadatas[{i}]", m) for i, m in enumerate(metadatas)]
        else:
            metas = [_check_metadata("metadatas", metadatas)] * len(items)
        ctx = self._live(f"{set_name!r}.add")
        if not items:
            return []
        step, ordinal = ctx._next_position("ltm_add")
        ids = [memory_item_id(ctx.run_identity, step, ordinal, index, text) for index, text in enumerate(items)]

        def run() -> List[str]:
            return self._write(set_name, ids, items, metas, ctx.runtime_run.clock.now_ms())

        return self._journaled(set_name, "add", (items, metas), run)

    def _write(self, set_name: str, ids: List[str], items: List[str], metas: List[Dict[str, Any]], now_ms: int) -> List[str]:
        collection = self._collection(set_name)
        created = {d.id: d.metadata.get(CREATED) for d in self._mine(self.store.get(ids=ids, collection_name=collection), set_name)}
        fresh: List[Document] = []
        again: List[Document] = []
        for item_id, text, meta in zip(ids, items, metas):
            metadata = {**meta, SCOPE: self.scope, SET: set_name, CREATED: created.get(item_id) or now_ms, UPDATED: now_ms}
            (again if item_id in created else fresh).append(Document(id=item_id, content=text, metadata=metadata))
        if again:  # written before a crash lost the journal entry: overwrite, do not duplicate
            self.store.update(again, collection_name=collection)
        if fresh:
            self.store.add(fresh, collection_name=collection)
        return ids

    def get(
        self,
        memory_set: MemorySet,
        ids: str | List[str] | None = None,
        filters: Dict[str, Any] | None = None,
        limit: int = 100,
    ) -> List[MemorySetItem]:
        """This key's items by id (in the order asked; unknown ids and other
        keys' ids left out), or, without ``ids``, up to ``limit`` of them
        matching the equality ``filters``, oldest first.

        Raises:
            ValueError: ``limit`` < 1, or a filter key starts with ``ltm_``.
            NotImplementedError: ``filters`` outside the equality DSL.
        """
        set_name = self._set(memory_set)
        if ids is not None:
            wanted = _as_ids(ids)

            def by_id() -> List[MemorySetItem]:
                found = {d.id: d for d in self._mine(self.store.get(ids=wanted, collection_name=self._collection(set_name)), set_name)}
                return [self._item(set_name, found[i]) for i in wanted if i in found]

            return self._journaled(set_name, "get", (wanted, None, None), by_id)
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        where = self._where(set_name, filters)

        def listed() -> List[MemorySetItem]:
            documents = self._mine(self.store.get(collection_name=self._collection(set_name), filters=where, limit=limit), set_name)
            documents.sort(key=lambda d: (d.metadata.get(CREATED) or 0, str(d.id)))
            return [self._item(set_name, d) for d in documents]

        return self._journaled(set_name, "get", (None, filters, limit), listed)

    def search(
        self,
        memory_set: MemorySet,
        query: str,
        limit: int,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> List[MemorySetItem]:
        """The ``limit`` items of this key closest to ``query`` (by the
        store's embedding model), closest first. ``kwargs`` go to the store
        as the query's ``extra_args``.

        Raises:
            ValueError: ``query`` is empty, ``limit`` < 1, or a filter key
                starts with ``ltm_``.
            TypeError: The store has no embedding model.
        """
        set_name = self._set(memory_set)
        if not isinstance(query, str) or not query:
            raise ValueError(f"query must be a non-empty str, got {query!r}")
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        where = self._where(set_name, filters)

        def run() -> List[MemorySetItem]:
            found = self.store.query(VectorStoreQuery(
                query_text=query, limit=limit, collection_name=self._collection(set_name), filters=where, extra_args=kwargs,
            ))
            return [self._item(set_name, d) for d in self._mine(found.documents, set_name)]

        return self._journaled(set_name, "search", (query, limit, filters, kwargs), run)

    def delete(self, memory_set: MemorySet, ids: str | List[str] | None = None) -> None:
        """Delete this key's items by id (other keys' ids are left alone), or
        without ``ids`` all of this key's items of the set."""
        set_name = self._set(memory_set)
        wanted = None if ids is None else _as_ids(ids)

        def run() -> None:
            collection = self._collection(set_name)
            if wanted is None:
                self.store.delete(collection_name=collection, filters=self._where(set_name))
                return None
            mine = [d.id for d in self._mine(self.store.get(ids=wanted, collection_name=collection), set_name)]
            if mine:
                self.store.delete(ids=mine, collection_name=collection)
            return None

        self._journaled(set_name, "delete", wanted, run)

    def close(self) -> None:
        """Nothing to release: the store belongs to the agent's resources."""


