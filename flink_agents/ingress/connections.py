"""Connection limits of the callback ingress: how many connections it holds,
and how long a request's head may take to arrive.

aiohttp bounds what a request may contain and how long a kept-alive
connection may idle (``keepalive_timeout``), but neither how many
connections are open nor how slowly a request line and headers may arrive: a
client sending a header byte now and then, or a thousand clients connecting
and sending nothing, would hold sockets (and file descriptors) forever.
``ConnectionGuard`` closes both gaps at the asyncio transport level. Its
protocol factory wraps the one aiohttp's ``Server`` is (``runner.server``):
each accepted connection is either admitted, and then handled by aiohttp's
own protocol behind a thin pass-through, or refused.

- **Connection limit.** A connection accepted while ``max_connections`` are
  open gets a fixed ``503`` answer and is closed at once, without reading from
  it; aiohttp never sees it. The ones already open are not touched. Counted as
  ``refused`` in ``/metrics``; admitted ones as ``accepted``, and the gauge of
  open ones goes up and down with them.
- **Header timeout.** A connection's first request must have its line and
  headers in within ``header_timeout_s`` of the connection being accepted; a
  later one within ``header_timeout_s`` of its first byte. The clock stops when
  aiohttp hands the request to the application (``middleware``). A connection
  over it is closed without an answer (the client may not even have sent a
  request line; HTTP servers conventionally close here) and counted in
  ``flink_agents_callback_header_timeouts_total``.

Between requests the idle timeout is aiohttp's (``keepalive_timeout``). When
the application answers before reading a body (a 413, an id that cannot be
one), aiohttp drains the rest for at most its lingering time (10 s); the head
of a request that follows on that connection is then bounded by aiohttp's
keep-alive timer only (it closes a connection whose next head is incomplete
when the idle timeout runs out).

Everything here runs on the ingress's event loop; nothing is thread-safe.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from typing import Awaitable, Callable, Dict, Optional, cast

from aiohttp import web

from flink_agents.ingress.callback_app import CallbackMetrics

__all__ = ["ConnectionGuard", "REFUSED_ANSWER"]

log = logging.getLogger(__name__)

_REFUSED_BODY = json.dumps({"error": "too many connections"}).encode("ascii")
# What a connection over the limit gets before it is closed (no request read).
REFUSED_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(len(_REFUSED_BODY)).encode("ascii") + b"\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"\r\n" + _REFUSED_BODY
)


class _Phase(enum.Enum):
    HEAD = "head"  # a request's head is arriving: the header clock runs
    IN_APP = "in_app"  # the application is handling a request
    IDLE = "idle"  # between requests, no byte of the next one yet
    DRAINING = "draining"  # answered before its body was read; aiohttp drains it


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ConnectionGuard:
    """Admits at most ``max_connections`` connections and closes those whose
    request head is late (module docstring).

    Args:
        metrics: Where connections are counted (``accepted``, ``refused``,
            ``open``, ``header_timeouts``).
        max_connections: Connections open at once.
        header_timeout_s: Seconds allowed for a request's line and headers.

    Use: serve ``protocol_factory(runner.server)`` with
    ``loop.create_server`` and add ``middleware`` to the application before
    it starts (``server._serve`` does both).
    """

    def __init__(self, metrics: CallbackMetrics, *, max_connections: int, header_timeout_s: float) -> None:
        self._metrics = metrics
        self._max_connections = max_connections
        self._header_timeout_s = header_timeout_s
        self._open: Dict[asyncio.BaseTransport, _GuardedConnection] = {}
        self.middleware = self._make_middleware()

    def protocol_factory(self, make_protocol: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` that guards the
        protocols ``make_protocol`` makes (aiohttp's ``runner.server``). The
        wrapped protocol is made only for an admitted connection."""

        def factory() -> asyncio.Protocol:
            return _GuardedConnection(self, make_protocol)

        return factory

    def _make_middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        @web.middleware
        async def track_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
            # The request's head is complete: stop its clock. Unknown when the
            # application is served some other way (then nothing is guarded).
            connection = self._open.get(request.transport) if request.transport is not None else None
            if connection is not None:
                connection.request_started()
            try:
                return await handler(request)
            finally:
                if connection is not None:
                    connection.request_finished(body_read=request.content.at_eof())

        return track_requests

    def _admit(self, connection: "_GuardedConnection", transport: asyncio.BaseTransport) -> bool:
        if len(self._open) >= self._max_connections:
            self._metrics.connection_refused()
            return False
        self._open[transport] = connection
        self._metrics.connection_opened()
        return True

    def _release(self, transport: asyncio.BaseTransport) -> None:
        if self._open.pop(transport, None) is not None:
            self._metrics.connection_closed()


class _GuardedConnection(asyncio.Protocol):
    """One accepted connection: refused, or aiohttp's protocol behind a
    pass-through that runs the header clock."""

    def __init__(self, guard: ConnectionGuard, make_inner: Callable[[], asyncio.Protocol]) -> None:
        self._guard = guard
        self._make_inner = make_inner
        self._inner: Optional[asyncio.Protocol] = None
        self._transport: Optional[asyncio.Transport] = None
        self._phase = _Phase.HEAD
        self._timer: Optional[asyncio.TimerHandle] = None

    # --- asyncio.Protocol, passed through to aiohttp's protocol ------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if not self._guard._admit(self, transport):
            # No request is read: the answer goes out first, then the close.
            self._transport.write(REFUSED_ANSWER)
            self._transport.close()
            return
        self._inner = self._make_inner()
        self._start_head_clock()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:  # refused: closing, nothing is read
            return
        if self._phase is _Phase.IDLE:
            self._phase = _Phase.HEAD
            self._start_head_clock()
        self._inner.data_received(data)

    def eof_received(self) -> Optional[bool]:
        if self._inner is None:
            return None
        return self._inner.eof_received()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._stop_head_clock()
        if self._inner is None:
            return
        if self._transport is not None:
            self._guard._release(self._transport)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    # --- the request's phases, reported by the middleware -------------------------------

    def request_started(self) -> None:
        self._stop_head_clock()
        self._phase = _Phase.IN_APP

    def request_finished(self, *, body_read: bool) -> None:
        self._phase = _Phase.IDLE if body_read else _Phase.DRAINING

    # --- the header clock ----------------------------------------------------------------

    def _start_head_clock(self) -> None:
        self._stop_head_clock()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._guard._header_timeout_s, self._head_overdue)

    def _stop_head_clock(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_overdue(self) -> None:
        self._timer = None
        transport = self._transport
        if self._phase is not _Phase.HEAD or transport is None or transport.is_closing():
            return
        self._guard._metrics.header_timed_out()
        # Not a warning per connection: a flood of slow clients must not
        # flood the log too. The counter is the signal.
        log.debug(
            "closing a connection from %s: request head not complete within %s s",
            transport.get_extra_info("peername"),
            self._guard._header_timeout_s,
        )
        transport.close()
