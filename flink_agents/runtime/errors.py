"""Errors of the runtime, classified in one place (``classify``).

Three kinds decide what happens when an action invocation ends in an error:

- ``RETRYABLE``: an ordinary exception of user code (a tool, a model call,
  the action itself); the action's error strategy applies (fail, retry with
  backoff, skip).
- ``TERMINAL``: a fault that a retry would repeat (``NondeterminismError``,
  ``ActionReturnedValue``, a sent event holding a value the codec refuses,
  a journal row or state value the codec cannot read back (``DecodeError``,
  such as a row naming a class it may not),
  an exception whose class sets ``retryable = False``, such as a model
  provider's context too long or bad request (``api.chat_models.errors``)
  or ``ReActStepLimitReached``): the record fails,
  or under ``skip`` goes to the error output, without retries.
- ``INTERNAL``: the runtime itself cannot go on (``JournalUnavailable``: a
  store write failed, so nothing may build on results that are not
  durable): the record fails under every strategy, and the job's restart
  replays it. Internal errors and ``NondeterminismError`` derive from
  ``BaseException``, so an action's ``except Exception`` cannot swallow
  them and go on as if its results were safe.

``ActionFailed`` carries the key, record sequence number and action name so
that the job's failure names the record. Matching is by type, never by text.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActionFailed", "ActionReturnedValue", "BudgetExceeded", "INTERNAL", "InputRecordError", "JournalUnavailable", "NondeterminismError",
    "RETRYABLE", "RecordParked", "RecordSkipped", "RunCancelled", "ReplayedError", "StateSchemaError", "TERMINAL", "classify", "job_failure",
]

RETRYABLE = "retryable"
TERMINAL = "terminal"
INTERNAL = "internal"


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
    cannot keep with its type (``runtime.durability.codec``).

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


class RecordParked(RecordSkipped):
    """The record's run failed and its error strategy is ``park``: the record
    stays queued in keyed state and its key is paused (a run-control pause
    request names the failure) until ``resume`` or ``retry`` runs it again."""


class RunCancelled(Exception):
    """A run-control request cancelled the record's run (``stores.controls``).
    It ends on the error stream with ``error_type`` ``RunCancelled``; the
    key's later records go on.

    Attributes:
        control_id: The request that cancelled it.
        requested_by: Who asked.
    """

    def __init__(self, key: Any, seq: int, control_id: int, requested_by: str) -> None:
        super().__init__(f"the run of key {key!r}, record #{seq} was cancelled by control request "
                         f"#{control_id} ({requested_by})")
        self.control_id = control_id
        self.requested_by = requested_by


class HostCancelled(RuntimeError):
    """Flink cancelled the subtask while its operator waited on the runner
    (back-pressure, a watermark waiting for runs in flight): the wait ends at
    once instead of when those runs end (a model call may take its whole
    timeout), the runner stops, and its runs in progress are abandoned.
    Their records are still pending in keyed state: the restored subtask
    runs them again, replaying what their journals hold. Raised into the
    cancelled task, where Flink ignores it."""


class BudgetExceeded(RuntimeError):
    """A model call was refused: the record, its key's window or the job
    reached a budget (``runtime.features.budgets``). Terminal (a retry
    would be refused again): the record fails, goes to the error stream
    under ``skip``, or parks under ``park``.

    Attributes:
        budget: The option that set the budget (``budget.key.tokens``).
        limit: Its value (for the job's: this subtask's share).
        used: What was used when the call was refused (tokens, USD or calls).
    """

    retryable = False

    def __init__(self, budget: str, limit: float, used: float, detail: str = "") -> None:
        super().__init__(f"budget {budget} exceeded: {_amount(used)} used of {_amount(limit)}"
                         f"{f' ({detail})' if detail else ''}; the model call was refused")
        self.budget = budget
        self.limit = limit
        self.used = used


def _amount(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.6g}"


class ActionReturnedValue(TypeError):
    """An action returned something other than ``None``: its value would be
    lost (terminal: a retry would return it again)."""

    def __init__(self, action: str, value: Any) -> None:
        super().__init__(
            f"action {action!r} returned a value of type {type(value).__name__} ({value!r:.80}); "
            "actions return None: "
            "send outputs and events with ctx.send_event(...), e.g. ctx.send_event(OutputEvent(output=...))"
        )
        self.action = action


class JournalUnavailable(BaseException):
    """A journal write failed: the run cannot make its results durable.

    A ``BaseException`` (internal): an action's ``except Exception`` around a
    journaled call must not swallow it, or the action would go on, and its
    record emit outputs, on results a failover could lose. The store's own
    error is the ``__cause__``.

    Internal to the runtime: a job whose record fails with it fails with
    the store's own error instead (``job_failure``), an ``Exception``.

    Attributes:
        run: ``(journal id, key text, record seq)`` of the run.
        store: The store, as its ``repr`` names it (never a password), or None.
    """

    def __init__(self, run: Any, cause: BaseException, store: str | None = None) -> None:
        super().__init__(f"journal write of run {run} failed: {type(cause).__name__}: {cause}")
        self.run = run
        self.store = store


def job_failure(error: BaseException) -> BaseException:
    """What a job raises for a record that failed with ``error`` (every host
    raises a failed record through ``completion.Applied.raise_failure``).

    ``JournalUnavailable`` is a ``BaseException`` only so that no action can
    swallow it; past the actions, a job's caller must be able to catch it
    with ``except Exception``. So it becomes the store's own error
    (``flink_agents.stores.errors``: ``JournalUnavailableError``,
    ``JournalStoreError``, ...) with a one-line message naming the store and
    the cause (``append of run (...) on /path/journal.db failed:
    sqlite3.OperationalError: disk I/O error``). Anything else is returned
    as it is.
    """
    if not isinstance(error, JournalUnavailable):
        return error
    from flink_agents.stores.errors import JournalStoreError  # runtime.errors imports nothing else of ours

    cause = error.__cause__
    if isinstance(cause, JournalStoreError):
        kind: Any = type(cause)
        message = str(cause)
        if cause.location is None and error.store is not None:
            message = f"{message} (store {error.store})"
    else:
        kind = JournalStoreError
        store = error.store or "the journal store"
        message = f"journal write of run {error.run} to {store} failed: {type(cause).__name__}: {cause}"
    notes = getattr(cause, "__notes__", None)  # the retries given up after, say
    if notes:
        message = "; ".join([message, *notes])
    failure = kind(" ".join(message.split()))
    failure.operation = getattr(cause, "operation", None)
    failure.location = getattr(cause, "location", None)
    failure.run = error.run
    return failure


def classify(error: BaseException) -> str:
    """``RETRYABLE``, ``TERMINAL`` or ``INTERNAL`` (see the module docstring).

    Anything that is not an ``Exception`` and not one of ours (a
    ``KeyboardInterrupt``, a ``CancelledError``) is not classified here: it
    propagates as is.
    """
    from flink_agents.runtime.durability.codec import DecodeError, EncodeError  # the codec builds on this module

    if isinstance(error, JournalUnavailable):
        return INTERNAL
    if isinstance(error, (NondeterminismError, ActionReturnedValue, EncodeError, DecodeError)):
        return TERMINAL
    if getattr(type(error), "retryable", None) is False:
        return TERMINAL  # says so itself: a provider's refusal, a step bound reached
    return RETRYABLE
