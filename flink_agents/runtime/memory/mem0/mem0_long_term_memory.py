"""``Mem0LongTermMemory``: long-term memory kept by Mem0 (the ``mem0`` extra),
at Flink Agents 0.3.1's path.

Chosen when the job sets all three ``LongTermMemoryOptions.Mem0`` options:
a chat model setup (Mem0 extracts facts with it), an embedding model setup
and a vector store that manages collections (Mem0 keeps memories in its
collection ``mem0_ltm``). They reach Mem0 through its factories as the
``flink_agents`` provider (``adapters``); one Mem0 ``Memory`` per operator
and set of resources, shared by every key.

Scoping, as 0.3.1 maps it onto Mem0's session ids: ``user_id`` is the
job's ``job-identifier`` (``flink-agents`` without one), ``agent_id`` the
key (``key-`` and a SHA-256 digest of its stable text: Mem0 refuses ids
with whitespace), ``run_id`` the memory set. Reads by id leave other keys'
items out.

Journaling: every operation is one journaled call (``ltm:<set>.<op>``), so
a replay returns the recorded result and calls neither Mem0 nor the model.
Limits, unlike the vector-store memory: ``add`` stores the facts Mem0's
model extracts from the text (ids of those, possibly none, possibly an
update of an older item), Mem0 draws random ids and reads the wall clock
for ``created_at``; an ``add`` that ran but whose result a crash lost runs
again (Mem0 skips a fact whose text it already holds for the key, by hash).
Mem0's history database is kept in memory (per process); Mem0's telemetry
is off unless ``MEM0_TELEMETRY`` is set in the environment.
"""

from __future__ import annotations

import hashlib
import os
import threading
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Tuple

from pydantic import ConfigDict, Field, PrivateAttr

from flink_agents.api.core_options import AgentConfigOptions
from flink_agents.api.memory.long_term_memory import BaseLongTermMemory, MemorySet, MemorySetItem
from flink_agents.api.resource import ResourceType
from flink_agents.api.vector_stores.vector_store import check_filters
from flink_agents._sdk import import_sdk
from flink_agents.runtime.features.long_term_memory.vector_store_memory import validate_set_name

__all__ = ["COLLECTION", "Mem0LongTermMemory", "mem0_memory_of"]

COLLECTION = "mem0_ltm"
_MEMORIES: Dict[Tuple[int, int, int], Tuple[Any, ...]] = {}  # (ids of the resources) -> (resources..., Memory)
_LOCK = threading.Lock()


def _import_mem0() -> None:
    """Import Mem0 with its telemetry (PostHog events, notices fetched from
    GitHub) off, unless ``MEM0_TELEMETRY`` is set in the environment.

    Raises:
        ImportError: ``mem0ai`` is not installed (names the extra).
    """
    chosen = "MEM0_TELEMETRY" in os.environ
    os.environ.setdefault("MEM0_TELEMETRY", "false")
    import_sdk("mem0", "mem0", "Mem0LongTermMemory")
    if not chosen:  # imported before with the default (on): turn it off where Mem0 reads it
        import mem0.memory.main as main
        import mem0.memory.telemetry as telemetry

        telemetry.MEM0_TELEMETRY = False
        main.MEM0_TELEMETRY = False


def _memory_for(chat: Any, embedder: Any, store: Any) -> Any:
    """The Mem0 ``Memory`` over these resources (created once)."""
    key = (id(chat), id(embedder), id(store))
    with _LOCK:
        found = _MEMORIES.get(key)
        if found is None:
            _import_mem0()
            from mem0.configs.base import MemoryConfig
            from mem0.embeddings.configs import EmbedderConfig
            from mem0.llms.configs import LlmConfig
            from mem0.memory.main import Memory
            from mem0.vector_stores.configs import VectorStoreConfig

            from flink_agents.runtime.memory.mem0.adapters import PROVIDER, VectorStoreProviderConfig, register_providers

            register_providers()
            # Built without validation: Mem0's config models accept only the
            # provider names they list, the factories take registered ones.
            config = MemoryConfig.model_construct(
                llm=LlmConfig.model_construct(provider=PROVIDER, config={"model": chat}),
                embedder=EmbedderConfig.model_construct(provider=PROVIDER, config={"model": embedder}),
                vector_store=VectorStoreConfig.model_construct(
                    provider=PROVIDER, config=VectorStoreProviderConfig(vector_store=store, collection_name=COLLECTION),
                ),
                history_db_path=":memory:",
            )
            found = _MEMORIES[key] = (chat, embedder, store, Memory(config))
        return found[3]


def mem0_memory_of(ctx: Any, chat_model: str, embedding_model: str, vector_store: str) -> "Mem0LongTermMemory":
    """The Mem0 memory of ``ctx``'s key over the named resources (raw, not
    the journaled views: the memory operations are journaled).

    Raises:
        KeyError: A resource is not declared (names it and the known ones).
        ImportError: ``mem0ai`` is not installed (names the extra).
    """
    resources = (
        ctx._resources(chat_model, ResourceType.CHAT_MODEL),
        ctx._resources(embedding_model, ResourceType.EMBEDDING_MODEL),
        ctx._resources(vector_store, ResourceType.VECTOR_STORE),
    )
    job = ctx.config.get(AgentConfigOptions.JOB_IDENTIFIER) or "flink-agents"
    key = "key-" + hashlib.sha256(ctx.run_identity.key_text.encode("utf-8")).hexdigest()[:32]
    memory = Mem0LongTermMemory(user_id="".join(job.split()), agent_id=key, names=(chat_model, embedding_model, vector_store))
    memory._mem0 = _memory_for(*resources)
    memory._ctx = ctx
    return memory


def _utc(value: Any) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


class Mem0LongTermMemory(BaseLongTermMemory):
    """One key's memory in Mem0, for one action invocation (module docstring).

    Attributes:
        user_id: Mem0 ``user_id`` (the job).
        agent_id: Mem0 ``agent_id`` (the key).
        names: The chat model, embedding model and vector store resource names.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    user_id: str
    agent_id: str
    names: Tuple[str, str, str] = Field(repr=False)
    _mem0: Any = PrivateAttr(default=None)
    _ctx: Any = PrivateAttr(default=None)

    def _scope(self, set_name: str) -> Dict[str, str]:
        return {"user_id": self.user_id, "agent_id": self.agent_id, "run_id": set_name}

    def _live(self, what: str) -> Any:
        ctx = self._ctx
        if not ctx.active:
            raise RuntimeError(
                f"long-term memory {what} after action {ctx.action_name!r} returned: a memory set "
                "is valid only during the action that got it; get it again from ctx.long_term_memory"
            )
        return ctx

    def _journaled(self, set_name: str, operation: str, args: Any, run: Callable[[], Any]) -> Any:
        ctx = self._live(f"{set_name!r}.{operation}")
        return ctx.journaled_call_sync(f"ltm:{set_name}.{operation}", (self.names, set_name, args), run)

    def _item(self, set_name: str, entry: Dict[str, Any]) -> MemorySetItem:
        return MemorySetItem(
            memory_set_name=set_name, id=str(entry["id"]), value=entry.get("memory", ""),
            created_at=_utc(entry.get("created_at")), updated_at=_utc(entry.get("updated_at")),
            additional_metadata=dict(entry.get("metadata") or {}),
        )

    def _mine(self, entry: Dict[str, Any] | None, set_name: str) -> bool:
        return entry is not None and all(entry.get(k) == v for k, v in self._scope(set_name).items())

    def get_memory_set(self, name: str) -> MemorySet:
        """The set ``name`` (``ValueError`` for an invalid name, as the vector-store memory)."""
        self._live(f"get_memory_set({name!r})")
        return MemorySet(name=validate_set_name(name), ltm=self)

    def delete_memory_set(self, name: str) -> bool:
        """Delete this key's items of ``name``; whether there were any."""
        set_name = validate_set_name(name)

        def run() -> bool:
            existed = bool(self._mem0.get_all(filters=self._scope(set_name), top_k=1).get("results"))
            if existed:
                self._mem0.delete_all(**self._scope(set_name))
            return existed

        return self._journaled(set_name, "delete_memory_set", None, run)

    def add(self, memory_set: MemorySet, memory_items: str | List[str],
            metadatas: Dict[str, Any] | List[Dict[str, Any]] | None = None) -> List[str]:
        """Give each item to Mem0 (which extracts facts with the chat model);
        the ids of the memories Mem0 added or changed.

        Raises:
            ValueError: ``metadatas`` is a list of another length than the items.
        """
        set_name = validate_set_name(memory_set.name)
        items = [memory_items] if isinstance(memory_items, str) else list(memory_items)
        if isinstance(metadatas, list) and len(metadatas) != len(items):
            raise ValueError(f"metadatas has {len(metadatas)} dicts for {len(items)} memory items; give one per item, or one dict for all")
        metas = metadatas if isinstance(metadatas, list) else [metadatas] * len(items)

        def run() -> List[str]:
            ids: List[str] = []
            for item, meta in zip(items, metas):
                result = self._mem0.add(item, metadata=dict(meta) if meta else None, **self._scope(set_name))
                ids.extend(str(entry["id"]) for entry in result.get("results", []) if "id" in entry)
            return ids

        return self._journaled(set_name, "add", (items, metas), run)

    def get(self, memory_set: MemorySet, ids: str | List[str] | None = None,
            filters: Dict[str, Any] | None = None, limit: int = 100) -> List[MemorySetItem]:
        """This key's items by id, or up to ``limit`` matching ``filters``."""
        set_name = validate_set_name(memory_set.name)
        wanted = None if ids is None else ([ids] if isinstance(ids, str) else list(ids))

        def run() -> List[MemorySetItem]:
            if wanted is not None:
                entries = [self._mem0.get(i) for i in wanted]
                return [self._item(set_name, e) for e in entries if self._mine(e, set_name)]
            found = self._mem0.get_all(filters={**(check_filters(filters) or {}), **self._scope(set_name)}, top_k=limit)
            return [self._item(set_name, e) for e in found.get("results", [])]

        return self._journaled(set_name, "get", (wanted, filters, limit), run)

    def search(self, memory_set: MemorySet, query: str, limit: int,
               filters: Dict[str, Any] | None = None, **kwargs: Any) -> List[MemorySetItem]:
        """Mem0's search within this key's set, closest first (``kwargs`` to Mem0)."""
        set_name = validate_set_name(memory_set.name)

        def run() -> List[MemorySetItem]:
            found = self._mem0.search(query, top_k=limit,
                                      filters={**(check_filters(filters) or {}), **self._scope(set_name)}, **kwargs)
            return [self._item(set_name, e) for e in found.get("results", [])]

        return self._journaled(set_name, "search", (query, limit, filters, kwargs), run)

    def delete(self, memory_set: MemorySet, ids: str | List[str] | None = None) -> None:
        """Delete this key's items by id (others' left alone), or all of the set."""
        set_name = validate_set_name(memory_set.name)
        wanted = None if ids is None else ([ids] if isinstance(ids, str) else list(ids))

        def run() -> None:
            if wanted is None:
                self._mem0.delete_all(**self._scope(set_name))
                return None
            for memory_id in wanted:
                if self._mine(self._mem0.get(memory_id), set_name):
                    self._mem0.delete(memory_id)
            return None

        self._journaled(set_name, "delete", wanted, run)

    def close(self) -> None:
        """Nothing to release (the Mem0 instance is the operator's)."""
