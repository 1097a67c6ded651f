"""References to values in memory, returned by ``MemoryObject.set``."""

from __future__ import annotations

from pydantic import BaseModel

__all__ = ["MemoryRef"]


class MemoryRef(BaseModel, frozen=True):
    """Points at a value by its dotted path; pass it to ``MemoryObject.get``
    (or put it in an event) instead of copying a large value around."""

    path: str
