"""An OpenAI-compatible chat server that enforces a request rate, for the
rate-limit tests and ``tools/bench/rate_limits.py``.

``RateLimitedChatServer(per_minute, latency_s)`` listens on 127.0.0.1
(ephemeral port) and answers ``POST /v1/chat/completions`` as a provider
with a quota would: at most ``per_minute`` requests in any 60 s, metered
over 10 s (at most ``per_minute / 6`` in any 10 s, as providers meter a
per-minute quota over shorter intervals); a request beyond it is answered
429 with ``Retry-After`` (whole seconds) and ``retry-after-ms`` (when the
oldest counted request leaves the window), an OpenAI error body, and is
not counted. An admitted request is answered after ``latency_s`` with
``reply(request_json)`` (default: a review analysis for the review job).

``window_s`` shrinks the metering interval for fast tests: at most
``per_minute // 6`` requests in any ``window_s`` and ``per_minute`` in any
``6 * window_s`` (the minute shrinks with it).

``GET /stats`` (and ``stats()``): ``{"answered": [arrival times, monotonic
s], "refused": n}``; ``answered_contents`` pairs each answered request's
arrival time with its last message's content, to tell callers apart.
"""

from __future__ import annotations

import bisect
import collections
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Deque, Dict, List, Optional


def most_in_any_window(times: List[float], window_s: float) -> int:
    """The most of ``times`` (seconds, any order) in any half-open window
    of ``window_s`` seconds: a rate limit's measure."""
    ordered = sorted(times)
    return max((bisect.bisect_left(ordered, t + window_s) - i for i, t in enumerate(ordered)), default=0)


def review_answer(request: Dict[str, Any]) -> str:
    """A valid ``ReviewAnalysis`` for the review job's request."""
    try:
        review = json.loads(request["messages"][-1]["content"])["review"]
    except (KeyError, ValueError, TypeError, IndexError):
        review = ""
    return json.dumps({"score": 1 + len(review) % 5, "reasons": ["scripted"]})


def _last_content(request: Dict[str, Any]) -> str:
    try:
        return str(request["messages"][-1]["content"])
    except (KeyError, TypeError, IndexError):
        return ""


class RateLimitedChatServer:
    """See the module docstring. A context manager; ``base_url`` ends in ``/v1``."""

    def __init__(self, per_minute: int = 600, latency_s: float = 0.05,
                 reply: Callable[[Dict[str, Any]], str] = review_answer, window_s: float = 10.0) -> None:
        self.per_minute = per_minute
        self.window_s = window_s
        self.latency_s = latency_s
        self.reply = reply
        self._lock = threading.Lock()
        self._minute: Deque[float] = collections.deque()
        self._ten: Deque[float] = collections.deque()
        self.answered: list[float] = []
        self.answered_contents: list[tuple[float, str]] = []
        self.refused = 0
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def admit(self, now: float, content: str = "") -> Optional[float]:
        """None: counted and admitted; else the seconds until it would be.
        ``content``: the request's last message, kept with an admitted one."""
        with self._lock:
            short, minute = self.window_s, 6 * self.window_s
            for window, span in ((self._minute, minute), (self._ten, short)):
                while window and window[0] <= now - span:
                    window.popleft()
            waits = []
            if len(self._minute) >= self.per_minute:
                waits.append(self._minute[0] + minute - now)
            if len(self._ten) >= max(1, self.per_minute // 6):
                waits.append(self._ten[0] + short - now)
            if waits:
                self.refused += 1
                return max(waits)
            self._minute.append(now)
            self._ten.append(now)
            self.answered.append(now)
            self.answered_contents.append((now, content))
            return None

    def stats(self) -> Dict[str, Any]:
        with self._lock:
            return {"answered": list(self.answered), "refused": self.refused}

    def __enter__(self) -> "RateLimitedChatServer":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Dict[str, Any], headers: Dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/stats"):
                    self._send(200, owner.stats())
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                wait_s = owner.admit(time.monotonic(), _last_content(request))
                if wait_s is not None:
                    self._send(429, {"error": {"message": "Rate limit reached for requests", "type": "requests",
                                               "code": "rate_limit_exceeded"}},
                               {"Retry-After": str(max(1, math.ceil(wait_s))),
                                "retry-after-ms": str(max(1, int(wait_s * 1000)))})
                    return
                time.sleep(owner.latency_s)
                content = owner.reply(request)
                self._send(200, {
                    "id": "chatcmpl-rl", "object": "chat.completion", "created": int(time.time()),
                    "model": request.get("model", "scripted"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
                })

        class Server(ThreadingHTTPServer):
            # A burst of connections beyond the listen backlog (5 by default)
            # would reach the server a SYN retransmission (1 s) late, and
            # count in a later window than the client's limiter saw it in.
            request_queue_size = 128

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="rate-limited-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
