"""A scripted chat-model HTTP server for tests.

Speaks two dialects on 127.0.0.1 (ephemeral port), each request answered from
a script of replies:

* OpenAI: ``POST /v1/chat/completions`` returns a ``chat.completion`` object.
* Ollama: ``POST /api/chat`` returns a non-streaming chat response.

A reply is an OpenAI chat ``message`` dict, e.g. ``{"role": "assistant",
"content": "hi"}`` or one carrying ``tool_calls``. Replies are served in order,
one per request (both dialects share the script and the request counter). Once
the script is exhausted the server answers 500 with a JSON error naming the
request index. Every request received takes the next index, including one
rejected with 400 (e.g. ``"stream": true``). Instead of a list, a callable ``reply_fn(request_json, index)``
can produce each reply (see :meth:`ScriptedChatServer.set_reply_fn`).
"""
from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

ReplyFn = Callable[[dict, int], dict]


def _count_tokens(value: Any) -> int:
    """A crude, deterministic token estimate: whitespace-separated words."""
    if value is None:
        return 0
    if not isinstance(value, str):
        value = json.dumps(value, sort_keys=True)
    return len(value.split())


class _ScriptExhausted(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm on,
    # the client's delayed ACK then adds ~40 ms to every keep-alive reply.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return  # keep test output clean

    # -- plumbing -------------------------------------------------------------
    def _send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, err_type: str) -> None:
        self._send_json(
            status, {"error": {"message": message, "type": err_type, "code": status}}
        )

    def _read_json(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw.decode("utf-8") or "null")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._error(400, f"request body is not valid JSON: {exc}", "invalid_request_error")
            return None
        if not isinstance(body, dict):
            self._error(400, "request body must be a JSON object", "invalid_request_error")
            return None
        return body

    # -- routes ---------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/models":
            self._send_json(
                200, {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "tests"}]}
            )
        else:
            self._error(404, f"no route for GET {self.path}", "not_found")

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/api/chat"):
            self._error(404, f"no route for POST {self.path}", "not_found")
            return
        body = self._read_json()
        if body is None:
            return
        owner = self.server.owner
        index = owner._record(body)
        ollama = path == "/api/chat"
        if not ollama and body.get("stream"):
            self._error(
                400,
                "streaming is not supported by the scripted server; send stream=false",
                "invalid_request_error",
            )
            return
        owner._enter()
        try:
            if owner.latency_s > 0:
                time.sleep(owner.latency_s)
        finally:
            owner._leave()
        try:
            message = owner._reply_for(body, index)
        except _ScriptExhausted:
            self._error(
                500,
                f"scripted server has no reply for request #{index} "
                f"(script holds {len(owner.replies)} replies)",
                "script_exhausted",
            )
            return
        except Exception as exc:  # a failing reply_fn should fail the request loudly
            self._error(500, f"reply_fn failed for request #{index}: {exc!r}", "reply_fn_error")
            return
        if ollama:
            self._send_json(200, _ollama_response(body, message))
        else:
            self._send_json(200, _openai_response(body, message, index))


def _openai_response(request: dict, message: dict, index: int) -> dict:
    message = copy.deepcopy(message)
    message.setdefault("role", "assistant")
    message.setdefault("content", None)
    tool_calls = message.get("tool_calls")
    if tool_calls:
        for n, call in enumerate(tool_calls):
            call.setdefault("id", f"call_{index}_{n}")
            call.setdefault("type", "function")
            fn = call.setdefault("function", {})
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments") or {})
    else:
        message.pop("tool_calls", None)
    prompt_tokens = sum(_count_tokens(m.get("content")) for m in request.get("messages") or [])
    completion_tokens = _count_tokens(message.get("content")) + _count_tokens(tool_calls)
    return {
        "id": f"chatcmpl-scripted-{index}-{uuid.uuid4().hex[:8]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or "scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _ollama_response(request: dict, message: dict) -> dict:
    out: dict[str, Any] = {
        "role": message.get("role") or "assistant",
        "content": message.get("content") or "",
    }
    tool_calls = message.get("tool_calls")
    if tool_calls:
        converted = []
        for call in tool_calls:
            fn = call.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                args = json.loads(args) if args.strip() else {}
            converted.append({"function": {"name": fn.get("name"), "arguments": args or {}}})
        out["tool_calls"] = converted
    prompt_tokens = sum(_count_tokens(m.get("content")) for m in request.get("messages") or [])
    eval_tokens = _count_tokens(out["content"]) + _count_tokens(tool_calls)
    return {
        "model": request.get("model") or "scripted",
        "created_at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
        "message": out,
        "done": True,
        "done_reason": "stop",
        "total_duration": 0,
        "load_duration": 0,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": 0,
        "eval_count": eval_tokens,
        "eval_duration": 0,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The default listen backlog (5) resets connections when dozens of
    # concurrent runs connect at once.
    request_queue_size = 256
    owner: "ScriptedChatServer"


class ScriptedChatServer:
    """OpenAI- and Ollama-compatible chat server answering from a script."""

    def __init__(self, replies: list[dict] | None = None, latency_s: float = 0.0):
        self.replies: list[dict] = list(replies or [])
        self.latency_s = latency_s
        self.requests: list[dict] = []
        self._reply_fn: ReplyFn | None = None
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.host = "127.0.0.1"
        self.port: int | None = None
        # Requests inside their latency sleep now, the most at once, and the
        # (start, end) monotonic times of each: what concurrency tests assert.
        self.in_flight = 0
        self.max_in_flight = 0
        self.spans: list[tuple[float, float]] = []
        self._span_starts = threading.local()
        # hold_until_in_flight: requests wait until this many were in flight.
        self._in_flight_changed = threading.Condition(self._lock)
        self._hold_until = 0
        self._hold_timeout_s = 30.0
        self.hold_timed_out = False

    # -- configuration ----------------------------------------------------------
    def set_reply_fn(self, reply_fn: ReplyFn | None) -> None:
        """Answer each request with ``reply_fn(request_json, index)``.

        While set, it takes precedence over the ``replies`` list.
        """
        with self._lock:
            self._reply_fn = reply_fn

    def hold_until_in_flight(self, count: int, timeout_s: float = 30.0) -> "ScriptedChatServer":
        """Hold every request (before its latency) until ``count`` requests
        were in flight at once; from then on let every request through.

        Overlap becomes a count instead of a clock: requests sent one after
        another never reach ``count``; the first one is then let through after
        ``timeout_s``, ``hold_timed_out`` turns true, and ``max_in_flight``
        stays below ``count``.

        Returns:
            The server (for chaining).
        """
        with self._in_flight_changed:
            self._hold_until = count
            self._hold_timeout_s = timeout_s
            self.hold_timed_out = False
        return self

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"{self.root_url}/v1"

    @property
    def root_url(self) -> str:
        """Server root, e.g. ``http://127.0.0.1:PORT`` (Ollama clients use this)."""
        if self.port is None:
            raise RuntimeError("ScriptedChatServer is not started")
        return f"http://{self.host}:{self.port}"

    # -- used by the handler ------------------------------------------------------
    def _record(self, body: dict) -> int:
        with self._lock:
            self.requests.append(body)
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

    def _reply_for(self, body: dict, index: int) -> dict:
        with self._lock:
            fn = self._reply_fn
            if fn is None:
                if index >= len(self.replies):
                    raise _ScriptExhausted()
                return self.replies[index]
        return fn(body, index)

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> "ScriptedChatServer":
        if self._httpd is not None:
            return self
        httpd = _Server((self.host, 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-chat-server-{self.port}",
            daemon=True,
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

    def __enter__(self) -> "ScriptedChatServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
