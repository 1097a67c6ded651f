"""The callback ingress's limits, as one typed, validated set of options.

Each limit is a config key under ``callbacks.ingress.`` (flat and dotted, like
the job's other keys) and a flag of ``flink-agents callbacks serve``:

=====================================  ======================  =========  ==========================================
key                                    flag                    default    what it bounds
=====================================  ======================  =========  ==========================================
``callbacks.ingress.max_body_bytes``   ``--max-body-bytes``    1048576    a POST body, in bytes (over it: 413)
``callbacks.ingress.header_timeout_s`` ``--header-timeout-s``  10         seconds for a request's line and headers,
                                                                          from the connection's start (first
                                                                          request) or the request's first byte
                                                                          (later ones); over it: closed
``callbacks.ingress.body_timeout_s``   ``--body-timeout-s``    30         seconds to receive a whole POST body, from
                                                                          the end of its headers (over it: 408)
``callbacks.ingress.idle_timeout_s``   ``--idle-timeout-s``    30         seconds a kept-alive connection may wait
                                                                          for its next request (aiohttp's
                                                                          ``keepalive_timeout``); then closed
``callbacks.ingress.max_connections``  ``--max-connections``   512        connections open at once; one more is
                                                                          answered 503 and closed at once
=====================================  ======================  =========  ==========================================

The authentication keys (``callbacks.ingress.auth_token_file``,
``signing_key_file``, ``allow_unauthenticated``) are ``auth.IngressAuth``'s.

The defaults let an honest client send the largest body (1 MiB) at 35 KiB/s
or faster, and keep a client that trickles or stalls from holding a
connection for longer than about 30 s per request.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping

from flink_agents.ingress.auth import AUTH_KEYS

__all__ = [
    "BODY_TIMEOUT_S",
    "HEADER_TIMEOUT_S",
    "IDLE_TIMEOUT_S",
    "IngressLimits",
    "KEY_PREFIX",
    "MAX_BODY_BYTES",
    "MAX_CONNECTIONS",
]

KEY_PREFIX = "callbacks.ingress."
MAX_BODY_BYTES = 1024 * 1024  # 1 MiB, the default limit of a POST body
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 512  # well under the usual open-file limit of 1024

# Field -> (kind, what a valid value is), for the error messages.
_INTEGERS = {"max_body_bytes": "a positive number of bytes", "max_connections": "a positive integer"}
_SECONDS = ("header_timeout_s", "body_timeout_s", "idle_timeout_s")


@dataclass(frozen=True)
class IngressLimits:
    """What the callback ingress accepts from a client, and for how long.

    Attributes:
        max_body_bytes: The largest POST body, in bytes; one byte more is
            answered 413 (``callback_app``).
        header_timeout_s: Seconds allowed for a request's line and headers:
            for a connection's first request from when it was accepted, for a
            later one from its first byte. A connection over it is closed
            without an answer (``connections.ConnectionGuard``).
        body_timeout_s: Seconds allowed to receive a whole POST body, from the
            end of its headers; over it, the answer is 408 and the connection
            is closed (``callback_app``). The callback is not touched.
        idle_timeout_s: Seconds a kept-alive connection may stay open without
            a request after its previous answer (aiohttp's
            ``keepalive_timeout``). aiohttp also closes a connection whose next
            request's headers are still incomplete when this runs out.
        max_connections: Connections open at once; a connection beyond it is
            answered 503 and closed as soon as it is accepted, and the ones
            already open go on (``connections.ConnectionGuard``).

    Raises:
        ValueError: A value out of range; the message names its config key.
    """

    max_body_bytes: int = MAX_BODY_BYTES
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    idle_timeout_s: float = IDLE_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS

    def __post_init__(self) -> None:
        for name, expected in _INTEGERS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{KEY_PREFIX}{name} must be {expected}, got {value!r}")
        for name in _SECONDS:
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"{KEY_PREFIX}{name} must be a positive, finite number of seconds, got {value!r}")

    @classmethod
    def keys(cls) -> Dict[str, str]:
        """Config key -> field name, e.g. ``"callbacks.ingress.body_timeout_s"``
        -> ``"body_timeout_s"``."""
        return {KEY_PREFIX + field.name: field.name for field in dataclasses.fields(cls)}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "IngressLimits":
        """The limits a job's configuration sets; missing keys keep their
        defaults, other keys are ignored.

        Args:
            config: Flat, dotted keys. Values may be numbers or their text
                (``"30"``, ``"2.5"``), as a Flink configuration holds them.

        Raises:
            ValueError: A key under ``callbacks.ingress.`` that is not one of
                ``keys()`` (a typo would otherwise leave the default in force
                unnoticed), or a value that is not a number or out of range;
                the message names the key.
        """
        values: Dict[str, Any] = {}
        known = cls.keys()
        for key, raw in config.items():
            if not key.startswith(KEY_PREFIX):
                continue
            name = known.get(key)
            if name is None and key in AUTH_KEYS:  # IngressAuth's, read by IngressAuth.from_config
                continue
            if name is None:
                raise ValueError(
                    f"unknown option {key!r}; the ingress options are " + ", ".join(sorted([*known, *AUTH_KEYS]))
                )
            if raw is None:
                continue
            values[name] = _number(key, raw, integer=name in _INTEGERS)
        return cls(**values)


def _number(key: str, raw: Any, *, integer: bool) -> Any:
    """``raw`` as an int (``integer``) or a float; text is parsed."""
    if isinstance(raw, str):
        text = raw.strip()
        try:
            return int(text) if integer else float(text)
        except ValueError:
            kind = "an integer" if integer else "a number of seconds"
            raise ValueError(f"{key} must be {kind}, got {raw!r}") from None
    return raw
