"""The callback ingress: the HTTP endpoint where outside systems resolve or
reject the durable callbacks that runs wait on.

``make_app`` builds the aiohttp application (routes, status codes and the
body limits are in ``callback_app``); ``CallbackIngress`` serves it on a
background thread and ``serve_forever`` in the foreground (``flink-agents
callbacks serve``), both under ``IngressLimits`` (``options``: body size,
header, body and idle timeouts, connection limit; the connection-level ones
are enforced by ``connections.ConnectionGuard``) and ``IngressAuth``
(``auth``: a bearer token, signed URLs; required beyond loopback).
"""

from flink_agents.ingress.callback_app import (
    CALLBACK_ID_PATTERN,
    MAX_BODY_BYTES,
    METRICS_KEY,
    CallbackMetrics,
    make_app,
)
from flink_agents.ingress.auth import IngressAuth
from flink_agents.ingress.options import IngressLimits
from flink_agents.ingress.server import CallbackIngress, describe_store, serve_forever

__all__ = [
    "CALLBACK_ID_PATTERN",
    "CallbackIngress",
    "CallbackMetrics",
    "IngressAuth",
    "IngressLimits",
    "MAX_BODY_BYTES",
    "METRICS_KEY",
    "describe_store",
    "make_app",
    "serve_forever",
]
