"""The callback ingress as an aiohttp application: outside systems complete
durable callbacks over HTTP.

A run creates a callback (``ctx.create_callback``) and hands its two URLs to
an outside system; that system POSTs to one of them once, and the run, waiting
on the callback, gets the body. Routes:

``POST /callbacks/{callback_id}/resolve``
    The body (any bytes, any content type) becomes the callback's result;
    state ``resolved``.
``POST /callbacks/{callback_id}/reject``
    The body becomes the reason; state ``rejected``.
``GET /healthz``
    ``200 {"status": "ok"}`` while the process serves requests (liveness
    only: it does not touch the store).
``GET /metrics``
    The POST counters in the Prometheus text format (``text/plain;
    version=0.0.4``).

Answers to the POSTs (JSON bodies):

- ``202 {"callback_id": ..., "state": "resolved"|"rejected"}``: the callback
  was pending and now holds the body. Sent only after the store's ``complete``
  has returned, and the store commits before it returns, so a 202 means the
  completion is stored as durably as the store keeps any write (SQLite with
  ``synchronous=FULL``, PostgreSQL: it survives a crash of either side).
- ``404 {"error": "unknown callback"}``: no such callback (never created,
  pruned, or an id that cannot be one: ids must match ``CALLBACK_ID_PATTERN``,
  and a malformed one is refused without a store call).
- ``404 {"error": "callback is no longer pending", "state": ...}``: a late
  completion. The callback already left ``pending`` (resolved, rejected, timed
  out, cancelled or closed; ``state`` is the one that won); nothing changes
  but the callback's late counter. 404 rather than 409 because for the sender
  the URL is as dead as an unknown one, and retrying never helps.
- ``413 {"error": "body too large", "max_body_bytes": ...}``: the body is
  over ``max_body_bytes`` (default 1 MiB = 1,048,576 bytes); the callback is
  untouched.
- ``503 {"error": "callback store unavailable"}``: the store raised; the
  traceback is logged (with the id shortened: the id is the capability) and
  the callback is as the store left it. Retrying is safe: a callback is
  completed at most once (if the failed call did commit, the retry gets the
  late 404 with that state).
- ``405``: another method on a POST route (aiohttp's own answer).

Body size: a declared ``Content-Length`` over the limit is answered 413
before any of the body is read (and, when the client sent ``Expect:
100-continue``, before it sends the body at all); a body without one
(``Transfer-Encoding: chunked``) is read in pieces of at most the bytes still
allowed plus one, and answered 413 as soon as it passes the limit, so the
handler never holds more than ``max_body_bytes + 1`` bytes. A 413 closes the
connection; before closing, aiohttp reads and discards whatever the client is
still sending for at most its lingering time (10 s), so the client gets the
413 instead of a connection reset, and none of it is kept. The application's
``client_max_size`` is set to the same limit for anything that reads the body
through aiohttp's own ``request.read()``. A ``Content-Encoding`` (gzip,
deflate) is decoded by aiohttp first: the limit and the stored body are the
decoded bytes.

The store is blocking (SQLite, PostgreSQL), so each ``complete`` runs in a
worker thread (``asyncio.to_thread``) and the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from typing import Callable, Dict, Optional

from aiohttp import web

from flink_agents.stores.callbacks import (
    ACCEPTED,
    FINISHED,
    REJECTED,
    RESOLVED,
    UNKNOWN,
    CallbackStore,
)

__all__ = [
    "CALLBACK_ID_PATTERN",
    "CallbackMetrics",
    "MAX_BODY_BYTES",
    "METRICS_KEY",
    "OUTCOMES",
    "make_app",
]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024  # 1 MiB, the default limit of a POST body
# What a callback id may look like (the runtime makes URL-safe tokens). Anything
# else cannot name a callback, so it is refused before reaching the store.
CALLBACK_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
# The outcomes of a resolve/reject POST, as counted (label ``outcome``).
# ``unknown`` includes malformed ids; ``late`` is a POST on a finished callback.
OUTCOMES = ("accepted", "unknown", "late", "too_large", "store_errors")
_METRIC = "flink_agents_callback_posts_total"
_PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The JSON ``state`` of a 202 for each route's final state.
_ROUTE_STATES = {"resolve": RESOLVED, "reject": REJECTED}


class CallbackMetrics:
    """Process-wide counters of resolve/reject POSTs, one per ``OUTCOMES`` entry.

    Thread-safe: handlers count on the event loop, tests and ``/metrics``
    read from anywhere.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = {outcome: 0 for outcome in OUTCOMES}

    def count(self, outcome: str) -> None:
        """Add one POST with ``outcome`` (one of ``OUTCOMES``)."""
        if outcome not in self._counts:
            raise ValueError(f"unknown outcome {outcome!r}; expected one of {OUTCOMES}")
        with self._lock:
            self._counts[outcome] += 1

    def snapshot(self) -> Dict[str, int]:
        """The counts so far, by outcome."""
        with self._lock:
            return dict(self._counts)

    def render(self) -> str:
        """The counters in the Prometheus text exposition format (one counter
        family, label ``outcome``), ending with a newline."""
        lines = [
            f"# HELP {_METRIC} Callback resolve/reject POSTs answered by the ingress, by outcome.",
            f"# TYPE {_METRIC} counter",
        ]
        lines += [f'{_METRIC}{{outcome="{outcome}"}} {count}' for outcome, count in self.snapshot().items()]
        return "\n".join(lines) + "\n"


METRICS_KEY = web.AppKey("callback_metrics", CallbackMetrics)


def make_app(
    store: CallbackStore,
    clock: Callable[[], float] = time.time,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> web.Application:
    """The callback ingress application (routes and answers: module docstring).

    Args:
        store: Where callbacks live; ``complete`` is called in a worker thread.
        clock: Current time in Unix seconds; stamps a completion
            (``completed_ms``). Inject a fake in tests.
        max_body_bytes: The largest POST body accepted, in bytes (default
            1 MiB); one byte more is answered 413.

    Returns:
        The application, not yet running (serve it with ``CallbackIngress``
        or any aiohttp runner). Its counters are ``app[METRICS_KEY]``.

    Raises:
        TypeError: ``store`` has no ``complete`` (not a ``CallbackStore``).
        ValueError: ``max_body_bytes`` is not a positive integer.
    """
    if not callable(getattr(store, "complete", None)):
        raise TypeError(f"{type(store).__name__} is not a CallbackStore (it has no complete())")
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes <= 0:
        raise ValueError(f"max_body_bytes must be a positive integer, got {max_body_bytes!r}")
    metrics = CallbackMetrics()

    def too_large() -> web.Response:
        metrics.count("too_large")
        response = web.json_response(
            {"error": "body too large", "max_body_bytes": max_body_bytes}, status=413
        )
        # The client may still be sending; do not keep the connection for
        # another request (aiohttp drains what is left for a bounded time, so
        # the client can read this answer before the socket closes).
        response.force_close()
        return response

    async def expect(request: web.Request) -> Optional[web.StreamResponse]:
        # Called for "Expect: 100-continue" before the client sends the body:
        # refuse an oversized declared body here, so it is never transferred.
        if request.content_length is not None and request.content_length > max_body_bytes:
            return too_large()
        if request.headers.get("Expect", "").lower() != "100-continue":
            raise web.HTTPExpectationFailed(text=f"unsupported Expect: {request.headers.get('Expect')}")
        if request.version >= (1, 1):
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return None

    async def read_body(request: web.Request) -> Optional[bytes]:
        """The whole body, or None as soon as it is known to exceed the limit."""
        if request.content_length is not None and request.content_length > max_body_bytes:
            return None
        body = bytearray()
        while True:
            # Never ask for more than one byte past the limit.
            piece = await request.content.read(max_body_bytes + 1 - len(body))
            if not piece:
                return bytes(body)
            body += piece
            if len(body) > max_body_bytes:
                return None

    async def complete(request: web.Request, route: str) -> web.Response:
        callback_id = request.match_info["callback_id"]
        if not CALLBACK_ID_PATTERN.fullmatch(callback_id):
            metrics.count("unknown")
            return web.json_response({"error": "unknown callback"}, status=404)
        body = await read_body(request)
        if body is None:
            return too_large()
        state = _ROUTE_STATES[route]
        now_ms = int(clock() * 1000)
        try:
            result = await asyncio.to_thread(store.complete, callback_id, state, body, now_ms, count_late=True)
            outcome = result.outcome
            if outcome == FINISHED and result.record is None:
                raise RuntimeError("the store reported a finished callback without its record")
            if outcome not in (ACCEPTED, FINISHED, UNKNOWN):
                raise RuntimeError(f"the store returned an unknown outcome {outcome!r}")
        except Exception:
            metrics.count("store_errors")
            log.exception("callback store failed to %s callback %s...", route, callback_id[:6])
            return web.json_response({"error": "callback store unavailable"}, status=503)
        if outcome == ACCEPTED:
            metrics.count("accepted")
            return web.json_response({"callback_id": callback_id, "state": state}, status=202)
        if outcome == FINISHED:
            metrics.count("late")
            return web.json_response(
                {"error": "callback is no longer pending", "state": result.record.state}, status=404
            )
        metrics.count("unknown")
        return web.json_response({"error": "unknown callback"}, status=404)

    async def resolve(request: web.Request) -> web.Response:
        return await complete(request, "resolve")

    async def reject(request: web.Request) -> web.Response:
        return await complete(request, "reject")

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def metrics_page(request: web.Request) -> web.Response:
        return web.Response(
            body=metrics.render().encode("utf-8"), headers={"Content-Type": _PROMETHEUS_CONTENT_TYPE}
        )

    app = web.Application(client_max_size=max_body_bytes)
    app[METRICS_KEY] = metrics
    app.router.add_post("/callbacks/{callback_id}/resolve", resolve, expect_handler=expect)
    app.router.add_post("/callbacks/{callback_id}/reject", reject, expect_handler=expect)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_page)
    return app
