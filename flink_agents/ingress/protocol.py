"""aiohttp's HTTP protocol for the ingress, quiet about malformed requests.

aiohttp answers a request it cannot parse (a bad request line, header or
chunk, a line over 8190 bytes) from its ``RequestHandler.handle_error``:
it logs the parser's exception at ERROR with a traceback, and answers 400
with the exception's message as the body. That message quotes the request
bytes, so every malformed request was logged (about 3 KB of log per 3 KB
request, unbounded) and echoed back to the sender.

``QuietRequestHandler`` (aiohttp's ``RequestHandler`` with ``handle_error``
replaced) answers every error with a short fixed body
(``MALFORMED_ANSWER`` for 4xx, ``{"error": "internal error"}`` for 5xx),
logs one line naming the peer, the status and the exception's type, never
its message, and counts it (``CallbackMetrics.malformed``). A 500 from a
handler of ours is still logged with its traceback (our code, not the
request's bytes). ``protocol_factory`` builds these handlers with the
keyword arguments the ingress gives aiohttp (``RequestHandler``'s own
parameters, e.g. ``keepalive_timeout``, ``access_log``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Dict, Optional

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from flink_agents.ingress.callback_app import CallbackMetrics

__all__ = ["MALFORMED_ANSWER", "QuietRequestHandler", "protocol_factory"]

log = logging.getLogger(__name__)

# The whole body of a 4xx aiohttp answers by itself (a request it cannot parse).
MALFORMED_ANSWER = {"error": "malformed request"}
_INTERNAL_ANSWER = {"error": "internal error"}


class QuietRequestHandler(RequestHandler):
    """aiohttp's protocol for one connection; errors answered and logged as
    the module docstring says.

    Args:
        manager: aiohttp's ``Server`` (``runner.server``).
        metrics: Where malformed requests are counted, or None.
        kwargs: ``RequestHandler``'s own keyword arguments.
    """

    __slots__ = ("_metrics",)

    def __init__(self, manager: web.Server, *, metrics: Optional[CallbackMetrics] = None, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._metrics = metrics

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: Optional[BaseException] = None,
        message: Optional[str] = None,
    ) -> web.StreamResponse:
        """The answer to a request aiohttp could not parse or serve (status
        ``status``): a fixed short JSON body, and one log line without the
        request's bytes (``message`` quotes them, so it is dropped)."""
        peer = request.remote
        if status >= 500:
            log.error("internal error answering a request from %s", peer, exc_info=exc)
        else:
            if self._metrics is not None:
                self._metrics.malformed_request()
            log.warning("malformed request from %s answered %d (%s)", peer, status,
                     type(exc).__name__ if exc is not None else "no detail")
        if request.writer.output_size > 0:  # an answer had started: nothing more can be sent
            raise ConnectionError("an answer was already being sent; cannot send the error answer")
        response = web.json_response(_INTERNAL_ANSWER if status >= 500 else MALFORMED_ANSWER, status=status)
        response.force_close()
        return response


def protocol_factory(
    server: web.Server, metrics: Optional[CallbackMetrics], handler_kwargs: Dict[str, Any]
) -> Callable[[], asyncio.Protocol]:
    """A protocol factory for ``loop.create_server`` (or a ``ConnectionGuard``)
    making a ``QuietRequestHandler`` per connection, as ``server()`` would
    make aiohttp's own ``RequestHandler``; call it on the serving loop."""
    loop = asyncio.get_running_loop()

    def make() -> asyncio.Protocol:
        return QuietRequestHandler(server, metrics=metrics, loop=loop, **handler_kwargs)

    return make
