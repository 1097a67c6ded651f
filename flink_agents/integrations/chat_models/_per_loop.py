"""One async client per running event loop, each closed on its own loop.

Async HTTP clients (``openai.AsyncOpenAI`` and the like) keep pooled
connections bound to the event loop that opened them; using one from another
loop fails ("Event loop is closed", "attached to a different loop"). A
resource may be awaited from several loops over its life: the local runner
calls ``asyncio.run`` once per ``execute()``, the Flink driver runs one loop
per operator. So a resource keeps one client per loop.

A client is closed on its loop, because that is the only place its
connections can be closed cleanly:

* when the loop shuts down: the client is held by an async generator whose
  ``finally`` closes it, and ``loop.shutdown_asyncgens()`` (called by
  ``asyncio.run`` and ``asyncio.Runner``) finalizes every such generator;
* or by ``close()``: on the loop's own thread if the loop is running in
  another thread, with ``run_until_complete`` if the loop is idle, or left to
  the loop's shutdown if ``close()`` is called from inside that very loop (a
  synchronous ``close()`` cannot await there).

A loop closed without ``shutdown_asyncgens`` leaks its client's connections
(the operating system reclaims them at exit).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Generic, List, TypeVar

__all__ = ["PerLoopClients", "SdkClients"]

C = TypeVar("C")


async def _hold(client: C, aclose: Callable[[C], Awaitable[None]]) -> AsyncIterator[C]:
    """Yield ``client`` once, then stay suspended until finalized; close it then."""
    try:
        yield client
    finally:
        await aclose(client)


async def _finalize(holder: AsyncIterator[object]) -> None:
    await holder.aclose()  # type: ignore[attr-defined]


class _Entry:
    __slots__ = ("loop", "client", "holder")

    def __init__(self, loop: asyncio.AbstractEventLoop, client: object, holder: AsyncIterator[object]) -> None:
        self.loop = loop
        self.client = client
        self.holder = holder

    @property
    def finished(self) -> bool:
        """Whether the holder already closed its client (or never will)."""
        return self.loop.is_closed() or self.holder.ag_frame is None  # type: ignore[attr-defined]


class PerLoopClients(Generic[C]):
    """Creates and closes one client per event loop.

    Safe to use from several threads, each running its own loop.

    Args:
        create: Builds a new client; called on the loop that will use it.
        aclose: Closes a client; awaited on the client's loop.
    """

    def __init__(self, create: Callable[[], C], aclose: Callable[[C], Awaitable[None]]) -> None:
        self._create = create
        self._aclose = aclose
        self._lock = threading.Lock()
        self._live: Dict[int, _Entry] = {}
        # Closed by close() but still waiting for their loop's shutdown.
        self._retired: List[_Entry] = []

    async def get(self) -> C:
        """The client of the running loop, created on first use.

        Raises:
            RuntimeError: Called without a running event loop.
        """
        loop = asyncio.get_running_loop()
        entry = self._live.get(id(loop))
        if entry is not None and entry.loop is loop:
            return entry.client  # type: ignore[return-value]
        client = self._create()
        holder = _hold(client, self._aclose)
        with self._lock:
            self._live = {k: e for k, e in self._live.items() if not e.loop.is_closed()}
            self._retired = [e for e in self._retired if not e.finished]
            # The entry keeps the loop alive, so id(loop) cannot be reused meanwhile.
            self._live[id(loop)] = _Entry(loop, client, holder)
        # First iteration registers the holder with the loop for shutdown_asyncgens.
        await holder.__anext__()
        return client

    def __len__(self) -> int:
        """Number of clients not known to be closed."""
        with self._lock:
            return sum(1 for e in [*self._live.values(), *self._retired] if not e.finished)

    def close(self) -> None:
        """Close every client (see the module docstring for where and when).

        A later ``get()`` creates a fresh client.

        Raises:
            Exception: Closing a client on an idle loop raised; the other
                clients are closed first.
        """
        with self._lock:
            entries = [*self._live.values(), *self._retired]
            self._live, self._retired = {}, []
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        waiting: List[_Entry] = []
        errors: List[Exception] = []
        for entry in entries:
            if entry.finished:
                continue
            loop = entry.loop
            if loop is current:
                waiting.append(entry)  # closed by this loop's shutdown_asyncgens
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(_finalize(entry.holder), loop)
                waiting.append(entry)  # kept referenced until it has finished
            elif current is None:
                try:
                    loop.run_until_complete(_finalize(entry.holder))
                except Exception as exc:  # close the others, then report
                    errors.append(exc)
            else:
                waiting.append(entry)
        with self._lock:
            self._retired.extend(waiting)
        if errors:
            raise errors[0]


async def _close_client(client: Any) -> None:
    await client.close()


class SdkClients:
    """The SDK clients of one connection: one shared blocking client (the
    SDKs' sync clients are thread-safe) and one async client per event loop
    (``PerLoopClients``). Both are created on first use; ``close()`` closes
    them all, and a later call opens new ones.

    Args:
        make_sync: Builds the blocking client (``openai.OpenAI(...)``, ...).
        make_async: Builds an async client; called on the loop that uses it.
        aclose: Closes an async client; default ``await client.close()``.
    """

    def __init__(
        self,
        make_sync: Callable[[], Any],
        make_async: Callable[[], Any],
        aclose: Callable[[Any], Awaitable[None]] = _close_client,
    ) -> None:
        self._make_sync = make_sync
        self._lock = threading.Lock()
        self._sync: Any = None
        self._async = PerLoopClients(make_async, aclose)

    def sync(self) -> Any:
        """The shared blocking client."""
        with self._lock:
            if self._sync is None:
                self._sync = self._make_sync()
            return self._sync

    async def current(self) -> Any:
        """The async client of the running event loop."""
        return await self._async.get()

    def async_count(self) -> int:
        """How many async clients are open (one per loop that used them)."""
        return len(self._async)

    def close(self) -> None:
        """Close every client (async ones on their own loop; see ``PerLoopClients``)."""
        with self._lock:
            sync_client, self._sync = self._sync, None
        try:
            self._async.close()
        finally:
            if sync_client is not None:
                sync_client.close()
