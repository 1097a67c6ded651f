"""The web inspector: ``flink-agents ui`` (issue 31, part 2).

An aiohttp application over one journal store (``--journal``: a SQLite
path or a PostgreSQL DSN). It serves a page without a build step
(``static/``: one HTML, one script, one style sheet, nothing from other
hosts) and these JSON endpoints, each behind ``web_auth``:

    GET  /api/runs?job=&key=&state=&since=&limit=   runs.list_runs -> {"runs": [...]}
    GET  /api/runs/{journal_id}/{key}/{seq}         runs.show_run, with "timeline" and "conversation"
                                                    (inspection.timeline) -> {"run": {...}}
    GET  /api/callbacks?state=&job=&key=            runs.list_callbacks -> {"callbacks": [...]}
    GET  /api/approvals?state=&job=                 approvals.list_approvals -> {"approvals": [...]}
    GET  /api/controls?job=&key=                    control.list_controls -> {"controls": [...]}
    POST /api/approvals/{callback_id}               {"approve": bool, "reason": str} -> {"outcome": ...}
    POST /api/controls                              {"action", "journal_id", "key", "seq"} -> {"control": {...}}

Reads open a read-only reader (``reader.open_reader``) per request on a
worker thread; writes go through ``approvals.decide`` and
``control.request_control``, which open the store writable (the authority
to control the job is the store's own credentials, which this process
holds). Those two modules are imported when first used: without them the
endpoints answer 501 naming what is missing. Errors of the request answer
400 with the message; the server's own answer 500 without details.
"""

from __future__ import annotations

import asyncio
import signal
import importlib
import json
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, Optional

from aiohttp import web

from flink_agents.ingress.auth import is_loopback
from flink_agents.inspection.reader import open_reader
from flink_agents.inspection.runs import list_callbacks, list_runs, show_run
from flink_agents.inspection.since import parse_since
from flink_agents.inspection.timeline import conversation, timeline
from flink_agents.inspection.web_auth import UiAuth, security_middleware

__all__ = ["STATIC_DIR", "make_app", "serve_until_signal"]

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
_JOURNAL = web.AppKey("journal", str)
_MAX_BODY_BYTES = 64 * 1024
_MAX_REASON_CHARS = 2000
_ACTIONS = ("pause", "resume", "cancel", "retry")
_BY = "ui"  # decided_by / requested_by of what the inspector writes


class _Missing(Exception):
    """An optional module (approvals, control) is not installed."""


class _NotFound(Exception):
    """No such run (404)."""


def _optional(name: str) -> Any:
    try:
        return importlib.import_module(f"flink_agents.inspection.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"flink_agents.inspection.{name}":
            raise
        raise _Missing(f"this flink-agents has no flink_agents.inspection.{name}: "
                       f"upgrade it to {'decide approvals' if name == 'approvals' else 'control runs'} here") from None


async def _answer(key: str, work: Callable[[], Any]) -> web.Response:
    """Run ``work`` on a worker thread; ``{key: result}``, or the error:
    400 (``ValueError``), 404 (``_NotFound``), 501 (``_Missing``), 500."""
    try:
        return web.json_response({key: await asyncio.to_thread(work)}, dumps=_dumps)
    except _Missing as exc:
        return web.json_response({"error": str(exc)}, status=501)
    except _NotFound as exc:
        return web.json_response({"error": str(exc)}, status=404)
    except ValueError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except Exception:  # noqa: BLE001 - logged here, never echoed (it may quote the journal)
        log.exception("the inspector's %s request failed", key)
        return web.json_response({"error": "internal error (see the server's log)"}, status=500)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)


def _opt(request: web.Request, name: str) -> Optional[str]:
    value = request.query.get(name, "").strip()
    return value or None


def _read(request: web.Request, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    journal = request.app[_JOURNAL]

    def work() -> Any:
        with open_reader(journal) as reader:
            return fn(reader, *args, **kwargs)

    return work


async def runs_index(request: web.Request) -> web.Response:
    since = _opt(request, "since")
    try:
        since_s = parse_since(since) if since else None
        limit = int(request.query.get("limit", "200"))
    except ValueError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    return await _answer("runs", _read(request, list_runs, _opt(request, "job"), _opt(request, "key"),
                                       _opt(request, "state"), since_s, limit))


def _run_view(reader: Any, key: str, seq: int, journal_id: str) -> Optional[Dict[str, Any]]:
    run = show_run(reader, key, seq, journal_id)
    if run is None:
        raise _NotFound("no such run")
    return {**run, "timeline": timeline(run), "conversation": conversation(run)}


async def run_detail(request: web.Request) -> web.Response:
    try:
        seq = int(request.match_info["seq"])
    except ValueError:
        return web.json_response({"error": "seq must be a number"}, status=400)
    return await _answer("run", _read(request, _run_view, request.match_info["key"], seq,
                                      request.match_info["journal_id"]))


async def callbacks_index(request: web.Request) -> web.Response:
    return await _answer("callbacks", _read(request, list_callbacks, _opt(request, "state"), _opt(request, "job"),
                                            _opt(request, "key"), 200))


async def approvals_index(request: web.Request) -> web.Response:
    journal = request.app[_JOURNAL]
    state = request.query.get("state", "pending").strip() or None
    job = _opt(request, "job")
    return await _answer("approvals", lambda: _optional("approvals").list_approvals(journal, state, job))


async def controls_index(request: web.Request) -> web.Response:
    journal = request.app[_JOURNAL]
    job, key = _opt(request, "job"), _opt(request, "key")
    return await _answer("controls", lambda: _optional("control").list_controls(journal, job, key))


async def _json_body(request: web.Request) -> Dict[str, Any]:
    if request.content_length is not None and request.content_length > _MAX_BODY_BYTES:
        raise ValueError("request body too large")
    try:
        body = await request.json()
    except ValueError:
        raise ValueError("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


async def approval_decide(request: web.Request) -> web.Response:
    journal = request.app[_JOURNAL]
    callback_id = request.match_info["callback_id"]
    try:
        body = await _json_body(request)
        approve, reason = body.get("approve"), body.get("reason", "")
        if not isinstance(approve, bool):
            raise ValueError("approve must be true or false")
        if not isinstance(reason, str) or len(reason) > _MAX_REASON_CHARS:
            raise ValueError(f"reason must be text of at most {_MAX_REASON_CHARS} characters")
    except ValueError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    response = await _answer("outcome", lambda: _optional("approvals").decide(journal, callback_id, approve,
                                                                              reason, decided_by=_BY))
    log.info("approval decided from the inspector: %s (%s)", "approve" if approve else "reject", response.status)
    return response


async def control_request(request: web.Request) -> web.Response:
    journal = request.app[_JOURNAL]
    try:
        body = await _json_body(request)
        action, key, journal_id, seq = body.get("action"), body.get("key"), body.get("journal_id"), body.get("seq")
        if action not in _ACTIONS:
            raise ValueError(f"action must be one of {', '.join(_ACTIONS)}")
        if not isinstance(key, str) or not key:
            raise ValueError("key must be the key as text (B01, or JSON: 42)")
        if journal_id is not None and not isinstance(journal_id, str):
            raise ValueError("journal_id must be text or null")
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)):
            raise ValueError("seq must be a number or null")
    except ValueError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    return await _answer("control", lambda: _optional("control").request_control(
        journal, action, key, seq=seq, journal_id=journal_id, requested_by=_BY))


async def page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


def make_app(journal: str, auth: UiAuth, loopback: bool = True) -> web.Application:
    """The inspector's application over ``journal``.

    Args:
        journal: A SQLite path or a PostgreSQL DSN.
        auth: The server's token (``web_auth``).
        loopback: Served on a loopback address: refuse other ``Host`` names.
    """
    app = web.Application(middlewares=[security_middleware(auth, loopback)], client_max_size=_MAX_BODY_BYTES)
    app[_JOURNAL] = journal
    app.router.add_get("/", page)
    app.router.add_static("/static/", STATIC_DIR, show_index=False, follow_symlinks=False)
    app.router.add_get("/api/runs", runs_index)
    app.router.add_get(r"/api/runs/{journal_id}/{key:.+}/{seq:\d+}", run_detail)
    app.router.add_get("/api/callbacks", callbacks_index)
    app.router.add_get("/api/approvals", approvals_index)
    app.router.add_post("/api/approvals/{callback_id}", approval_decide)
    app.router.add_get("/api/controls", controls_index)
    app.router.add_post("/api/controls", control_request)
    return app


async def _serve(app: web.Application, host: str, port: int, on_ready: Callable[[int], None],
                 stopped: Callable[[], Awaitable[Any]]) -> None:
    runner = web.AppRunner(app, access_log=None)  # a URL may hold the token: never logged
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        on_ready(runner.addresses[0][1])
        await stopped()
    finally:
        await runner.cleanup()


def serve_until_signal(journal: str, host: str, port: int, auth: UiAuth,
                       on_ready: Callable[[int], None]) -> None:
    """Serve the inspector in the main thread until SIGINT or SIGTERM.

    Args:
        on_ready: Called with the bound port (the real one when ``port`` is 0)
            once the socket listens.

    Raises:
        OSError: The address cannot be bound.
    """
    app = make_app(journal, auth, loopback=is_loopback(host))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stopping.set)
        try:
            await _serve(app, host, port, on_ready, stopping.wait)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    asyncio.run(main())
