"""One persistent MCP client session, owned by a background thread.

``MCPConnection`` keeps one ``mcp.ClientSession`` for its ``MCPServer``: a
daemon thread runs an asyncio loop, and one task on it enters the transport
(a spawned stdio server, or streamable HTTP) and the session, and holds them
open until ``close``. Every request (``submit``) runs on that loop, whatever
thread or loop it came from, and comes back as a ``concurrent.futures.Future``
(``asyncio.wrap_future`` makes it awaitable on the caller's loop; a sync
caller waits on ``result()``). So a stdio server is spawned once per
``MCPServer`` instance, not per call, and no thread is held per call.

Reconnects: a request that fails because the connection or session broke
(the server exited, the HTTP endpoint refused, the session closed) drops
the session, waits a time drawn uniformly below ``backoff_s * 2**attempt``
(capped at 5 s; full jitter, ``flink_agents._backoff``), opens a new
one and runs the request again, at most ``max_retries`` times; then it fails
with ``MCPServerUnavailable`` naming the server. A request that times out
(``MCPTimeout``) or that the server answers with an error is not retried; a
session the server refuses for another reason (HTTP 401, a protocol error)
fails at once with ``MCPSessionError``. A call that was in flight when the
connection broke may have run on the server: its retry runs it again (at
least once, as the MCP protocol cannot tell).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, AsyncContextManager, Awaitable, Callable, Tuple, TypeVar

from flink_agents._backoff import backoff_ceiling_s, full_jitter
from flink_agents._pycompat import TIMEOUT_ERRORS, BaseExceptionGroup
from flink_agents.integrations.sdk import import_sdk

__all__ = ["MCPConnection", "MCPServerUnavailable", "MCPSessionError", "MCPTimeout"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_MAX_BACKOFF_S = 5.0


class MCPServerUnavailable(ConnectionError):
    """The MCP server could not be reached, or its connection kept breaking,
    after the configured reconnects. Attributes: ``server`` (its label),
    ``attempts`` (connections tried)."""

    retryable = True

    def __init__(self, server: str, attempts: int, cause: BaseException) -> None:
        super().__init__(
            f"MCP server {server} is unavailable after {attempts} attempt(s) "
            f"(max_retries={attempts - 1}): {type(cause).__name__}: {cause}"
        )
        self.server = server
        self.attempts = attempts


class MCPSessionError(RuntimeError):
    """The server refused to open a session for a reason a reconnect does not
    fix (an HTTP 401/403, a protocol error); the message names the server."""


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside ``exc`` (the SDK's transports
    raise from anyio task groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class MCPTimeout(TimeoutError):
    """An MCP request got no answer within the server's ``timeout`` (seconds)."""


def _is_broken(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection or session is gone (worth a reconnect)."""
    mcp_error = getattr(import_sdk("mcp.shared.exceptions", "mcp", "MCPServer"), "MCPError")
    types = import_sdk("mcp.types", "mcp", "MCPServer")
    anyio = import_sdk("anyio", "mcp", "MCPServer")
    if isinstance(exc, mcp_error):
        return exc.error.code == types.CONNECTION_CLOSED
    if isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)):
        return True
    if isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError)):
        return False  # a stdio server's command cannot start: a reconnect will not fix it
    if isinstance(exc, (ConnectionError, EOFError, OSError)) and not isinstance(exc, TimeoutError):
        return True
    try:
        httpx2 = import_sdk("httpx2", "mcp", "MCPServer")
    except ImportError:
        return False
    return isinstance(exc, httpx2.TransportError) and not isinstance(exc, httpx2.TimeoutException)


def _is_timeout(exc: BaseException) -> bool:
    mcp_error = getattr(import_sdk("mcp.shared.exceptions", "mcp", "MCPServer"), "MCPError")
    types = import_sdk("mcp.types", "mcp", "MCPServer")
    return isinstance(exc, mcp_error) and exc.error.code == types.REQUEST_TIMEOUT


class _Session:
    """One open session and the task that holds its transport open."""

    def __init__(self, session: Any, task: "asyncio.Task[None]", stop: asyncio.Event) -> None:
        self.session, self.task, self.stop = session, task, stop


class MCPConnection:
    """The session of one MCP server (see the module docstring).

    Args:
        label: The server, for messages (``"'name' (command ...)"``).
        open_transport: A new ``(read_stream, write_stream)`` async context
            manager (``mcp.client.stdio.stdio_client`` or
            ``streamable_http_client``) per connection.
        timeout_s: Seconds to wait for one request's answer (and for the
            session to open).
        max_retries: Reconnects per request after a broken connection.
        backoff_s: First wait before a reconnect, doubled each time.
    """

    def __init__(
        self,
        label: str,
        open_transport: Callable[[], AsyncContextManager[Tuple[Any, Any]]],
        timeout_s: float,
        max_retries: int,
        backoff_s: float = 0.2,
    ) -> None:
        self.label = label
        self._open_transport = open_transport
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._current: _Session | None = None
        self._opening: asyncio.Lock | None = None
        self._closed = False
        self.connections_opened = 0

    @property
    def current_session(self) -> Any:
        """The open ``ClientSession``, or None."""
        current = self._current
        return None if current is None or current.task.done() else current.session

    # -- the loop thread -------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._closed:
                raise RuntimeError(f"MCP server {self.label} is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name=f"mcp-{self.label}", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def submit(self, request: Callable[[Any], Awaitable[T]]) -> "concurrent.futures.Future[T]":
        """Run ``request(session)`` on the session's loop, reconnecting as
        the module docstring says.

        Returns:
            A future of ``request``'s result; it fails with
            ``MCPServerUnavailable`` (connection kept breaking), ``MCPTimeout``,
            or the error ``request`` raised.

        Raises:
            RuntimeError: The connection was closed.
        """
        loop = self._ensure_loop()
        return asyncio.run_coroutine_threadsafe(self._with_retries(request), loop)

    # -- on the loop ------------------------------------------------------

    async def _with_retries(self, request: Callable[[Any], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            current: _Session | None = None
            try:
                current = await self._session()
                return await request(current.session)
            except Exception as exc:
                if _is_timeout(exc):
                    raise MCPTimeout(f"MCP server {self.label} did not answer within {self._timeout_s} s") from exc
                if not _is_broken(exc):
                    raise
                await self._drop(current)
                if attempt >= self._max_retries:
                    raise MCPServerUnavailable(self.label, attempt + 1, exc) from exc
                delay = full_jitter(backoff_ceiling_s(attempt, self._backoff_s, _MAX_BACKOFF_S))
                log.warning("MCP server %s: connection broken (%s: %s); reconnecting in %.2f s (retry %d of %d)",
                            self.label, type(exc).__name__, exc, delay, attempt + 1, self._max_retries)
                attempt += 1
                await asyncio.sleep(delay)

    async def _session(self) -> _Session:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            current = self._current
            if current is not None and not current.task.done():
                return current
            self._current = None
            opened: asyncio.Future = asyncio.get_running_loop().create_future()
            stop = asyncio.Event()
            task = asyncio.get_running_loop().create_task(self._hold(opened, stop))
            try:
                session = await asyncio.wait_for(asyncio.shield(opened), self._timeout_s)
            except asyncio.TimeoutError:
                stop.set()
                task.cancel()
                raise MCPTimeout(f"MCP server {self.label}: no session within {self._timeout_s} s") from None
            except Exception as exc:
                cause = _leaf(exc)
                if _is_broken(cause) or _is_timeout(cause):
                    raise cause from exc
                raise MCPSessionError(
                    f"MCP server {self.label}: could not open a session: {type(cause).__name__}: {cause}"
                ) from exc
            self.connections_opened += 1
            self._current = _Session(session, task, stop)
            return self._current

    async def _hold(self, opened: asyncio.Future, stop: asyncio.Event) -> None:
        """Enter transport and session, publish the session, hold both open
        until ``stop``: context managers of the SDK must be exited by the
        task that entered them."""
        client_session = import_sdk("mcp", "mcp", "MCPServer").ClientSession
        try:
            async with self._open_transport() as streams:
                read, write = streams[0], streams[1]
                async with client_session(read, write, read_timeout_seconds=self._timeout_s) as session:
                    await session.initialize()
                    opened.set_result(session)
                    await stop.wait()
        except BaseException as exc:
            if not opened.done():
                opened.set_exception(exc if isinstance(exc, Exception) else ConnectionError(repr(exc)))
            elif not isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
                log.info("MCP server %s: session ended: %s: %s", self.label, type(exc).__name__, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _drop(self, current: _Session | None) -> None:
        if current is None:
            return
        if self._current is current:
            self._current = None
        current.stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(current.task), 10)
        except Exception as exc:  # the session is being discarded; say why it ended
            log.info("MCP server %s: closing a broken session: %s: %s", self.label, type(exc).__name__, exc)

    # -- shutdown ----------------------------------------------------------

    def close(self, timeout_s: float = 15.0) -> None:
        """End the session (and a stdio server's process) and the loop
        thread. Idempotent.

        Raises:
            TimeoutError: The session did not end within ``timeout_s``.
        """
        with self._guard:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None:
            return
        try:
            try:
                asyncio.run_coroutine_threadsafe(self._drop(self._current), loop).result(timeout_s)
            except TIMEOUT_ERRORS as exc:  # concurrent.futures' own class on Python 3.10
                raise TimeoutError(f"the MCP session did not end within {timeout_s:g} s") from exc
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout_s)
            if thread is None or not thread.is_alive():
                loop.close()
