"""The callback ingress's own counters, served at ``GET /metrics`` by
``prometheus_client``.

Each ``CallbackMetrics`` has its own ``CollectorRegistry``, not the
library's global one: two ingresses in one process (tests, a job that
starts one beside a CLI) would otherwise clash on the metric names, and a
page would mix their counts. Series (all counters also carry the library's
``*_created`` timestamps):

=============================================== ======= ===================================
``flink_agents_callback_posts_total{outcome}``  counter resolve/reject POSTs, ``OUTCOMES``
``flink_agents_callback_connections_total{outcome}`` counter ``accepted``, ``refused``
``flink_agents_callback_connections_open``      gauge   connections held open now
``flink_agents_callback_header_timeouts_total`` counter closed: request head late
``flink_agents_callback_malformed_requests_total`` counter not parseable as HTTP (400)
=============================================== ======= ===================================
"""

from __future__ import annotations

from typing import Dict, Tuple

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import choose_encoder

__all__ = ["CallbackMetrics", "OUTCOMES"]

# The outcomes of a resolve/reject POST, as counted (label ``outcome``).
# ``unknown`` includes malformed ids; ``late`` is a POST on a finished callback;
# ``body_timeout`` one whose body did not arrive within ``body_timeout_s``.
# ``forbidden`` one whose URL does not carry the route's token (or a valid
# signature, when URLs are signed); ``unauthorized`` one without the bearer
# token the ingress requires.
OUTCOMES = (
    "accepted", "unknown", "late", "too_large", "store_errors", "body_timeout", "forbidden", "unauthorized"
)
_CONNECTION_OUTCOMES = ("accepted", "refused")


class CallbackMetrics:
    """Counters of one ingress: resolve/reject POSTs, one per ``OUTCOMES``
    entry, and connections (``connections``), in ``registry``.

    The connection counters move only when the application is served by this
    package (``CallbackIngress``, ``serve_forever``), whose ``ConnectionGuard``
    counts them. Thread-safe (``prometheus_client``'s metrics are): handlers
    count on the event loop, tests and ``/metrics`` read from anywhere.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._posts = Counter(
            "flink_agents_callback_posts", "Callback resolve/reject POSTs answered by the ingress, by outcome.",
            ["outcome"], registry=self.registry,
        )
        self._connections = Counter(
            "flink_agents_callback_connections",
            "Connections accepted by the ingress, by outcome (refused: over max_connections, answered 503 and closed).",
            ["outcome"], registry=self.registry,
        )
        self._open = Gauge(
            "flink_agents_callback_connections_open", "Connections the ingress holds open now.", registry=self.registry
        )
        self._header_timeouts = Counter(
            "flink_agents_callback_header_timeouts",
            "Connections closed because a request's headers did not arrive within header_timeout_s.",
            registry=self.registry,
        )
        self._malformed = Counter(
            "flink_agents_callback_malformed_requests",
            "Requests that could not be parsed as HTTP (answered 400, not logged beyond one line each).",
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # every series on the page from the start, at 0
            self._posts.labels(outcome)
        for outcome in _CONNECTION_OUTCOMES:
            self._connections.labels(outcome)

    def count(self, outcome: str) -> None:
        """Add one POST with ``outcome``.

        Raises:
            ValueError: ``outcome`` is not one of ``OUTCOMES``.
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; expected one of {OUTCOMES}")
        self._posts.labels(outcome).inc()

    def connection_opened(self) -> None:
        """Count a connection admitted (``accepted``, and one more ``open``)."""
        self._connections.labels("accepted").inc()
        self._open.inc()

    def connection_closed(self) -> None:
        """Count an admitted connection gone (one less ``open``)."""
        self._open.dec()

    def connection_refused(self) -> None:
        """Count a connection refused over ``max_connections``."""
        self._connections.labels("refused").inc()

    def header_timed_out(self) -> None:
        """Count a connection closed because a request head was late."""
        self._header_timeouts.inc()

    def malformed_request(self) -> None:
        """Count a request aiohttp could not parse (answered 400 and closed)."""
        self._malformed.inc()

    def snapshot(self) -> Dict[str, int]:
        """The POST counts so far, by outcome."""
        return {outcome: self._value("flink_agents_callback_posts_total", outcome=outcome) for outcome in OUTCOMES}

    def connections(self) -> Dict[str, int]:
        """The connection counts so far: ``accepted``, ``refused`` (over
        ``max_connections``), ``header_timeouts`` (closed with a late request
        head), ``malformed`` (requests that could not be parsed), and
        ``open`` (admitted and not yet closed, now)."""
        counts = {o: self._value("flink_agents_callback_connections_total", outcome=o) for o in _CONNECTION_OUTCOMES}
        counts["open"] = self._value("flink_agents_callback_connections_open")
        counts["header_timeouts"] = self._value("flink_agents_callback_header_timeouts_total")
        counts["malformed"] = self._value("flink_agents_callback_malformed_requests_total")
        return counts

    def render(self) -> str:
        """The page in the Prometheus text format (what a scraper without an
        ``Accept`` header gets)."""
        return self.exposition("")[0].decode("utf-8")

    def exposition(self, accept: str | None) -> Tuple[bytes, str]:
        """``(body, content type)`` of ``/metrics`` for a request's
        ``Accept`` header, as ``prometheus_client`` negotiates it
        (``choose_encoder``): OpenMetrics when the scraper asks for it, else
        the Prometheus text format (``generate_latest``; ``text/plain;
        version=0.0.4`` unless the scraper asks for a newer version)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def _value(self, name: str, **labels: str) -> int:
        return int(self.registry.get_sample_value(name, labels) or 0)
