"""What a callback URL carries besides the id: the routes' capability
tokens, and optionally a signature (``ingress.auth``).

Used where URLs are made (``runtime.features.callbacks``) and where they are
checked (``ingress``), so it imports nothing of either (no aiohttp).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import math
import os
import re
import secrets
from pathlib import Path
from typing import Any

__all__ = ["SIGNING_KEY_ENV", "TOKEN_BYTES", "new_capability_token", "read_secret", "sign", "signed_url"]

log = logging.getLogger(__name__)

# Bytes of CSPRNG output in a capability token (URL-safe base64: 32 characters).
TOKEN_BYTES = 24


def new_capability_token() -> str:
    """A fresh, unguessable token for one route of one callback."""
    return secrets.token_urlsafe(TOKEN_BYTES)


# Signed URLs (optional, ``ingress.auth``): the job signs the URLs it hands
# out with a key the ingress also holds (this variable, or a key file).
SIGNING_KEY_ENV = "FLINK_AGENTS_CALLBACK_SIGNING_KEY"
# The signed part of a callback URL's path: its route, at the end (a base URL
# may add a prefix that a proxy strips before the ingress).
_SIGNED_PART = re.compile(r"/callbacks/[^/?#]+/(?:resolve|reject)(?:/[^/?#]+)?$")


def read_secret(path: Any, what: str) -> str:
    """The secret held in the file ``path``, surrounding whitespace removed;
    a warning is logged when other users can read the file.

    Raises:
        ValueError: The file cannot be read, or is empty (the message names
            ``what`` and the path, never the content).
    """
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not text:
        raise ValueError(f"{what}: {path} is empty")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = 0
    if mode & 0o077:
        log.warning("%s: %s can be read by other users (mode %o); make it readable by its owner only (0600)",
                    what, path, mode & 0o777)
    return text


def sign(key: str, path: str, exp_s: int) -> str:
    """The signature of a callback URL: URL-safe base64 (no padding) of
    HMAC-SHA256 under ``key`` over the path from ``/callbacks/`` and the
    expiry (``"<path>?exp=<exp_s>"``)."""
    route = _SIGNED_PART.search(path)
    signed = f"{route.group(0) if route else path}?exp={int(exp_s)}"
    digest = hmac.new(key.encode("utf-8"), signed.encode("utf-8"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def signed_url(url: str, key: str, deadline_ms: int) -> str:
    """``url`` (a callback URL without a query) signed to expire at the
    callback's deadline (rounded up to a second); deterministic, so a
    replay makes the same URL."""
    exp_s = int(math.ceil(deadline_ms / 1000.0))
    return f"{url}?exp={exp_s}&sig={sign(key, url, exp_s)}"
