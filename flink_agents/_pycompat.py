"""What the runtime uses of Python 3.11's standard library, on 3.10 too.

The package supports Python 3.10 to 3.12 (pyproject.toml). On 3.11 and later
each name here is the standard library's own; on 3.10 it is the backport the
ecosystem already uses (both are dependencies there, pyproject.toml) or a
few lines:

- ``BaseExceptionGroup``, ``ExceptionGroup``: builtins from 3.11; the
  ``exceptiongroup`` backport on 3.10 (the one anyio and pytest use).
- ``timeout(delay_s)``: ``asyncio.timeout`` from 3.11; ``async_timeout``'s
  on 3.10 (aiohttp's backport), which cancels the task the same way.
  ``expired(cm)`` says whether its deadline fired (a method on 3.11's, a
  property on async-timeout 4's).
- ``TIMEOUT_ERRORS``: what a timeout raises. From 3.11 ``asyncio.TimeoutError``
  and ``concurrent.futures.TimeoutError`` are the builtin ``TimeoutError``;
  on 3.10 they are separate classes, so ``except TimeoutError`` alone misses
  them.
- ``add_note(exc, note)``: ``BaseException.add_note`` from 3.11; on 3.10 the
  same ``__notes__`` list (printed under the traceback once ``exceptiongroup``
  is imported, which this module does).
- ``uncancel(task)``: ``Task.uncancel`` from 3.11 (the requests left). On 3.10,
  whose tasks keep no count of cancellation requests, 0: a ``CancelledError``
  caught and not re-raised leaves nothing to undo.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from typing import Any, AsyncContextManager, Tuple, Type

__all__ = [
    "BaseExceptionGroup", "ExceptionGroup", "TIMEOUT_ERRORS", "add_note", "expired", "timeout", "uncancel",
]

if sys.version_info >= (3, 11):
    import builtins

    BaseExceptionGroup = builtins.BaseExceptionGroup
    ExceptionGroup = builtins.ExceptionGroup

    def timeout(delay_s: float | None) -> AsyncContextManager[Any]:
        """``asyncio.timeout(delay_s)`` (seconds; None: no deadline)."""
        return asyncio.timeout(delay_s)

    def add_note(exc: BaseException, note: str) -> None:
        """``exc.add_note(note)``."""
        exc.add_note(note)

    def uncancel(task: "asyncio.Task[Any]") -> int:
        """``task.uncancel()``: one cancellation request withdrawn; how many remain."""
        return task.uncancel()
else:  # Python 3.10 (FLINK_MATRIX_PYTHONS=3.10 bash tools/test_matrix.sh runs it)
    import async_timeout
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

    def timeout(delay_s: float | None) -> AsyncContextManager[Any]:
        """``async_timeout.timeout(delay_s)`` (seconds; None: no deadline)."""
        return async_timeout.timeout(delay_s)

    def add_note(exc: BaseException, note: str) -> None:
        """3.11's ``add_note``: ``note`` appended to ``exc.__notes__``.

        Raises:
            TypeError: ``note`` is not a str (as 3.11 raises).
        """
        if not isinstance(note, str):
            raise TypeError(f"note must be a str, not {type(note).__name__}")
        notes = getattr(exc, "__notes__", None)
        if notes is None:
            exc.__notes__ = [note]  # type: ignore[attr-defined]
        else:
            notes.append(note)

    def uncancel(task: "asyncio.Task[Any]") -> int:
        """Nothing to withdraw on 3.10 (module docstring): 0 remain."""
        return 0


TIMEOUT_ERRORS: Tuple[Type[BaseException], ...] = tuple(
    dict.fromkeys((TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError))
)


def expired(deadline: Any) -> bool:
    """Whether the deadline of ``deadline`` (made by ``timeout``) fired."""
    flag = deadline.expired
    return bool(flag() if callable(flag) else flag)
