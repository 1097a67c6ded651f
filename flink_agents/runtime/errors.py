"""Errors of the runtime, classified in one place.

``ActionFailed`` is terminal for the record: an action raised. It carries the
key, record sequence number and action name so that the job's failure names
the record. Engine control signals (none yet) will derive from BaseException
so that ``except Exception`` in user code cannot swallow them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ActionFailed", "StateSchemaError"]


class ActionFailed(RuntimeError):
    """An action raised while processing a record."""

    def __init__(self, key: Any, seq: int, action: str, cause: BaseException) -> None:
        super().__init__(
            f"action {action!r} failed on key {key!r}, record #{seq}: "
            f"{type(cause).__name__}: {cause}"
        )
        self.key = key
        self.seq = seq
        self.action = action
        self.cause = cause


class StateSchemaError(RuntimeError):
    """Keyed state was written by an incompatible release."""
