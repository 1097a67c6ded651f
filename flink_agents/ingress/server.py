"""Run the callback ingress: on a background thread (``CallbackIngress``, for
tests and embedding) or in the foreground until a signal (``serve_forever``,
for ``flink-agents callbacks serve``).

Both serve ``make_app`` with aiohttp's ``AppRunner`` on an event loop of
their own, under ``IngressLimits``: the body limit and body timeout are the
application's (``callback_app``), the idle timeout is aiohttp's
``keepalive_timeout``, and the connection limit and header timeout are a
``ConnectionGuard`` around aiohttp's protocol factory. That is why the
socket is opened with ``loop.create_server`` rather than a ``TCPSite``: a
site always serves ``runner.server`` itself, with no place for the guard.

Access logging is off: a callback URL is the capability to complete the
callback, so it must not land in logs. For the same reason a request
aiohttp cannot parse is answered with a short fixed body and logged in one
line without its bytes (``protocol.QuietRequestHandler``). Beyond loopback
the ingress serves only with authentication (``auth``: a bearer token,
signed URLs) or when told explicitly to do without.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import threading
import time
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from flink_agents.ingress.auth import IngressAuth, check_bind
from flink_agents.ingress.callback_app import METRICS_KEY, make_app
from flink_agents.ingress.connections import ConnectionGuard
from flink_agents.ingress.options import IngressLimits
from flink_agents.ingress.protocol import protocol_factory
from flink_agents.stores.callbacks import CallbackStore

__all__ = ["CallbackIngress", "describe_store", "serve_forever"]

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8089
# The listen backlog (aiohttp's TCPSite default).
_BACKLOG = 128
# aiohttp's own log lines (premature disconnects at DEBUG); errors are
# logged by protocol.QuietRequestHandler, without the request's bytes.
_AIOHTTP_LOG = logging.getLogger("flink_agents.ingress.http")
# File descriptors the process needs besides the connections (store, logs, ...).
_SPARE_FDS = 64


def _base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _app_for(
    store: CallbackStore, clock: Callable[[], float], limits: IngressLimits, auth: IngressAuth
) -> web.Application:
    return make_app(
        store, clock=clock, max_body_bytes=limits.max_body_bytes, body_timeout_s=limits.body_timeout_s, auth=auth
    )


def _limits(limits: Optional[IngressLimits], max_body_bytes: Optional[int]) -> IngressLimits:
    """``limits`` (default ``IngressLimits()``) with ``max_body_bytes`` in it
    when that is given."""
    chosen = limits if limits is not None else IngressLimits()
    return chosen if max_body_bytes is None else dataclasses.replace(chosen, max_body_bytes=max_body_bytes)


def _warn_if_over_the_file_limit(max_connections: int) -> None:
    """Log a warning when ``max_connections`` cannot all be open under the
    process's open-file limit: accepting would then fail first, with EMFILE
    errors in the log instead of 503 answers."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and max_connections + _SPARE_FDS > soft:
        log.warning(
            "callbacks.ingress.max_connections is %d but the open-file limit (ulimit -n) is %d: "
            "raise the limit or lower max_connections",
            max_connections,
            soft,
        )


async def _serve(
    app: web.Application,
    host: str,
    port: int,
    limits: IngressLimits,
    ready: Callable[[int], None],
    until: Callable[[], Awaitable[Any]],
) -> None:
    """Listen on ``host:port`` under ``limits`` (module docstring), call
    ``ready(bound port)``, serve until ``until()`` returns, then stop
    listening, let in-flight requests finish (aiohttp's graceful shutdown)
    and clean up."""
    _warn_if_over_the_file_limit(limits.max_connections)
    guard = ConnectionGuard(
        app[METRICS_KEY], max_connections=limits.max_connections, header_timeout_s=limits.header_timeout_s
    )
    app.middlewares.append(guard.middleware)
    # Passed to aiohttp's RequestHandler, one per connection (protocol.py).
    handler_kwargs = {"access_log": None, "keepalive_timeout": limits.idle_timeout_s, "logger": _AIOHTTP_LOG}
    runner = web.AppRunner(app, **handler_kwargs)
    await runner.setup()
    listening: Optional[asyncio.AbstractServer] = None
    try:
        if runner.server is None:  # setup() sets it
            raise RuntimeError("aiohttp's runner has no server after setup()")
        listening = await asyncio.get_running_loop().create_server(
            guard.protocol_factory(protocol_factory(runner.server, app[METRICS_KEY], handler_kwargs)),
            host, port, backlog=_BACKLOG,
        )
        # With port 0 the kernel picks one; report the first socket's port (a
        # host name resolving to several addresses may bind several ports).
        ready(listening.sockets[0].getsockname()[1])
        await until()
    finally:
        if listening is not None:
            listening.close()  # no new connections; the open ones end below
        await runner.cleanup()


class CallbackIngress:
    """The callback ingress on its own thread and event loop.

    Args:
        store: Where callbacks live (see ``make_app``).
        host: The address to listen on; the default accepts local
            connections only.
        port: The TCP port; 0 picks a free one (read ``port`` after
            ``start``).
        clock: Current time in Unix seconds, for completion stamps.
        limits: Body size, timeouts and the connection limit
            (``IngressLimits``; its defaults when not given).
        max_body_bytes: The largest POST body accepted, in bytes; when
            given, it replaces ``limits.max_body_bytes``.
        auth: What a POST must present (``IngressAuth``: bearer token,
            signed URLs); default nothing, which only a loopback ``host``
            accepts unless ``auth.allow_unauthenticated``.
        start_timeout_s: How long ``start`` waits for the socket, in seconds.

    Attributes:
        app: The aiohttp application; its counters are ``app[METRICS_KEY]``.
        limits: The ``IngressLimits`` it serves under.

    Raises:
        ValueError: ``max_body_bytes`` out of range (``IngressLimits``
            validates the rest when it is built), or ``host`` is not
            loopback and ``auth`` requires nothing (``auth.check_bind``).

    Single use: once stopped, make a new one to serve again. Usable as a
    context manager (``with CallbackIngress(store, port=0) as
    ingress: ...``): it starts on entry and stops on exit.
    """

    def __init__(
        self,
        store: CallbackStore,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        clock: Callable[[], float] = time.time,
        limits: Optional[IngressLimits] = None,
        max_body_bytes: Optional[int] = None,
        auth: Optional[IngressAuth] = None,
        start_timeout_s: float = 10.0,
    ) -> None:
        self.auth = auth if auth is not None else IngressAuth()
        check_bind(host, self.auth)
        self.store = store
        self.host = host
        self._requested_port = int(port)
        self.limits = _limits(limits, max_body_bytes)
        self.app = _app_for(store, clock, self.limits, self.auth)
        self._start_timeout_s = start_timeout_s
        self._port: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stopping: Optional[asyncio.Event] = None
        self._ready = threading.Event()
        self._error: Optional[BaseException] = None

    @property
    def port(self) -> int:
        """The port it listens on (the picked one when asked for 0).

        Raises:
            RuntimeError: Not started.
        """
        if self._port is None:
            raise RuntimeError("the callback ingress is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://host:port``: callback URLs are ``{base_url}/callbacks/{id}/resolve``
        and ``.../reject``."""
        return _base_url(self.host, self.port)

    def start(self) -> "CallbackIngress":
        """Start serving; returns once the socket listens.

        Raises:
            RuntimeError: Started before (single use), or the server did not come up in
                ``start_timeout_s``.
            OSError: The address cannot be bound (e.g. the port is taken).
        """
        if self._thread is not None or self._ready.is_set():
            # An aiohttp application serves one event loop once.
            raise RuntimeError("the callback ingress is already started (or stopped: make a new one)")
        self._thread = threading.Thread(target=self._run, name="flink-agents-callback-ingress", daemon=True)
        self._thread.start()
        if not self._ready.wait(self._start_timeout_s):
            self.stop()
            raise RuntimeError(f"the callback ingress did not start within {self._start_timeout_s} s")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop listening, let in-flight requests finish, and join the thread
        (waiting at most ``timeout_s`` seconds). Idempotent."""
        thread = self._thread
        if thread is None:
            return
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop closed meanwhile: the thread is ending
                pass
        thread.join(timeout_s)
        if thread.is_alive():
            raise RuntimeError(f"the callback ingress did not stop within {timeout_s} s")
        self._thread = None
        self._port = None

    def __enter__(self) -> "CallbackIngress":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main())
        except BaseException as error:  # reported by start() if it came first
            if self._ready.is_set():
                log.exception("the callback ingress failed while serving")
            self._error = error
        finally:
            self._ready.set()
            try:
                # A handler may still be lingering (aiohttp drains a client
                # still sending after a 413 for up to 10 s): end it here
                # rather than leave a pending task to a closed loop.
                lingering = asyncio.all_tasks(loop)
                for task in lingering:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*lingering, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()

        def ready(port: int) -> None:
            self._port = port
            self._ready.set()

        await _serve(self.app, self.host, self._requested_port, self.limits, ready, self._stopping.wait)


def serve_forever(
    store: CallbackStore,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    on_ready: Optional[Callable[[str], None]] = None,
    clock: Callable[[], float] = time.time,
    limits: Optional[IngressLimits] = None,
    max_body_bytes: Optional[int] = None,
    auth: Optional[IngressAuth] = None,
) -> None:
    """Serve the callback ingress in the calling (main) thread until SIGINT or
    SIGTERM, then shut down gracefully and return.

    Args:
        on_ready: Called with the base URL (``http://host:port``, the real
            port when ``port`` is 0) once the socket listens.
        limits, max_body_bytes, auth: As for ``CallbackIngress``.

    Raises:
        ValueError: ``host`` is not loopback and ``auth`` requires nothing.
        OSError: The address cannot be bound.
        RuntimeError: Not called from the main thread (signal handlers can
            only be installed there).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("serve_forever must run in the main thread (it handles SIGINT/SIGTERM)")
    auth = auth if auth is not None else IngressAuth()
    check_bind(host, auth)
    chosen = _limits(limits, max_body_bytes)
    app = _app_for(store, clock, chosen, auth)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stopping.set)
        def ready(bound_port: int) -> None:
            if on_ready is not None:
                on_ready(_base_url(host, bound_port))

        try:
            await _serve(app, host, port, chosen, ready, stopping.wait)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    asyncio.run(main())


def describe_store(store: Any) -> str:
    """A one-line description of a journal store for logs: its kind and
    location, never a password."""
    from flink_agents.stores.memory_store import InMemoryJournalStore
    from flink_agents.stores.postgres_store import PostgresJournalStore
    from flink_agents.stores.sqlite_store import SQLiteJournalStore

    if isinstance(store, SQLiteJournalStore):
        return f"sqlite {store.path}"
    if isinstance(store, PostgresJournalStore):
        return repr(store)  # PostgresJournalStore(host=... port=... dbname=... user=...)
    if isinstance(store, InMemoryJournalStore):
        return "memory (this process only)"
    return type(store).__name__
