"""The one fixture style of every scripted provider server in the tests.

A scripted server speaks one provider's HTTP protocol on 127.0.0.1 (an
ephemeral port), so that the provider's real SDK client is tested end to
end. A subclass (one per dialect) gives:

* ``routes``: ``{(method, path regex): handler name}``; a handler is
  ``handler(exchange, index) -> (status, body)``;
* ``check(exchange) -> [problem, ...]``: what in the request the provider's
  public API reference does not allow (a missing header, an unknown field, a
  wrong shape). A request with problems is answered with ``reject_status``
  and the provider's error body (``error_body``), and the problems are kept
  in ``violations``: leaving the ``with`` block raises ``AssertionError``
  listing them, so a test fails when the SDK sends something the reference
  does not allow, even if the SDK then retried or the agent swallowed it.

Each request takes the next index (rejected ones too) and is answered by
the script: ``replies[index]`` (a dialect-neutral reply the handler turns
into the provider's body, or a ``ScriptedError`` to answer with an error), or
``reply_fn(request_json, index)`` if set. Past the script's end the answer
is a 500 naming the index.

Concurrency tests use ``latency_s``, ``hold_until_in_flight`` and ``spans``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

__all__ = ["Exchange", "ScriptExhausted", "ScriptedError", "ScriptedServer"]

ReplyFn = Callable[[dict, int], Any]


@dataclass(frozen=True)
class ScriptedError:
    """A scripted error response: ``status`` with the dialect's error body
    for ``message`` (or ``body`` as given), optional extra ``headers``."""

    status: int
    message: str = "scripted error"
    body: Optional[dict] = None
    headers: Dict[str, str] = field(default_factory=dict)


@dataclass
class Exchange:
    """One request as received: method, path, query (lists of values),
    headers (lower-case names), and the JSON body (None if none)."""

    method: str
    path: str
    query: Dict[str, List[str]]
    headers: Dict[str, str]
    json: Any


class ScriptExhausted(Exception):
    """The script holds no reply for a request."""


class _Handler(BaseHTTPRequestHandler):
    server: "_HTTPServer"
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm on,
    # the client's delayed ACK then adds ~40 ms to every keep-alive reply.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return  # keep test output clean

    def _send(self, status: int, body: Any, headers: Dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _serve(self, method: str) -> None:
        owner = self.server.owner
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if len(raw) < length:
            # The client went away mid-request (a run cancelled when another
            # failed the job): nothing was asked, nothing to answer or check.
            self.close_connection = True
            return
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._send(400, owner.error_body(400, f"request body is not valid JSON: {exc}"))
            owner.violations.append(f"{method} {parts.path}: body is not JSON")
            return
        exchange = Exchange(
            method=method, path=parts.path, query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()}, json=body,
        )
        handler = owner.route(method, parts.path)
        if handler is None:
            self._send(404, owner.error_body(404, f"no route for {method} {parts.path}"))
            owner.violations.append(f"{method} {parts.path}: no such route in the reference")
            return
        if handler in owner.unscripted:  # e.g. a model list: neither scripted nor counted
            self._send(*getattr(owner, handler)(exchange, None, -1))
            return
        index = owner._record(exchange)
        problems = owner.check(exchange)
        if problems:
            owner.violations.extend(f"request #{index} {method} {parts.path}: {p}" for p in problems)
            self._send(owner.reject_status, owner.error_body(owner.reject_status, "; ".join(problems)))
            return
        owner._enter()
        try:
            if owner.latency_s > 0:
                time.sleep(owner.latency_s)
        finally:
            owner._leave()
        try:
            reply = owner._reply_for(exchange, index)
        except ScriptExhausted:
            self._send(500, owner.error_body(500, f"scripted server has no reply for request #{index} "
                                                  f"(script holds {len(owner.replies)} replies)"))
            return
        except Exception as exc:  # a failing reply_fn fails the request loudly
            self._send(500, owner.error_body(500, f"reply_fn failed for request #{index}: {exc!r}"))
            return
        if isinstance(reply, ScriptedError):
            body = reply.body if reply.body is not None else owner.error_body(reply.status, reply.message)
            self._send(reply.status, body, reply.headers)
            return
        status, answer = getattr(owner, handler)(exchange, reply, index)
        self._send(status, answer)

    def do_GET(self) -> None:  # noqa: N802
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The default listen backlog (5) resets connections when dozens of
    # concurrent runs connect at once.
    request_queue_size = 256
    owner: "ScriptedServer"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (a timeout test) leaves a broken pipe: not
        an error of the server. Anything else is printed, as by default."""
        import sys

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class ScriptedServer:
    """Base of the scripted provider servers (see the module docstring)."""

    #: ``{(method, path regex): handler method name}``; handlers take
    #: ``(exchange, reply, index)`` and return ``(status, body)``.
    routes: Dict[Tuple[str, str], str] = {}
    #: Handlers that answer without taking a script entry or an index.
    unscripted: frozenset = frozenset()
    #: The status a request that breaks the reference gets.
    reject_status = 400

    def __init__(self, replies: list | None = None, latency_s: float = 0.0) -> None:
        self.replies: list = list(replies or [])
        self.latency_s = latency_s
        self.requests: List[Any] = []  # the JSON bodies, in arrival order
        self.exchanges: List[Exchange] = []  # the whole requests
        self.violations: List[str] = []
        self._reply_fn: ReplyFn | None = None
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.host = "127.0.0.1"
        self.port: int | None = None
        self._compiled = [(m, re.compile(p + r"/?\Z"), h) for (m, p), h in self.routes.items()]
        # Requests inside their latency sleep now, the most at once, and the
        # (start, end) monotonic times of each: what concurrency tests assert.
        self.in_flight = 0
        self.max_in_flight = 0
        self.spans: List[Tuple[float, float]] = []
        self._span_starts = threading.local()
        self._in_flight_changed = threading.Condition(self._lock)
        self._hold_until = 0
        self._hold_timeout_s = 30.0
        self.hold_timed_out = False

    # -- what a dialect gives ---------------------------------------------------------
    def check(self, exchange: Exchange) -> List[str]:
        """Problems of the request against the provider's reference (none by default)."""
        return []

    def error_body(self, status: int, message: str) -> dict:
        """The provider's error body for ``status`` (OpenAI's shape by default)."""
        return {"error": {"message": message, "type": "scripted_error", "code": status}}

    def route(self, method: str, path: str) -> str | None:
        for route_method, pattern, handler in self._compiled:
            if route_method == method and pattern.match(path):
                return handler
        return None

    # -- configuration ------------------------------------------------------------------
    def set_reply_fn(self, reply_fn: ReplyFn | None) -> None:
        """Answer each request with ``reply_fn(request_json, index)``; while set,
        it takes precedence over ``replies``."""
        with self._lock:
            self._reply_fn = reply_fn

    def hold_until_in_flight(self, count: int, timeout_s: float = 30.0) -> "ScriptedServer":
        """Hold every request (before its latency) until ``count`` requests
        were in flight at once; from then on let every request through.

        Overlap becomes a count instead of a clock: requests sent one after
        another never reach ``count``; the first one is then let through after
        ``timeout_s``, ``hold_timed_out`` turns true, and ``max_in_flight``
        stays below ``count``.
        """
        with self._in_flight_changed:
            self._hold_until = count
            self._hold_timeout_s = timeout_s
            self.hold_timed_out = False
        return self

    @property
    def root_url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:PORT``."""
        if self.port is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://{self.host}:{self.port}"

    # -- used by the handler ----------------------------------------------------------
    def _record(self, exchange: Exchange) -> int:
        with self._lock:
            self.exchanges.append(exchange)
            self.requests.append(exchange.json)
            return len(self.requests) - 1

    def _enter(self) -> None:
        self._span_starts.value = time.monotonic()
        with self._in_flight_changed:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if not self._hold_until:
                return
            self._in_flight_changed.notify_all()
            opened = self._in_flight_changed.wait_for(
                lambda: not self._hold_until or self.max_in_flight >= self._hold_until, timeout=self._hold_timeout_s
            )
            if not opened:
                self.hold_timed_out = True
            self._hold_until = 0  # open for good
            self._in_flight_changed.notify_all()

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self.spans.append((self._span_starts.value, time.monotonic()))

    def _reply_for(self, exchange: Exchange, index: int) -> Any:
        with self._lock:
            fn = self._reply_fn
            if fn is None:
                if index >= len(self.replies):
                    raise ScriptExhausted()
                return self.replies[index]
        return fn(exchange.json, index)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> "ScriptedServer":
        if self._httpd is not None:
            return self
        httpd = _HTTPServer((self.host, 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}-{self.port}", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def assert_no_violations(self) -> None:
        """Raise ``AssertionError`` listing what the SDK sent that the
        provider's reference does not allow."""
        if self.violations:
            raise AssertionError(f"{type(self).__name__}: requests break the provider's API reference:\n  "
                                 + "\n  ".join(self.violations))

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.stop()
        if exc_type is None:
            self.assert_no_violations()
