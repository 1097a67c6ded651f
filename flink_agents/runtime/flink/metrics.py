"""Mirror the engine's metrics into the operator's Flink metric group.

Runs execute on the scheduler's thread; PyFlink's metric objects belong to
the operator's thread (in process mode they live in the bundle's metrics
container, in thread mode they are Java objects reached through pemja). So
actions report into the engine's in-memory ``MetricRegistry``
(``runtime.execution.metrics``), and the operator calls ``sync()`` at the end
of each of its callbacks (``process_element``, ``on_timer``) to carry what
changed since the last sync into Flink: a metric registers in Flink at the
first sync after its first use, and its values lag by at most one poll
interval (``flink.poll_interval_ms``).

Mapping (Flink Agents 0.3.1 uses Flink's own metric types the same way):
groups -> ``add_group(name)`` or key-value ``add_group(key, value)`` under the
operator's metric group; counter -> ``counter`` (``inc``/``dec`` by the
change); meter -> ``meter`` (``mark_event`` by the marks since the last
sync; Flink computes the rate); histogram -> ``distribution`` (each value
recorded since the last sync, at most a window's) and ``<name>Mean``,
``<name>Min``, ``<name>Max`` over its window (reporters cannot print a
distribution: Prometheus shows it as 0.0); gauge -> a value of the same name.

The window's mean, min and max, and gauges, are Flink *counters* set to the
value at each sync, not Flink gauges: a PyFlink gauge is a Python callable
that Flink's metric threads (reporters, the REST API and web UI's metric
queries) call, and in thread mode that call enters the embedded interpreter
from a thread PyFlink does not run Python on, which crashed TaskManagers
(SIGSEGV in ``PyTuple_GetItem`` under ``MetricGauge.getValue``, seen under
load). A counter is a Java object: reading it runs no Python. Prometheus
exports a Flink counter as a gauge, so scrapes read the same series.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from flink_agents.runtime.execution.metrics import (
    GroupPath, LocalCounter, LocalHistogram, LocalMeter, MetricRegistry,
)

__all__ = ["parallelism_of", "FlinkMetricMirror", "task_identity"]


def task_identity(runtime_context: Any) -> Tuple[str, int]:
    """``(task name, subtask index)`` of the operator, for the file event
    logger's file name (``events-{job}-{task}-{subtask}.log``).

    PyFlink 2.x's thread-mode runtime context calls ``getTaskName`` on the
    Java context, which Flink 2 moved to ``getTaskInfo()``; then the task
    info is read directly. ``("agent", <id of the context>)`` if neither
    works, so two subtasks never share a file.
    """
    try:
        return runtime_context.get_task_name(), runtime_context.get_index_of_this_subtask()
    except Exception:
        pass
    try:
        info = runtime_context._runtime_context.getTaskInfo()
        return str(info.getTaskName()), int(info.getIndexOfThisSubtask())
    except Exception:
        return "agent", id(runtime_context)


def parallelism_of(runtime_context: Any) -> int:
    """The operator's parallelism (its number of subtasks), for the rate
    limits' per-subtask share; as ``task_identity``, through the task info
    when PyFlink 2.x's thread-mode context lacks the method; 1 if neither
    works (each subtask then holds the whole limit: documented)."""
    try:
        return max(1, int(runtime_context.get_number_of_parallel_subtasks()))
    except Exception:
        pass
    try:
        return max(1, int(runtime_context._runtime_context.getTaskInfo().getNumberOfParallelSubtasks()))
    except Exception:
        return 1


class FlinkMetricMirror:
    """Carries ``registry`` into ``root`` (a PyFlink ``MetricGroup``) on ``sync()``.

    Args:
        registry: The engine's metrics.
        root: ``runtime_context.get_metrics_group()`` of the operator.
    """

    def __init__(self, registry: MetricRegistry, root: Any) -> None:
        self._registry = registry
        self._root = root
        self._groups: Dict[GroupPath, Any] = {(): root}
        # (path, name) -> [Flink metric, what was carried so far]
        self._mirrored: Dict[Tuple[GroupPath, str], list] = {}

    def _group(self, path: GroupPath) -> Any:
        group = self._groups.get(path)
        if group is None:
            parent = self._group(path[:-1])
            segment = path[-1]
            group = parent.add_group(*segment)  # (name,) or (key, value)
            self._groups[path] = group
        return group

    def _register(self, path: GroupPath, name: str, metric: Any) -> list:
        group = self._group(path)
        if isinstance(metric, LocalCounter):
            entry = [group.counter(name), 0]
        elif isinstance(metric, LocalMeter):
            entry = [group.meter(name), 0]
        elif isinstance(metric, LocalHistogram):
            # A distribution reaches reporters as a value they cannot print
            # (Prometheus shows 0.0): its window's mean, min and max as
            # numbers beside it (counters set at each sync: module docstring).
            entry = [group.distribution(name), 0, _value_counter(group, f"{name}Mean"),
                     _value_counter(group, f"{name}Min"), _value_counter(group, f"{name}Max")]
        else:
            entry = _value_counter(group, name)  # a gauge's value, set at each sync
        self._mirrored[(path, name)] = entry
        return entry

    def sync(self) -> None:
        """Carry every change since the last sync into Flink (on the operator's thread)."""
        for path, name, metric in self._registry.entries():
            entry = self._mirrored.get((path, name))
            if entry is None:
                entry = self._register(path, name, metric)
            flink_metric, carried = entry[0], entry[1]
            if isinstance(metric, LocalCounter):
                _set(entry, metric.get_count())
            elif isinstance(metric, LocalMeter):
                delta = metric.get_count() - carried
                if delta > 0:
                    flink_metric.mark_event(delta)
                    entry[1] += delta
            elif isinstance(metric, LocalHistogram):
                count = metric.count
                if count > carried:
                    for value in metric.values_since(carried):
                        flink_metric.update(value)
                    entry[1] = count
                    _set(entry[2], int(round(metric.get_mean())))
                    _set(entry[3], int(metric.get_min()))
                    _set(entry[4], int(metric.get_max()))
            else:
                _set(entry, int(metric.get_value()))


def _value_counter(group: Any, name: str) -> list:
    """A Flink counter standing for a value, ``[counter, its value]``;
    touched once, so that it is reported while its value is still 0 (in
    process mode PyFlink reports only counters that were updated)."""
    counter = group.counter(name)
    counter.inc(0)
    return [counter, 0]


def _set(entry: list, value: int) -> None:
    """Bring a Flink counter (``[counter, what it holds]``) to ``value`` by
    the change: a counter's count, or a value a counter stands for."""
    delta = value - entry[1]
    if delta > 0:
        entry[0].inc(delta)
    elif delta < 0:
        entry[0].dec(-delta)
    entry[1] = value
