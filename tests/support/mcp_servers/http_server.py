"""The test MCP server over streamable HTTP on 127.0.0.1, in a thread.

``McpHttpServer(token=..., with_prompts=..., call_log=...)`` as a context
manager: ``url`` is the endpoint (``http://127.0.0.1:<port>/mcp``); every
request's headers are kept in ``headers_seen``; with ``token`` set, a
request without ``Authorization: Bearer <token>`` is answered 401.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Dict, List

import uvicorn

from tests.support.mcp_servers.review_tools import build_server


class _BearerCheck:
    """ASGI middleware: records headers, refuses a wrong bearer token."""

    def __init__(self, app: Any, token: str | None, seen: List[Dict[str, str]]) -> None:
        self.app, self.token, self.seen = app, token, seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.seen.append(headers)
            if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


class McpHttpServer:
    """The review tools served over streamable HTTP in a daemon thread."""

    def __init__(self, name: str = "reviews-http", token: str | None = None, with_prompts: bool = True,
                 call_log: str | None = None, only: List[str] | None = None) -> None:
        self.headers_seen: List[Dict[str, str]] = []
        mcp = build_server(name, with_prompts=with_prompts, call_log=call_log, only=only)
        app = _BearerCheck(mcp.streamable_http_app(), token, self.headers_seen)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def start(self) -> "McpHttpServer":
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the MCP HTTP test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> "McpHttpServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
