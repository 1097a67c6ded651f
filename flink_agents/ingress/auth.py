"""Authentication of the callback ingress, for operators who expose it
beyond loopback.

A callback URL is a capability (``stores.callbacks``: the id and the
route's token); anyone holding it can complete the callback. Two optional
mechanisms narrow who can, each configured by a secret the ingress reads
from a file or an environment variable, never from its command line:

- **Bearer token** (``callbacks.ingress.auth_token_file``, else
  ``$FLINK_AGENTS_CALLBACK_AUTH_TOKEN``): every POST must carry
  ``Authorization: Bearer <token>``; otherwise 401, before the body is read
  or the store is asked. A leaked URL alone is then not enough: the sender
  must also hold the token. One token for all senders of this ingress.
- **Signed URLs** (``callbacks.ingress.signing_key_file``, else
  ``$FLINK_AGENTS_CALLBACK_SIGNING_KEY``; the job signs with the same key,
  ``callbacks.signing_key_file`` or the same variable): each URL the job
  hands out ends in ``?exp=<unix s>&sig=<HMAC-SHA256>`` over its path from
  ``/callbacks/`` and ``exp``; ``exp`` is the callback's deadline. A POST
  without a valid signature, or after ``exp``, is refused with 403 without a
  store call. Someone who can read the journal (and so the tokens) but not
  the key cannot make a working URL.

Neither is TLS: on an untrusted network put a TLS-terminating proxy in
front, or the token and the URLs travel in clear text.

An ingress refuses to listen on an address other than loopback with
neither mechanism set, unless ``callbacks.ingress.allow_unauthenticated``
says so (``check_bind``).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional
from urllib.parse import parse_qs

from flink_agents.stores.capabilities import SIGNING_KEY_ENV, read_secret, sign

__all__ = [
    "AUTH_KEYS",
    "AUTH_TOKEN_ENV",
    "IngressAuth",
    "SIGNING_KEY_ENV",
    "check_bind",
    "is_loopback",
    "read_secret",
]

AUTH_TOKEN_ENV = "FLINK_AGENTS_CALLBACK_AUTH_TOKEN"
AUTH_TOKEN_FILE_KEY = "callbacks.ingress.auth_token_file"
SIGNING_KEY_FILE_KEY = "callbacks.ingress.signing_key_file"
ALLOW_UNAUTHENTICATED_KEY = "callbacks.ingress.allow_unauthenticated"
AUTH_KEYS = (AUTH_TOKEN_FILE_KEY, SIGNING_KEY_FILE_KEY, ALLOW_UNAUTHENTICATED_KEY)


def _secret(config: Mapping[str, Any], key: str, env: str, environ: Mapping[str, str]) -> Optional[str]:
    path = config.get(key)
    if path:
        return read_secret(path, key)
    value = (environ.get(env) or "").strip()
    return value or None


def _flag(key: str, raw: Any) -> bool:
    if isinstance(raw, bool) or raw is None:
        return bool(raw)
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise ValueError(f"{key} must be true or false, got {raw!r}")


@dataclass(frozen=True)
class IngressAuth:
    """What the ingress requires of a POST (module docstring).

    Attributes:
        bearer_token: The token every POST must present as
            ``Authorization: Bearer``; None: not required.
        signing_key: The key URL signatures are checked with; None: URLs
            are not signed.
        allow_unauthenticated: Listen beyond loopback with neither.

    Neither secret is in the ``repr``.
    """

    bearer_token: Optional[str] = field(default=None, repr=False)
    signing_key: Optional[str] = field(default=None, repr=False)
    allow_unauthenticated: bool = False

    @property
    def enabled(self) -> bool:
        """Whether a POST must authenticate in some way."""
        return self.bearer_token is not None or self.signing_key is not None

    def describe(self) -> str:
        """What is required, for the start line (no secret)."""
        parts = [name for name, value in (("bearer token", self.bearer_token), ("signed URLs", self.signing_key))
                 if value is not None]
        return " and ".join(parts) if parts else "none"

    @classmethod
    def from_config(cls, config: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None) -> "IngressAuth":
        """The authentication ``config`` asks for: the secrets from the files
        its ``callbacks.ingress.*_file`` keys name, else from
        ``$FLINK_AGENTS_CALLBACK_AUTH_TOKEN`` and
        ``$FLINK_AGENTS_CALLBACK_SIGNING_KEY`` (``environ``, default the
        process's environment).

        Raises:
            ValueError: A file cannot be read or is empty, or
                ``allow_unauthenticated`` is not a boolean (named).
        """
        environ = os.environ if environ is None else environ
        return cls(
            bearer_token=_secret(config, AUTH_TOKEN_FILE_KEY, AUTH_TOKEN_ENV, environ),
            signing_key=_secret(config, SIGNING_KEY_FILE_KEY, SIGNING_KEY_ENV, environ),
            allow_unauthenticated=_flag(ALLOW_UNAUTHENTICATED_KEY, config.get(ALLOW_UNAUTHENTICATED_KEY)),
        )

    def bearer_ok(self, authorization: Optional[str]) -> bool:
        """Whether an ``Authorization`` header value satisfies the bearer
        requirement (always, when there is none); constant time."""
        if self.bearer_token is None:
            return True
        scheme, _, presented = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(presented.strip().encode("utf-8"), self.bearer_token.encode("utf-8"))

    def signature_problem(self, path: str, query: str, now_s: float) -> Optional[str]:
        """Why a POST to ``path`` with the query string ``query`` is not a
        validly signed URL at ``now_s`` (Unix seconds), or None if it is (or
        URLs are not signed). The reason is safe to answer."""
        if self.signing_key is None:
            return None
        fields = parse_qs(query, keep_blank_values=True)
        exp, sig = fields.get("exp", []), fields.get("sig", [])
        if len(exp) != 1 or len(sig) != 1 or not exp[0].isdigit():
            return "the URL is not signed"
        expected = sign(self.signing_key, path, int(exp[0]))
        if not hmac.compare_digest(expected.encode("ascii"), sig[0].encode("ascii", "replace")):
            return "the URL's signature does not match"
        if int(exp[0]) < now_s:
            return "the URL has expired"
        return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) reaches this machine
    only; an empty host or a name other than ``localhost`` does not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth: IngressAuth) -> None:
    """Refuse to listen on ``host`` beyond loopback with no authentication.

    Raises:
        ValueError: ``host`` is not loopback, ``auth`` requires nothing, and
            ``allow_unauthenticated`` is not set.
    """
    if is_loopback(host) or auth.enabled or auth.allow_unauthenticated:
        return
    raise ValueError(
        f"refusing to serve callbacks on {host or '(all interfaces)'} without authentication: anyone who "
        f"reaches it with a callback URL could complete the callback. Set a bearer token "
        f"({AUTH_TOKEN_FILE_KEY} / --auth-token-file, or ${AUTH_TOKEN_ENV}) and/or a URL signing key "
        f"({SIGNING_KEY_FILE_KEY} / --signing-key-file, or ${SIGNING_KEY_ENV}), "
        f"or set {ALLOW_UNAUTHENTICATED_KEY} (--allow-unauthenticated) to serve without"
    )
