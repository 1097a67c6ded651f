"""Long-term memory that records what an action did with it, for the
long-term memory events (``runtime.execution.memory_events``; Flink Agents
HEAD's ``memory.generate-event.long-term-*``).

``ObservedLongTermMemory`` wraps the action's memory: every call goes to
the wrapped backend unchanged (journaled there), and its outcome is folded
into the action's ``runtime.execution.memory_events.LongTermObservations``
(``ctx.ltm_observations``), which the action loop reads when the action
finished. ``long_term_memory_of`` wraps the memory when that is set. A memory set it returns is bound to the wrapper, so set methods
are observed too. Only calls that returned are recorded. An ``add`` on the
vector-store memory records the items as given (it stores them verbatim);
on another backend (Mem0, which extracts facts) the texts it stored, read
back with one more journaled ``get``.
"""

from __future__ import annotations

from typing import Any, Dict, List

from pydantic import ConfigDict

from flink_agents.api.memory.long_term_memory import BaseLongTermMemory, MemorySet, MemorySetItem
from flink_agents.runtime.features.long_term_memory.vector_store_memory import VectorStoreLongTermMemory

__all__ = ["ObservedLongTermMemory"]


def _ids(ids: str | List[str] | None) -> List[str]:
    return [ids] if isinstance(ids, str) else list(ids or [])


class ObservedLongTermMemory(BaseLongTermMemory):
    """``inner`` with its calls recorded into ``seen`` (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: Any
    seen: Any

    def get_memory_set(self, name: str) -> MemorySet:
        found = self.inner.get_memory_set(name)
        return MemorySet(name=found.name, ltm=self)

    def _inner_set(self, memory_set: MemorySet) -> MemorySet:
        return self.inner.get_memory_set(memory_set.name)

    def delete_memory_set(self, name: str) -> bool:
        held = self.inner.delete_memory_set(name)
        self.seen.cleared(name)
        return held

    def add(self, memory_set: MemorySet, memory_items: str | List[str],
            metadatas: Dict[str, Any] | List[Dict[str, Any]] | None = None) -> List[str]:
        inner_set = self._inner_set(memory_set)
        ids = self.inner.add(inner_set, memory_items, metadatas)
        folded = self.seen.updates.setdefault(memory_set.name, {})
        if isinstance(self.inner, VectorStoreLongTermMemory):  # stores each item as given, one id per item
            items = [memory_items] if isinstance(memory_items, str) else list(memory_items)
            folded.update(zip(ids, items))
        elif ids:
            # A backend that rewrites what it stores (Mem0 extracts facts):
            # the texts it holds now, read back by a (journaled) get.
            folded.update((item.id, item.value) for item in self.inner.get(inner_set, ids=list(ids)))
        return ids

    def get(self, memory_set: MemorySet, ids: str | List[str] | None = None,
            filters: Dict[str, Any] | None = None, limit: int = 100) -> List[MemorySetItem]:
        found = self.inner.get(self._inner_set(memory_set), ids, filters, limit)
        folded = self.seen.gets.setdefault(memory_set.name, {})
        for item in found:
            folded[item.id] = item.value
        return found

    def delete(self, memory_set: MemorySet, ids: str | List[str] | None = None) -> None:
        self.inner.delete(self._inner_set(memory_set), ids)
        if ids is None:
            self.seen.cleared(memory_set.name)
            return
        folded = self.seen.updates.setdefault(memory_set.name, {})
        for item_id in _ids(ids):
            folded[item_id] = None

    def search(self, memory_set: MemorySet, query: str, limit: int,
               filters: Dict[str, Any] | None = None, **kwargs: Any) -> List[MemorySetItem]:
        found = self.inner.search(self._inner_set(memory_set), query, limit, filters, **kwargs)
        self.seen.searches.setdefault(memory_set.name, {})[query] = [
            {"id": item.id, "value": item.value, "score": None} for item in found
        ]
        return found

    def close(self) -> None:
        self.inner.close()
