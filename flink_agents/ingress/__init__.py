"""The callback ingress: the HTTP endpoint where outside systems resolve or
reject the durable callbacks that runs wait on.

``make_app`` builds the aiohttp application (routes, status codes and limits
are in ``callback_app``); ``CallbackIngress`` serves it on a background thread
and ``serve_forever`` in the foreground (``flink-agents callbacks serve``).
"""

from flink_agents.ingress.callback_app import (
    CALLBACK_ID_PATTERN,
    MAX_BODY_BYTES,
    METRICS_KEY,
    CallbackMetrics,
    make_app,
)
from flink_agents.ingress.server import CallbackIngress, describe_store, serve_forever

__all__ = [
    "CALLBACK_ID_PATTERN",
    "CallbackIngress",
    "CallbackMetrics",
    "MAX_BODY_BYTES",
    "METRICS_KEY",
    "describe_store",
    "make_app",
    "serve_forever",
]
