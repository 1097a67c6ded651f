"""Who may use the web inspector (``flink-agents ui``), as Jupyter does it.

- **One token** per server: ``--token-file``, else ``$FLINK_AGENTS_UI_TOKEN``,
  else ``secrets.token_urlsafe(32)`` made at start. The command prints the
  URL ``http://HOST:PORT/?token=...`` once; nothing else logs it (aiohttp's
  access log is off).
- ``GET /?token=<token>`` sets a session cookie (HttpOnly, SameSite=Strict,
  path ``/``; its value an HMAC of the token, not the token) and redirects
  to ``/`` so the token leaves the address bar; ``Referrer-Policy:
  no-referrer`` keeps it out of Referer headers meanwhile.
- Every ``/api/`` request needs that cookie or ``Authorization: Bearer
  <token>`` (401 otherwise). The page (``/``) without the cookie answers 401
  with how to get in; the static files hold no data and need nothing.
- A POST authenticated by the cookie must also come from the page itself:
  ``Origin`` equal to the server's own origin, or, without ``Origin``,
  ``Sec-Fetch-Site: same-origin`` (403 otherwise: cross-site request
  forgery). A POST with the bearer header is not a browser's ambient
  credential and needs neither. POST bodies must be ``application/json``.
- Served on loopback, a request whose ``Host`` is not a loopback name is
  refused (403: DNS rebinding).
- Every answer has a strict ``Content-Security-Policy`` (scripts, styles,
  fetches from the server itself only; no inline script, no frames).

Tokens are compared with ``hmac.compare_digest``. Binding beyond loopback
needs a token the operator chose (``--token-file`` or the variable): a
generated one would be printed to whoever reads the terminal only, which
is fine on one's machine and not a deliberate decision on a network
(``check_ui_bind``). Neither is TLS: beyond loopback, put a TLS-terminating
proxy in front.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Optional
from urllib.parse import urlsplit

from aiohttp import web

from flink_agents.ingress.auth import is_loopback
from flink_agents.stores.capabilities import read_secret

__all__ = ["COOKIE", "CSP", "TOKEN_ENV", "UiAuth", "check_ui_bind", "security_middleware"]

TOKEN_ENV = "FLINK_AGENTS_UI_TOKEN"
COOKIE = "flink_agents_ui"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class UiAuth:
    """The server's token and where it came from (``generated``, ``file``,
    ``environment``); the token is not in the ``repr``."""

    token: str = field(repr=False)
    source: str = "generated"

    @classmethod
    def load(cls, token_file: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> "UiAuth":
        """The token from ``token_file``, else ``$FLINK_AGENTS_UI_TOKEN``,
        else a new random one.

        Raises:
            ValueError: The file cannot be read or is empty.
        """
        if token_file:
            return cls(read_secret(token_file, "--token-file"), "file")
        value = ((os.environ if environ is None else environ).get(TOKEN_ENV) or "").strip()
        if value:
            return cls(value, "environment")
        return cls(secrets.token_urlsafe(32), "generated")

    def token_ok(self, presented: Optional[str]) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode("utf-8"), self.token.encode("utf-8"))

    @property
    def cookie_value(self) -> str:
        """What the session cookie holds: the token's HMAC, so the cookie is
        not the token (it cannot be used as ``?token=`` or as a bearer)."""
        return hmac.new(self.token.encode("utf-8"), b"flink-agents-ui session", hashlib.sha256).hexdigest()

    def cookie_ok(self, presented: Optional[str]) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode("utf-8"),
                                                             self.cookie_value.encode("utf-8"))

    def bearer_ok(self, authorization: Optional[str]) -> bool:
        scheme, _, presented = (authorization or "").strip().partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(presented.strip())


def check_ui_bind(host: str, auth: UiAuth) -> None:
    """Refuse a non-loopback ``host`` unless the operator chose the token.

    Raises:
        ValueError: ``host`` is not loopback and the token was generated.
    """
    if is_loopback(host) or auth.source != "generated":
        return
    raise ValueError(f"refusing to serve the inspector on {host or '(all interfaces)'} with a generated token: "
                     f"give one with --token-file or ${TOKEN_ENV} (and put TLS in front), or serve on 127.0.0.1")


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is not None:
        parts = urlsplit(origin)
        return parts.scheme == request.scheme and parts.netloc.lower() == request.host.lower()
    return request.headers.get("Sec-Fetch-Site") == "same-origin"


def _refuse(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def security_middleware(auth: UiAuth, loopback: bool) -> Any:
    """The aiohttp middleware enforcing the module docstring's rules."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await _checked(request, handler)
        except web.HTTPException as exc:  # a 404 or 405 of the router: JSON, with the headers below
            response = _refuse(exc.status, exc.reason)
        for name, value in _HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _checked(request: web.Request, handler: Handler) -> web.StreamResponse:
        if loopback and not is_loopback(urlsplit(f"//{request.host}").hostname or ""):
            return _refuse(403, "this inspector answers on a loopback address only")
        path = request.path
        if path == "/" and "token" in request.query:
            if not auth.token_ok(request.query.get("token")):
                return _refuse(401, "wrong token: open the URL flink-agents ui printed")
            response = web.Response(status=303, headers={"Location": "/"})
            response.set_cookie(COOKIE, auth.cookie_value, httponly=True, samesite="Strict", path="/")
            return response
        if path.startswith("/static/"):
            return await handler(request)
        by_bearer = auth.bearer_ok(request.headers.get("Authorization"))
        if not by_bearer and not auth.cookie_ok(request.cookies.get(COOKIE)):
            if path == "/":
                return web.Response(status=401, text="Open the URL that 'flink-agents ui' printed (it holds the "
                                                     "token), or send 'Authorization: Bearer <token>'.\n")
            return _refuse(401, "not authenticated: open the URL flink-agents ui printed, or send a bearer token")
        if request.method not in ("GET", "HEAD"):
            if not by_bearer and not _same_origin(request):
                return _refuse(403, "cross-origin request refused")
            if request.content_type != "application/json":
                return _refuse(415, "send application/json")
        return await handler(request)

    return middleware
