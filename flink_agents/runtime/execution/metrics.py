"""What the engine counts, and the metrics actions report.

``RunCounters``: the engine's own totals; the Flink operator mirrors them
into Flink counters (group ``flink_agents``), the local runner returns them.

``MetricRegistry``: the in-memory metrics behind ``ctx.agent_metric_group``
and ``ctx.action_metric_group`` (``flink_agents.api.metric_group``), user
metrics and the built-in ones (``BuiltinMetrics``) alike. The local runner
returns ``snapshot()``; the Flink operator mirrors every metric into its
Flink metric group in its own callbacks (``runtime.flink.metrics``), since
runs execute on the scheduler's thread, where PyFlink's metric objects must
not be touched.

Built-in metric names follow Flink Agents 0.3.1 where it has them
(``docs/operations.md``, "Event log and metrics")::

    numOfEventProcessed, numOfEventProcessedPerSec          every event dequeued (replays too)
    numOfActionsExecuted, numOfActionsExecutedPerSec        actions that ran (not replayed steps)
    action.<a>.numOfActionsExecuted, ...PerSec              the same, per action
    action.<a>.actionExecutionTimeMs                        histogram, ms per executed step
    action.<a>.model.<m>.promptTokens, .completionTokens    model calls of the records run, once each
    action.<a>.model.<m>.cachedTokens, .reasoningTokens     the same, when the provider reports them
    action.<a>.model.<m>.costMicroUsd                       cost in micro-USD (a model in usage.prices)
    numOfToolCalls, action.<a>.tool.<t>.numOfToolCalls      tool calls that ran (not replays)

(tool counters are counted by ``runtime.builtin_actions`` through
``ctx.action_metric_group``, inside the journaled call, so only when it
runs; usage counters by ``runtime.execution.token_usage`` from the
journaled reply of every model call, built-in or an agent framework's,
once per call per run of the record in this engine, whether it ran or was
replayed: an engine restarted after a crash counts the tokens of the calls
its replay returns, as an uninterrupted engine would have, and an action
retry counts none twice. ``costMicroUsd`` is a counter, as Flink's hold
integers: the exact cost summed as a float per action and model, the
counter kept at its rounded value)
    eventLogTruncatedEvents                                 event log records truncated
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Deque, Dict, List, Tuple

from flink_agents.api.metric_group import Counter, Gauge, Histogram, Meter, MetricGroup

__all__ = [
    "BuiltinMetrics", "DerivedCounter", "DerivedMeter", "LocalCounter", "LocalGauge", "LocalHistogram", "LocalMeter",
    "LocalMetricGroup",
    "MetricRegistry", "RunCounters",
]

# A group path: segments, each ``(name,)`` or ``(key, value)``.
GroupPath = Tuple[Tuple[str, ...], ...]

METER_SPAN_S = 60.0  # the window of a meter's rate, as Flink's MeterView default


class LocalCounter(Counter):
    """An in-memory counter."""

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = 0

    def inc(self, n: int = 1) -> None:
        self._count += n

    def dec(self, n: int = 1) -> None:
        self._count -= n

    def get_count(self) -> int:
        return self._count


class LocalMeter(Meter):
    """An in-memory meter. A mark is one addition; the rate is worked out
    when read, from the count at each read (at most one sample a second):
    marks per second since the oldest read within the last ``METER_SPAN_S``
    seconds, or since the meter was created."""

    __slots__ = ("_count", "_samples", "_clock")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._count = 0
        self._clock = clock
        self._samples: Deque[Tuple[float, int]] = deque([(clock(), 0)])

    def mark(self, n: int = 1) -> None:
        self._count += n

    def get_count(self) -> int:
        """Events marked since the meter was created."""
        return self._count

    def get_rate(self) -> float:
        now = self._clock()
        count = self.get_count()
        samples = self._samples
        while len(samples) > 1 and now - samples[1][0] >= METER_SPAN_S:
            samples.popleft()
        since, count_then = samples[0]
        if now - samples[-1][0] >= 1.0:
            samples.append((now, count))
        elapsed = now - since
        return 0.0 if elapsed <= 0 else (count - count_then) / elapsed


def _read_only(name: str) -> TypeError:
    return TypeError(f"{name!r} is a built-in metric: the runtime counts it, actions cannot change it")


class DerivedCounter(LocalCounter):
    """A built-in counter whose count is read from the engine's totals
    (``RunCounters``), so counting it costs the hot path nothing more."""

    __slots__ = ("_read", "_name")

    def __init__(self, name: str, read: Callable[[], int]) -> None:
        super().__init__()
        self._name, self._read = name, read

    def inc(self, n: int = 1) -> None:
        raise _read_only(self._name)

    def dec(self, n: int = 1) -> None:
        raise _read_only(self._name)

    def get_count(self) -> int:
        return self._read()


class DerivedMeter(LocalMeter):
    """A built-in meter over a count read from elsewhere (a counter's)."""

    __slots__ = ("_read", "_name")

    def __init__(self, name: str, read: Callable[[], int], clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._name, self._read = name, read

    def mark(self, n: int = 1) -> None:
        raise _read_only(self._name)

    def get_count(self) -> int:
        return self._read()


class LocalHistogram(Histogram):
    """An in-memory histogram over the last ``window_size`` values."""

    __slots__ = ("_window", "count")

    def __init__(self, window_size: int = 100) -> None:
        self._window: Deque[int] = deque(maxlen=window_size)
        self.count = 0  # values recorded since creation (the Flink mirror reads it)

    def update(self, value: int) -> None:
        self._window.append(value)
        self.count += 1

    def get_mean(self) -> float:
        return sum(self._window) / len(self._window) if self._window else 0.0

    def get_max(self) -> int:
        return max(self._window) if self._window else 0

    def get_min(self) -> int:
        return min(self._window) if self._window else 0

    def values_since(self, seen: int) -> List[int]:
        """The values recorded after the first ``seen`` ones (at most a window's)."""
        fresh = min(self.count - seen, len(self._window))
        return list(self._window)[len(self._window) - fresh:] if fresh > 0 else []


class LocalGauge(Gauge):
    """An in-memory gauge."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = 0.0

    def update(self, value: float) -> None:
        self._value = value

    def get_value(self) -> float:
        return self._value


_MODEL_GROUPS_KEPT = 4096  # (action, model) pairs are few; bound them anyway


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    return name


class LocalMetricGroup(MetricGroup):
    """A group of the in-memory registry (see ``MetricRegistry``)."""

    __slots__ = ("_registry", "path")

    def __init__(self, registry: "MetricRegistry", path: GroupPath) -> None:
        self._registry = registry
        self.path = path

    def get_sub_group(self, name: str, value: str | None = None) -> "LocalMetricGroup":
        _check_name(name, "metric group name")
        if value is None:
            if "=" in name:
                raise ValueError(
                    f"metric group name {name!r} holds '='; for a key-value group use get_sub_group(key, value)"
                )
            return self._registry.group(self.path + ((name,),))
        return self._registry.group(self.path + ((name, _check_name(str(value), "metric group value")),))

    def get_counter(self, name: str) -> LocalCounter:
        return self._registry.metric(self.path, name, LocalCounter, LocalCounter)

    def get_meter(self, name: str) -> LocalMeter:
        return self._registry.metric(self.path, name, LocalMeter, LocalMeter)

    def get_histogram(self, name: str, window_size: int = 100) -> LocalHistogram:
        if not isinstance(window_size, int) or window_size < 1:
            raise ValueError(f"histogram {name!r}: window_size must be an int >= 1, got {window_size!r}")
        return self._registry.metric(self.path, name, LocalHistogram, lambda: LocalHistogram(window_size))

    def get_gauge(self, name: str) -> LocalGauge:
        return self._registry.metric(self.path, name, LocalGauge, LocalGauge)


def identifier(path: GroupPath, name: str) -> str:
    """A metric's full name: ``action.review.numOfActionsExecuted``."""
    return ".".join([part for segment in path for part in segment] + [name])


class MetricRegistry:
    """Every metric of one engine, by group path and name.

    Metrics are created under a lock and read without one (a lookup of an
    existing metric is one dict read), so the scheduler's thread creates and
    updates them while the Flink operator's thread mirrors them.
    """

    def __init__(self, counters: "RunCounters | None" = None) -> None:
        self._lock = threading.Lock()
        self._groups: Dict[GroupPath, LocalMetricGroup] = {}
        self._metrics: Dict[Tuple[GroupPath, str], Any] = {}
        self.root = self.group(())
        self.builtin = BuiltinMetrics(self, counters)

    def group(self, path: GroupPath) -> LocalMetricGroup:
        """The group at ``path`` (created on first use)."""
        found = self._groups.get(path)
        if found is None:
            with self._lock:
                found = self._groups.setdefault(path, LocalMetricGroup(self, path))
        return found

    def metric(self, path: GroupPath, name: str, kind: type, create: Callable[[], Any]) -> Any:
        """The metric ``name`` of group ``path``, created by ``create`` on first use.

        Raises:
            ValueError: ``name`` is empty.
            TypeError: ``name`` is a metric of another kind in this group.
        """
        found = self._metrics.get((path, name))
        if found is None:
            _check_name(name, "metric name")
            with self._lock:
                found = self._metrics.get((path, name))
                if found is None:
                    found = self._metrics[(path, name)] = create()
        if not isinstance(found, kind):
            raise TypeError(f"metric {identifier(path, name)!r} is a {_kind_name(type(found))}, not a {_kind_name(kind)}")
        return found

    def entries(self) -> List[Tuple[GroupPath, str, Any]]:
        """``(group path, name, metric)`` of every metric, as of now."""
        with self._lock:
            return [(path, name, metric) for (path, name), metric in self._metrics.items()]

    def snapshot(self) -> Dict[str, Any]:
        """Every metric's value by full name: a counter's count, a gauge's
        value, ``{"count", "rate"}`` of a meter, ``{"count", "mean", "min",
        "max"}`` of a histogram (over its window)."""
        values: Dict[str, Any] = {}
        for path, name, metric in self.entries():
            if isinstance(metric, LocalCounter):
                value: Any = metric.get_count()
            elif isinstance(metric, LocalMeter):
                value = {"count": metric.get_count(), "rate": metric.get_rate()}
            elif isinstance(metric, LocalHistogram):
                value = {"count": metric.count, "mean": metric.get_mean(), "min": metric.get_min(),
                         "max": metric.get_max()}
            else:
                value = metric.get_value()
            values[identifier(path, name)] = value
        return values


def _kind_name(kind: type) -> str:
    for base, name in ((LocalCounter, "counter"), (LocalMeter, "meter"), (LocalHistogram, "histogram")):
        if issubclass(kind, base):
            return name
    return "gauge"


class BuiltinMetrics:
    """The engine's built-in metrics (names in the module docstring), with
    each action's metrics looked up once."""

    def __init__(self, registry: MetricRegistry, counters: "RunCounters | None") -> None:
        self._registry = registry
        self._root = registry.root
        self._per_action: Dict[str, Tuple[LocalCounter, LocalHistogram]] = {}
        self._cost_usd: Dict[Tuple[str, str], float] = {}  # exact cost so far per (action, model)
        self._cost_lock = threading.Lock()
        self._model_groups: Dict[Tuple[str, str], LocalMetricGroup] = {}  # (action, model) -> its group
        if counters is not None:
            # Read from the engine's totals, which the action loop counts
            # anyway (``events``: every event taken, replays included;
            # ``actions``: executed steps): nothing more per event.
            self._derived(counters, "numOfEventProcessed", "events")
            self._derived(counters, "numOfActionsExecuted", "actions")

    def _derived(self, counters: "RunCounters", name: str, total: str) -> None:
        def read() -> int:
            return getattr(counters, total)

        self._registry.metric((), name, LocalCounter, lambda: DerivedCounter(name, read))
        self._registry.metric((), name + "PerSec", LocalMeter, lambda: DerivedMeter(name + "PerSec", read))

    def action_executed(self, action: str, duration_ms: int) -> None:
        """Action ``action`` ran to completion (not replayed) in ``duration_ms``."""
        metrics = self._per_action.get(action)
        if metrics is None:
            group = self.action_group(action)
            counter = group.get_counter("numOfActionsExecuted")
            name = "numOfActionsExecutedPerSec"
            self._registry.metric(group.path, name, LocalMeter, lambda: DerivedMeter(name, counter.get_count))
            metrics = self._per_action.setdefault(action, (counter, group.get_histogram("actionExecutionTimeMs")))
        metrics[0]._count += 1
        metrics[1].update(duration_ms)

    def model_usage(self, action: str, model: str, usage: Any, cost_usd: float | None) -> None:
        """One model call of ``action`` on ``model`` used ``usage``
        (``runtime.execution.usage.Usage``), costing ``cost_usd`` (None: no
        price known): the ``action.<a>.model.<m>`` counters."""
        group = self._model_groups.get((action, model))
        if group is None:  # per (action, model), once: group names are checked as a user's would be
            if len(self._model_groups) >= _MODEL_GROUPS_KEPT:
                self._model_groups.clear()
            group = self._model_groups[(action, model)] = self.action_group(action).get_sub_group("model", model)
        group.get_counter("promptTokens").inc(usage.input_tokens)
        group.get_counter("completionTokens").inc(usage.output_tokens)
        if usage.cached_input_tokens is not None:
            group.get_counter("cachedTokens").inc(usage.cached_input_tokens)
        if usage.reasoning_tokens is not None:
            group.get_counter("reasoningTokens").inc(usage.reasoning_tokens)
        if cost_usd is not None:
            with self._cost_lock:
                total = self._cost_usd[(action, model)] = self._cost_usd.get((action, model), 0.0) + cost_usd
                counter = group.get_counter("costMicroUsd")
                counter.inc(round(total * 1e6) - counter.get_count())

    def action_group(self, action: str) -> LocalMetricGroup:
        """``action.<action>``: the group ``ctx.action_metric_group`` gives."""
        return self._root.get_sub_group("action", action)

    def budget_refused(self, budget: str) -> None:
        """A model call was refused by the budget ``budget`` (its option
        key, ``budget.key.tokens``): ``budgetRefusals`` and
        ``budget.<budget>.budgetRefusals``."""
        self._root.get_counter("budgetRefusals").inc()
        self._root.get_sub_group("budget", budget).get_counter("budgetRefusals").inc()

    def event_log_truncated(self) -> None:
        """An event log record was truncated (once per record)."""
        self._root.get_counter("eventLogTruncatedEvents").inc()


@dataclass
class RunCounters:
    """Totals since the engine started, and the engine's ``metrics``
    (``MetricRegistry``; not among ``as_dict()``)."""

    records: int = 0
    events: int = 0
    actions: int = 0
    outputs: int = 0
    unhandled_events: int = 0
    journal_writes: int = 0
    calls_executed: int = 0
    calls_replayed: int = 0
    calls_reconciled: int = 0  # answered by their reconciler after a failover (durability.call_started)
    steps_replayed: int = 0
    action_retries: int = 0
    records_skipped: int = 0
    records_cancelled: int = 0  # by a run-control request (runtime.features.run_control)
    records_parked: int = 0  # ``park`` strategy: queued again, key paused
    in_flight: int = 0  # runs in progress now (a gauge)
    max_in_flight: int = 0  # the most runs in progress at once
    callbacks_created: int = 0
    callbacks_resolved: int = 0
    callbacks_rejected: int = 0
    callbacks_timed_out: int = 0
    callbacks_cancelled: int = 0
    callbacks_closed: int = 0  # still pending when the run ended
    progress_publishes: int = 0  # progress stream: one per commit of a run
    prune_failures: int = 0  # journal prunes that failed (tried again later)
    metrics: MetricRegistry = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.metrics is None:
            self.metrics = MetricRegistry(self)

    def as_dict(self) -> Dict[str, int]:
        """The totals by name (without ``metrics``)."""
        return {f.name: getattr(self, f.name) for f in _TOTALS}


_TOTALS = [f for f in fields(RunCounters) if f.name != "metrics"]
