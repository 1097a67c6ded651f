"""A journaled call's body on a worker thread, and what a cancellation does to it.

A thread cannot be stopped. When an action times out (or a ``TaskGroup``
sibling fails) while a journaled call waits for a worker thread
(``durable_execute_async`` of a plain function, a sync tool, a sync vector
store), cancelling the waiting task leaves the thread running. Had the call
then journaled nothing, the action's retry would start a second execution
of the same call while the first still ran: the email sent twice.

So ``RunJournal.call`` runs each body as a task of its own
(``CallExecution``), and the body's threads go through ``run_in_thread``:

- cancelled before its thread started, ``run_in_thread`` gives the work up
  (it never runs) and the cancellation goes on: nothing ran, the call runs
  again when its position is reached again;
- cancelled while its thread runs, it tells the execution so
  (``CallExecution.outlived``: the journal stops waiting and the cancelled
  action sees its cancellation now), waits for the thread, and ends the
  execution with the thread's outcome: the journal keeps it for the
  position, and the retry replays it instead of calling again
  (``docs/durability.md``, "Timeouts and threads").

Outside a journaled call's execution ``run_in_thread`` holds the
cancellation back until the thread returned, then raises it: nothing
overlaps, and the thread's result is dropped.

Threads a body starts another way, through the loop's default executor
(``asyncio.to_thread`` in a sync chat model connection's ``achat``, in user
code), are tracked too: the engine's call pool reports each to the running
execution (``track_thread``). A body cancelled while such a thread runs
ends only once the thread returned; its outcome is lost (the body that
would have used it was cancelled), so the retry's call runs again, but
only after the first execution ended: never two at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from typing import Any, Awaitable, Callable, TypeVar

from flink_agents._pycompat import uncancel

__all__ = ["CallExecution", "run_in_thread", "track_thread"]

T = TypeVar("T")

_EXECUTION: contextvars.ContextVar["CallExecution | None"] = contextvars.ContextVar(
    "flink_agents_call_execution", default=None)


class CallExecution:
    """One execution of a journaled call's body, as a task of its own.

    Attributes:
        outlived: Done once a thread of the body outlives a cancellation of
            the execution: the body goes on until the thread returned, and
            whoever waits for the body to settle need not wait any longer.
    """

    def __init__(self) -> None:
        self.outlived: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._threads: "set[concurrent.futures.Future[Any]]" = set()  # default-executor work still running

    def start(self, body: Callable[[], Awaitable[T]]) -> "asyncio.Task[T]":
        """Run ``body()`` as a task, in a copy of the caller's context in
        which this execution is the running one (for ``run_in_thread`` and
        ``track_thread``). Cancelled while a tracked thread runs, the task
        ends (cancelled) only once that thread returned."""
        token = _EXECUTION.set(self)
        try:
            return asyncio.ensure_future(self._run(body))
        finally:
            _EXECUTION.reset(token)

    async def _run(self, body: Callable[[], Awaitable[T]]) -> T:
        try:
            return await body()
        except asyncio.CancelledError:
            running = [thread for thread in list(self._threads) if not thread.done()]
            if running:
                self._outlives_cancellation()
                await _until_done(asyncio.gather(*(asyncio.wrap_future(thread) for thread in running),
                                                 return_exceptions=True))
            raise

    def _track(self, thread: "concurrent.futures.Future[Any]") -> None:
        self._threads.add(thread)
        thread.add_done_callback(self._threads.discard)  # on the worker thread: a set op under the GIL

    def _outlives_cancellation(self) -> None:
        if not self.outlived.done():
            self.outlived.set_result(None)


class _Start:
    """Whether a thread's work started, or was given up first (one lock)."""

    __slots__ = ("lock", "started", "given_up")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = False
        self.given_up = False


async def run_in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the loop's default executor (the engine's
    call pool, ``runtime.scheduling.executors``) with the caller's context
    variables, as ``asyncio.to_thread``; cancelled, see the module docstring.

    Raises:
        asyncio.CancelledError: Cancelled before the thread started, or
            outside a journaled call's execution once the thread returned.
        Exception: What ``fn`` raised.
    """
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    start = _Start()

    def work() -> Any:
        with start.lock:
            if start.given_up:
                return None
            start.started = True
        return context.run(fn, *args, **kwargs)

    thread = loop.run_in_executor(None, work)
    try:
        return await asyncio.shield(thread)
    except asyncio.CancelledError:
        with start.lock:
            start.given_up = not start.started
        if start.given_up:
            raise
        execution = _EXECUTION.get()
        if execution is not None:
            execution._outlives_cancellation()
        held = await _until_done(thread)
        task = asyncio.current_task()
        if execution is None or task is None:
            thread.cancelled() or thread.exception()  # retrieved: the outcome is dropped with the cancellation
            raise
        for _ in range(held + 1):  # the execution goes on: it ends with the thread's outcome
            uncancel(task)
        return thread.result()


def track_thread(thread: "concurrent.futures.Future[Any]") -> None:
    """Report work just submitted to the engine's call pool to the journaled
    call's execution running in this context, if any (see the module
    docstring); called by the pool's ``submit`` on the event loop's thread."""
    execution = _EXECUTION.get()
    if execution is not None:
        execution._track(thread)


async def _until_done(future: "asyncio.Future[Any]") -> int:
    """Wait for ``future`` whatever cancellations arrive; how many did."""
    held = 0
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            held += 1
    return held

