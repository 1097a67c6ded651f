"""Errors of the runtime, classified in one place.

``ActionFailed`` is terminal for the record: an action raised. It carries the
key, record sequence number and action name so that the job's failure names
the record. Engine control signals (none yet) will derive from BaseException
so that ``except Exception`` in user code cannot swallow them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActionFailed", "InputRecordError", "NondeterminismError", "RecordSkipped", "ReplayedError", "StateSchemaError",
]


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


class InputRecordError(TypeError):
    """An input record (or steering message) holds a value that keyed state
    cannot keep with its type (``runtime.codec``).

    Attributes:
        key: The record's key.
        seq: The record's position among the key's records (from 0).
        path: Where in the record the value is (``"record.items[2]"``).
    """

    def __init__(self, what: str, key: Any, seq: int, path: str, reason: str) -> None:
        super().__init__(f"{what} #{seq} of key {key!r} cannot be kept in keyed state: {path} {reason}")
        self.key = key
        self.seq = seq
        self.path = path


class NondeterminismError(BaseException):
    """A replayed action made a different call than the journal recorded.

    A ``BaseException`` so that an action's ``except Exception`` cannot
    swallow it: continuing would mix two different histories. Never retried or
    skipped; the action loop turns it into a failure of the record.
    """


class ReplayedError(RuntimeError):
    """A journaled exception whose class cannot be rebuilt on replay.

    Attributes:
        type_name: ``module:qualname`` of the original exception.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


class RecordSkipped(Exception):
    """The record's run failed and its error strategy is ``skip``.

    Attributes:
        failure: The ``ActionFailed`` that ended the run.
        attempts: How many times the failing action ran.
    """

    def __init__(self, failure: ActionFailed, attempts: int) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.attempts = attempts
