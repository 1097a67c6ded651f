"""Long-term memory: named sets of text items an agent keeps per key, across
records, restarts and failovers, and searches by meaning.

``ctx.long_term_memory`` is the memory of the key being processed: every
set it returns holds that key's items only. Items live in a vector store of
the agent (``LongTermMemoryOptions.VECTOR_STORE`` names it; the runtime's
``runtime.features.long_term_memory``), or in Mem0 when the three
``LongTermMemoryOptions.Mem0`` options are set (and the ``mem0`` extra is
installed), as in Flink Agents 0.3.1. Calls made from an action are
journaled: after a failover, a write already made is not made again and a
read returns what it returned the first time. Names and module path as
0.3.1's ``flink_agents.api.memory.long_term_memory``.

Example::

    facts = ctx.long_term_memory.get_memory_set("facts")
    facts.add("ships in recycled packaging", metadatas={"source": "review 17"})
    for item in facts.search("packaging", limit=3):
        print(item.value)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import Any, Dict, List

from pydantic import BaseModel, ConfigDict, Field

from flink_agents.api.configuration import ConfigOption

__all__ = ["BaseLongTermMemory", "LongTermMemoryOptions", "MemorySet", "MemorySetItem"]


class LongTermMemoryOptions:
    """Where ``ctx.long_term_memory`` keeps its items (agent configuration)."""

    VECTOR_STORE = ConfigOption(
        "long-term-memory.vector-store",
        str,
        None,
        description="Name of the agent's VECTOR_STORE resource that holds long-term memory "
        "(one collection per memory set, items scoped per key).",
    )

    class Mem0:
        """Mem0-backed long-term memory, as Flink Agents 0.3.1 (all three
        must be set; needs ``pip install 'flink-agents-runtime[mem0]'``)."""

        CHAT_MODEL_SETUP = ConfigOption(
            "long-term-memory.mem0.chat-model-setup", str, None,
            description="Chat model setup Mem0 uses to extract facts.",
        )
        EMBEDDING_MODEL_SETUP = ConfigOption(
            "long-term-memory.mem0.embedding-model-setup", str, None,
            description="Embedding model setup Mem0 uses.",
        )
        VECTOR_STORE = ConfigOption(
            "long-term-memory.mem0.vector-store", str, None,
            description="Vector store resource Mem0 keeps memories in.",
        )


class MemorySetItem(BaseModel):
    """One item of a memory set.

    Attributes:
        memory_set_name: The set it belongs to.
        id: Its id (a replayed write returns the journaled ids; the
            vector-store memory also derives them from the record and the
            call, so a write run again after a failover overwrites its
            own items instead of adding copies).
        value: Its text.
        created_at: When it was first written (UTC), if the backend knows.
        updated_at: When it was last written (UTC), if the backend knows.
        additional_metadata: The metadata given with it.
    """

    memory_set_name: str
    id: str
    value: str
    created_at: datetime | None = None
    updated_at: datetime | None = None
    additional_metadata: Dict[str, Any] | None = None


class MemorySet(BaseModel):
    """A named set of items of one key; its methods go to the memory that
    returned it (``BaseLongTermMemory.get_memory_set``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    ltm: Any = Field(default=None, exclude=True, repr=False)

    def _memory(self) -> "BaseLongTermMemory":
        if self.ltm is None:
            raise RuntimeError(f"memory set {self.name!r} is not bound to a long-term memory; use ctx.long_term_memory.get_memory_set")
        return self.ltm

    def add(self, items: str | List[str], metadatas: Dict[str, Any] | List[Dict[str, Any]] | None = None) -> List[str]:
        """Add ``items`` (with one metadata dict for all, or one per item); their ids."""
        return self._memory().add(memory_set=self, memory_items=items, metadatas=metadatas)

    def get(
        self, ids: str | List[str] | None = None, filters: Dict[str, Any] | None = None, limit: int = 100
    ) -> List[MemorySetItem]:
        """Items by id, or (without ``ids``) up to ``limit`` matching ``filters``."""
        return self._memory().get(memory_set=self, ids=ids, filters=filters, limit=limit)

    def search(self, query: str, limit: int, filters: Dict[str, Any] | None = None, **kwargs: Any) -> List[MemorySetItem]:
        """The ``limit`` items closest in meaning to ``query``, closest first."""
        return self._memory().search(memory_set=self, query=query, limit=limit, filters=filters, **kwargs)

    def delete(self, ids: str | List[str] | None = None) -> None:
        """Delete items by id; without ``ids``, all items of the set (for this key)."""
        self._memory().delete(memory_set=self, ids=ids)


class BaseLongTermMemory(ABC, BaseModel):
    """A long-term memory backend (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @abstractmethod
    def get_memory_set(self, name: str) -> MemorySet:
        """The set ``name``, created if new.

        Raises:
            ValueError: ``name`` cannot name a set: the vector-store memory
                takes 1 to 59 characters of ASCII letters, digits, ``.``, ``_``
                and ``-``, starting and ending with a letter or digit,
                without ``..``.
            RuntimeError: The action that got this memory has returned.
        """

    @abstractmethod
    def delete_memory_set(self, name: str) -> bool:
        """Delete the set ``name`` (this key's items); whether it held any."""

    @abstractmethod
    def add(
        self,
        memory_set: MemorySet,
        memory_items: str | List[str],
        metadatas: Dict[str, Any] | List[Dict[str, Any]] | None = None,
    ) -> List[str]:
        """Add items to ``memory_set``; their ids.

        Raises:
            ValueError: ``metadatas`` is a list of another length than the items.
        """

    @abstractmethod
    def get(
        self,
        memory_set: MemorySet,
        ids: str | List[str] | None = None,
        filters: Dict[str, Any] | None = None,
        limit: int = 100,
    ) -> List[MemorySetItem]:
        """Items by id, or up to ``limit`` matching ``filters``."""

    @abstractmethod
    def delete(self, memory_set: MemorySet, ids: str | List[str] | None = None) -> None:
        """Delete items by id, or all of the set."""

    @abstractmethod
    def search(
        self,
        memory_set: MemorySet,
        query: str,
        limit: int,
        filters: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> List[MemorySetItem]:
        """The ``limit`` items closest in meaning to ``query``."""

    @abstractmethod
    def close(self) -> None:
        """Release the backend (at operator close)."""
