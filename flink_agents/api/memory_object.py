"""Agent memory: a tree of fields addressed by dotted paths."""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Dict, List

from flink_agents.api.memory_reference import MemoryRef

__all__ = ["MemoryObject", "MemoryType"]


class MemoryType(str, Enum):
    """Lifetime of a memory: sensory lives for one run, short-term per key."""

    SENSORY = "sensory"
    SHORT_TERM = "short_term"


class MemoryObject(ABC):
    """A node of memory. Paths are dotted (``"order.items.0"`` is three levels).

    Values must be JSON-like (None, bool, int, float, str, lists and dicts of
    them with str keys): they go into Flink keyed state and checkpoints.
    An action's writes are visible to later actions once it finishes and are
    discarded if it raises.
    """

    @abstractmethod
    def get(self, path: str | MemoryRef) -> Any:
        """The value at ``path``, a ``MemoryObject`` for a nested object, or
        None if nothing is there."""

    @abstractmethod
    def set(self, path: str, value: Any) -> MemoryRef:
        """Store ``value`` at ``path``, creating parent objects as needed.

        Raises:
            TypeError: ``value`` is not JSON-like (the message names the path).
            ValueError: A parent on ``path`` holds a value, not an object.
        """

    @abstractmethod
    def new_object(self, path: str, overwrite: bool = False) -> "MemoryObject":
        """Create a nested object at ``path`` and return it.

        Raises:
            ValueError: Something exists at ``path`` and ``overwrite`` is False.
        """

    @abstractmethod
    def is_exist(self, path: str) -> bool:
        """Whether a value or object exists at ``path``."""

    @abstractmethod
    def get_field_names(self) -> List[str]:
        """Names of this object's direct fields."""

    @abstractmethod
    def get_fields(self) -> Dict[str, Any]:
        """This object's direct fields: values, and ``MemoryObject`` for objects."""
