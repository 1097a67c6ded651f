"""Agent memory: a tree of fields addressed by dotted paths."""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import TYPE_CHECKING, Any, Dict, List

if TYPE_CHECKING:  # memory_reference imports MemoryType from here
    from flink_agents.api.memory_reference import MemoryRef

__all__ = ["MemoryObject", "MemoryType", "validate_memory_value"]


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
    def get(self, path_or_ref: str | MemoryRef) -> Any:
        """The value at ``path_or_ref`` (a dotted path, or a ``MemoryRef``
        from ``set``), a ``MemoryObject`` for a nested object, or None if
        nothing is there. The parameter name is Flink Agents 0.3.1's."""

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


# The values Flink Agents 0.3.1 accepts in memory (exact types: a bool
# subclass or a str enum is not one of them).
_PORTABLE_SCALARS = (bool, int, float, str)


def validate_memory_value(path: str, value: Any) -> None:
    """Check that ``value`` is a portable memory value, as Flink Agents
    0.3.1's ``validate_memory_value`` does: recursively ``None``, ``bool``,
    ``int``, ``float``, ``str``, ``list``, or ``dict`` with ``str`` keys.

    A value that passes is stored by ``MemoryObject.set`` of every runner
    (this project's and 0.3.1's). This project's ``set`` accepts more
    (tuples, sets, enums, datetimes, UUIDs, pydantic models, dataclasses;
    see ``runtime.durability.codec``), which 0.3.1 refuses; call this to
    keep values portable.

    Args:
        path: The memory path the value is meant for (``"order.items"``),
            named in the error.
        value: The value to check.

    Raises:
        TypeError: A part of ``value`` is not portable; the message names
            where (``memory path 'order.items'[2]``), its type, and a
            conversion. A ``MemoryObject`` is refused with a pointer to
            ``new_object``.
    """
    _check_portable(value, f"memory path {path!r}")


def _check_portable(value: Any, where: str) -> None:
    if value is None or type(value) in _PORTABLE_SCALARS:
        return
    if isinstance(value, MemoryObject):
        raise TypeError(
            f"value at {where} is a MemoryObject; create a nested object with "
            "new_object(path) instead of storing one with set()"
        )
    if type(value) is list:
        for index, item in enumerate(value):
            _check_portable(item, f"{where}[{index}]")
        return
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(
                    f"value at {where} has the key {key!r} of type {type(key).__name__}; memory "
                    "dict keys must be str (convert with {str(k): v for k, v in value.items()})"
                )
            _check_portable(item, f"{where}[{key!r}]")
        return
    raise TypeError(
        f"value at {where} has type {type(value).__name__}, which is not a portable memory "
        "value (None, bool, int, float, str, list, or dict with str keys); convert it first, "
        "e.g. str(value) for a UUID, value.model_dump(mode='json') for a pydantic model, "
        "list(value) for a tuple or set"
    )
