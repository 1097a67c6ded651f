"""The callback ingress as an aiohttp application: outside systems complete
durable callbacks over HTTP.

A run creates a callback (``ctx.create_callback``) and hands its two URLs to
an outside system; that system POSTs to one of them once, and the run, waiting
on the callback, gets the body. Routes:

``POST /callbacks/{callback_id}/resolve/{token}``
    The body (any bytes, any content type) becomes the callback's result;
    state ``resolved``. ``token`` is the callback's resolve token.
``POST /callbacks/{callback_id}/reject/{token}``
    The body becomes the reason; state ``rejected``; ``token`` is the
    callback's reject token.

Resolve and reject are separate capabilities: each route has its own token
(``stores.callbacks``), and a POST whose token is not that route's (the
other route's, a wrong one, or none) is answered 403 and changes nothing.
Without ``/{token}`` the routes serve only callbacks written by a release
before the tokens (``CallbackRecord.legacy``), whose URLs had none.
``GET /healthz``
    ``200 {"status": "ok"}`` while the process serves requests (liveness
    only: it does not touch the store).
``GET /metrics``
    The POST counters and the connection counters (``ingress.metrics``,
    the app's own ``prometheus_client`` registry) in the Prometheus text
    format, or OpenMetrics when the scraper's ``Accept`` asks for it.

Answers to the POSTs (JSON bodies):

- ``202 {"callback_id": ..., "state": "resolved"|"rejected"}``: the callback
  was pending and now holds the body. Sent only after the store's ``complete``
  has returned, and the store commits before it returns, so a 202 means the
  completion is stored as durably as the store keeps any write (SQLite with
  ``synchronous=FULL``, PostgreSQL: it survives a crash of either side).
- ``401 {"error": "authentication required"}`` (``WWW-Authenticate:
  Bearer``): the ingress requires a bearer token (``ingress.auth``) and the
  POST has none or another; nothing else was looked at.
- ``403 {"error": "the URL is not signed" | "the URL's signature does not
  match" | "the URL has expired"}``: the ingress requires signed URLs and
  this one is not validly signed, or is past its ``exp`` (the callback's
  deadline); no store call.
- ``403 {"error": "this URL does not grant this completion"}``: the token
  is not the route's (the callback is untouched, and a late POST with a
  wrong token is not counted on it).
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
- ``408 {"error": "body not received in time", "body_timeout_s": ...}``: the
  whole body did not arrive within ``body_timeout_s`` (default 30 s) of the
  end of the request's headers; the callback is untouched and the connection
  is closed right after the answer (no lingering for a client that slow).
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
import time
from typing import Callable, Optional

from aiohttp import web

from flink_agents.ingress.auth import IngressAuth
from flink_agents.ingress.metrics import OUTCOMES, CallbackMetrics
from flink_agents.ingress.options import BODY_TIMEOUT_S, MAX_BODY_BYTES, IngressLimits
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

# What a callback id may look like (the runtime makes URL-safe tokens). Anything
# else cannot name a callback, so it is refused before reaching the store.
CALLBACK_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
# The error of a 403: the URL does not grant what it asks (its token is of
# the other route, wrong, or missing).
FORBIDDEN = "this URL does not grant this completion"
# The JSON ``state`` of a 202 for each route's final state.
_ROUTE_STATES = {"resolve": RESOLVED, "reject": REJECTED}


METRICS_KEY = web.AppKey("callback_metrics", CallbackMetrics)


def make_app(
    store: CallbackStore,
    clock: Callable[[], float] = time.time,
    max_body_bytes: int = MAX_BODY_BYTES,
    *,
    body_timeout_s: float = BODY_TIMEOUT_S,
    auth: Optional[IngressAuth] = None,
) -> web.Application:
    """The callback ingress application (routes and answers: module docstring).

    Args:
        store: Where callbacks live; ``complete`` is called in a worker thread.
        clock: Current time in Unix seconds; stamps a completion
            (``completed_ms``). Inject a fake in tests.
        max_body_bytes: The largest POST body accepted, in bytes (default
            1 MiB); one byte more is answered 413.
        body_timeout_s: Seconds allowed to receive a whole POST body, from
            the end of its headers (default 30); over it, 408 and the
            connection is closed.
        auth: What a POST must present (bearer token, signed URL;
            ``ingress.auth``); default nothing. ``clock`` also decides
            whether a signed URL has expired.

    Returns:
        The application, not yet running (serve it with ``CallbackIngress``
        or any aiohttp runner). Its counters are ``app[METRICS_KEY]``.

    Raises:
        TypeError: ``store`` has no ``complete`` (not a ``CallbackStore``).
        ValueError: ``max_body_bytes`` or ``body_timeout_s`` out of range
            (the message names its ``callbacks.ingress.*`` key).
    """
    if not callable(getattr(store, "complete", None)):
        raise TypeError(f"{type(store).__name__} is not a CallbackStore (it has no complete())")
    IngressLimits(max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)  # validates both
    auth = auth if auth is not None else IngressAuth()
    metrics = CallbackMetrics()

    def refusal(request: web.Request) -> Optional[web.Response]:
        """The answer to a POST that does not authenticate (401: no or a
        wrong bearer token; 403: no or a bad URL signature, or expired), or
        None. Checked before anything else: the id, the body, the store."""
        if not auth.bearer_ok(request.headers.get("Authorization")):
            metrics.count("unauthorized")
            response = web.json_response(
                {"error": "authentication required"}, status=401,
                headers={"WWW-Authenticate": 'Bearer realm="flink-agents callbacks"'},
            )
        else:
            problem = auth.signature_problem(request.path, request.query_string, clock())
            if problem is None:
                return None
            metrics.count("forbidden")
            response = web.json_response({"error": problem}, status=403)
        response.force_close()  # whatever body follows is not wanted
        return response

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
        # refuse an unauthenticated POST or an oversized declared body here,
        # so the body is never transferred.
        refused = refusal(request)
        if refused is not None:
            return refused
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

    async def body_too_slow(request: web.Request) -> web.Response:
        metrics.count("body_timeout")
        response = web.json_response(
            {"error": "body not received in time", "body_timeout_s": body_timeout_s}, status=408
        )
        response.force_close()
        await response.prepare(request)
        await response.write_eof()
        # Close now (the answer is flushed first): aiohttp would otherwise keep
        # reading the rest of this slow body for its lingering time (10 s).
        request.protocol.force_close()
        return response

    def forbidden() -> web.Response:
        metrics.count("forbidden")
        return web.json_response({"error": FORBIDDEN}, status=403)

    def store_unavailable(what: str, callback_id: str) -> web.Response:
        metrics.count("store_errors")
        log.exception("callback store failed to %s callback %s...", what, callback_id[:6])
        return web.json_response({"error": "callback store unavailable"}, status=503)

    async def not_granted(request: web.Request, state: str) -> Optional[web.Response]:
        """The answer to a POST that may not complete its callback as
        ``state`` (malformed or unknown id: 404; a token not the route's:
        403; the store failing: 503), or None if it may. Decided before the
        body is read: only the route's own token (or, for a legacy row, the
        bare id) grants a completion."""
        callback_id = request.match_info["callback_id"]
        token = request.match_info.get("token")
        if not CALLBACK_ID_PATTERN.fullmatch(callback_id):
            metrics.count("unknown")
            return web.json_response({"error": "unknown callback"}, status=404)
        if token is not None and not CALLBACK_ID_PATTERN.fullmatch(token):
            return forbidden()
        try:
            found = await asyncio.to_thread(store.get_callback, callback_id)
        except Exception:
            return store_unavailable("read", callback_id)
        if found is None:
            metrics.count("unknown")
            return web.json_response({"error": "unknown callback"}, status=404)
        return None if found.grants(state, token) else forbidden()

    async def complete(request: web.Request, route: str) -> web.Response:
        state = _ROUTE_STATES[route]
        refused = refusal(request) or await not_granted(request, state)
        if refused is not None:
            return refused
        callback_id = request.match_info["callback_id"]
        try:
            body = await asyncio.wait_for(read_body(request), body_timeout_s)
        except asyncio.TimeoutError:
            return await body_too_slow(request)
        if body is None:
            return too_large()
        now_ms = int(clock() * 1000)
        try:
            result = await asyncio.to_thread(store.complete, callback_id, state, body, now_ms, count_late=True)
            outcome = result.outcome
            if outcome == FINISHED and result.record is None:
                raise RuntimeError("the store reported a finished callback without its record")
            if outcome not in (ACCEPTED, FINISHED, UNKNOWN):
                raise RuntimeError(f"the store returned an unknown outcome {outcome!r}")
        except Exception:
            return store_unavailable(route, callback_id)
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
        body, content_type = metrics.exposition(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application(client_max_size=max_body_bytes)
    app[METRICS_KEY] = metrics
    for suffix in ("", "/{token}"):  # without a token: legacy rows only
        app.router.add_post("/callbacks/{callback_id}/resolve" + suffix, resolve, expect_handler=expect)
        app.router.add_post("/callbacks/{callback_id}/reject" + suffix, reject, expect_handler=expect)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_page)
    return app
