"""Metrics an action reports: ``ctx.agent_metric_group`` and ``ctx.action_metric_group``.

The same interface as Flink Agents 0.3.1's ``flink_agents.api.metric_group``
(method names included), so an action written against it reports its
metrics here unchanged::

    ctx.agent_metric_group.get_counter("numInputEvent").inc()
    ctx.action_metric_group.get_histogram("actionLatencyMs").update(12)

A metric is created on first use and the same object comes back for the
same name afterwards. On the Flink runner the values are mirrored into the
operator's Flink metric group (so reporters and the web UI see them); on
the local runner they stay in an in-memory registry that ``execute()``
returns (see ``docs/operations.md``, "Event log and metrics").
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["Counter", "Gauge", "Histogram", "Meter", "MetricGroup"]


class MetricGroup(ABC):
    """A named group of metrics, and of sub-groups.

    A metric's full name is its group path joined by dots, then its name:
    ``action.review.numOfActionsExecuted`` is counter
    ``numOfActionsExecuted`` of sub-group ``("action", "review")``.
    """

    @abstractmethod
    def get_sub_group(self, name: str, value: str | None = None) -> "MetricGroup":
        """The sub-group ``name`` (created on first use).

        With ``value``, a key-value group (``name`` the key), as Flink's
        ``addGroup(key, value)``: reporters that support labels (Prometheus)
        show it as the label ``name=value``.

        Raises:
            ValueError: ``name`` (or ``value``) is empty, or a plain group's
                ``name`` holds ``=`` (as 0.3.1 refuses it: use ``value``).
        """

    @abstractmethod
    def get_counter(self, name: str) -> "Counter":
        """The counter ``name`` of this group (created on first use).

        Raises:
            ValueError: ``name`` is empty.
            TypeError: ``name`` is already a metric of another kind here.
        """

    @abstractmethod
    def get_meter(self, name: str) -> "Meter":
        """The meter ``name`` (events per second; created on first use).

        Raises:
            ValueError: ``name`` is empty.
            TypeError: ``name`` is already a metric of another kind here.
        """

    @abstractmethod
    def get_histogram(self, name: str, window_size: int = 100) -> "Histogram":
        """The histogram ``name`` over the last ``window_size`` values
        (created on first use; a later call's ``window_size`` is ignored).

        Raises:
            ValueError: ``name`` is empty or ``window_size`` < 1.
            TypeError: ``name`` is already a metric of another kind here.
        """

    @abstractmethod
    def get_gauge(self, name: str) -> "Gauge":
        """The gauge ``name`` (the last value set; created on first use).

        Raises:
            ValueError: ``name`` is empty.
            TypeError: ``name`` is already a metric of another kind here.
        """


class Counter(ABC):
    """A count that goes up and down."""

    @abstractmethod
    def inc(self, n: int = 1) -> None:
        """Add ``n`` (default 1)."""

    @abstractmethod
    def dec(self, n: int = 1) -> None:
        """Subtract ``n`` (default 1)."""

    @abstractmethod
    def get_count(self) -> int:
        """The current count."""


class Meter(ABC):
    """A throughput: events marked, as a rate per second."""

    @abstractmethod
    def mark(self, n: int = 1) -> None:
        """Mark ``n`` events (default 1) as happened now."""

    @abstractmethod
    def get_rate(self) -> float:
        """Events per second over the meter's recent window (60 s, as
        Flink's ``MeterView``)."""


class Histogram(ABC):
    """Statistics over the most recent values recorded."""

    @abstractmethod
    def update(self, value: int) -> None:
        """Record ``value``."""

    @abstractmethod
    def get_mean(self) -> float:
        """The mean of the values in the window (0.0 when none)."""

    @abstractmethod
    def get_max(self) -> int:
        """The largest value in the window (0 when none)."""

    @abstractmethod
    def get_min(self) -> int:
        """The smallest value in the window (0 when none)."""


class Gauge(ABC):
    """A value set by the action, reported as it is."""

    @abstractmethod
    def update(self, value: float) -> None:
        """Set the value."""

    @abstractmethod
    def get_value(self) -> float:
        """The value last set (0.0 before any)."""
