"""Where blocking work runs: user calls and store I/O on separate threads.

asyncio's default executor has min(32, cores + 4) threads (6 on 2 cores),
shared by ``asyncio.to_thread`` and ``run_in_executor(None, ...)``. Run
there together, blocking user calls (sync tools, sync functions given to
``durable_execute_async``, sync chat model connections) cap a subtask at six
concurrent runs, and starve the journal's commits and the callback poller of
threads. So the engine keeps two pools:

- **calls**, sized by ``num-async-threads`` (Flink Agents 0.3.1's key),
  by default the run concurrency (``max_concurrent_runs``, default 64):
  installed as the default executor of every loop a run executes on,
  so ``asyncio.to_thread`` inside user code and the runtime's own offloads
  of sync user code land there;
- **io**, a small pool of its own for journal writes and callback store
  operations, which user code cannot occupy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import weakref
from typing import Any, Callable, TypeVar

from flink_agents.runtime.durability.call_threads import track_thread

__all__ = ["Executors", "DEFAULT_IO_THREADS"]

T = TypeVar("T")
DEFAULT_IO_THREADS = 4


class _CallPool(concurrent.futures.ThreadPoolExecutor):
    """The call pool: each submitted piece of work is reported to the
    journaled call it runs for, so a cancelled call's execution ends only
    once its threads did (``runtime.durability.call_threads``)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> "concurrent.futures.Future[T]":
        future = super().submit(fn, *args, **kwargs)
        track_thread(future)
        return future


class Executors:
    """The engine's two thread pools (see the module docstring).

    Args:
        call_threads: Threads for blocking user calls (the run concurrency).
        io_threads: Threads for store I/O.

    Raises:
        ValueError: A size below 1.
    """

    def __init__(self, call_threads: int, io_threads: int = DEFAULT_IO_THREADS) -> None:
        if call_threads < 1 or io_threads < 1:
            raise ValueError(f"executor sizes must be >= 1, got calls={call_threads}, io={io_threads}")
        self.call_threads = call_threads
        self._io = concurrent.futures.ThreadPoolExecutor(io_threads, thread_name_prefix="flink-agents-io")
        # One call pool per loop: ``asyncio.run`` shuts its loop's default
        # executor down at exit, so a pool is never reused across loops.
        self._calls: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]" = weakref.WeakKeyDictionary()
        self._installed_on: asyncio.AbstractEventLoop | None = None  # the loop install saw last

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make the call pool ``loop``'s default executor (once per loop)."""
        if loop is self._installed_on:  # every run asks; nearly always the same loop
            return
        self._installed_on = loop
        if loop not in self._calls:
            pool = _CallPool(self.call_threads, thread_name_prefix="flink-agents-call")
            loop.set_default_executor(pool)
            self._calls[loop] = pool

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the call pool, with the caller's
        context variables (as ``asyncio.to_thread``)."""
        loop = asyncio.get_running_loop()
        self.install(loop)
        context = contextvars.copy_context()
        return await loop.run_in_executor(None, functools.partial(context.run, fn, *args, **kwargs))

    def io_future(self, fn: Callable[..., T], *args: Any) -> "asyncio.Future[T]":
        """Start ``fn(*args)`` on the io pool; its future on the running loop.

        Raises:
            RuntimeError: The pool was shut down (the engine closed).
        """
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        return loop.run_in_executor(self._io, functools.partial(context.run, fn, *args))

    def io_submit(self, fn: Callable[..., T], *args: Any) -> "concurrent.futures.Future[T]":
        """Start ``fn(*args)`` on the io pool, with the caller's context
        variables; its thread-side future. Unlike ``io_future`` no event loop
        is woken when it ends: for work that reports back on its own.

        Raises:
            RuntimeError: The pool was shut down (the engine closed).
        """
        return self._io.submit(contextvars.copy_context().run, fn, *args)

    async def io(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the io pool."""
        return await self.io_future(fn, *args)

    def close(self) -> None:
        """Stop the io pool (the call pools end with their loops)."""
        self._io.shutdown(wait=False, cancel_futures=True)
