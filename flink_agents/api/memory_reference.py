"""References to values in memory, returned by ``MemoryObject.set``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from flink_agents.api.memory_object import MemoryType

if TYPE_CHECKING:
    from flink_agents.api.runner_context import RunnerContext

__all__ = ["MemoryRef"]


class MemoryRef(BaseModel, frozen=True):
    """Points at a value by its dotted path; pass it to ``MemoryObject.get``
    (or put it in an event) instead of copying a large value around.

    ``memory_type`` says which memory the path is in (short-term by default),
    as in Flink Agents 0.3.1.
    """

    memory_type: MemoryType = MemoryType.SHORT_TERM
    path: str

    @staticmethod
    def create(memory_type: MemoryType, path: str) -> "MemoryRef":
        """A reference to ``path`` (dotted, absolute) in ``memory_type``."""
        return MemoryRef(memory_type=memory_type, path=path)

    def resolve(self, ctx: "RunnerContext") -> Any:
        """The value the reference points at, read from ``ctx``'s memory.

        Raises:
            ValueError: ``memory_type`` is not sensory or short-term.
        """
        if self.memory_type == MemoryType.SENSORY:
            return ctx.sensory_memory.get(self)
        if self.memory_type == MemoryType.SHORT_TERM:
            return ctx.short_term_memory.get(self)
        raise ValueError(f"MemoryRef.memory_type {self.memory_type!r} is not a memory this runtime resolves")
