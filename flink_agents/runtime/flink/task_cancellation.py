"""Whether Flink cancelled the task whose thread runs this Python code.

In thread mode the operator's Python function runs on the task's own thread
(CPython embedded in the TaskManager's JVM through pemja). Flink cancels a
task (a failover, ``flink cancel``) by calling its ``cancel()`` and then
interrupting that thread (``Task.TaskCanceler``, again every
``task.cancellation.interval``); a Python wait does not see the interrupt, so
an operator blocked on back-pressure would keep the task, and the job's
restart, waiting for its runs in progress (up to a model call's timeout).
``task_cancellation_check`` reads the interrupt flag instead, without
clearing it (``Thread.isInterrupted``).

Process mode runs the function in a worker process of its own, whose thread
Flink does not interrupt; its runs end with that process's bundle.
"""

from __future__ import annotations

from typing import Callable, Optional


def task_cancellation_check() -> Optional[Callable[[], bool]]:
    """A check, to call on the task's thread, of whether Flink interrupted it
    (cancelled the task); None outside a TaskManager's embedded interpreter
    (process mode, the local runner), where there is no task thread to ask."""
    try:
        from _pemja import findClass  # only inside the JVM: pemja registers it
    except ImportError:
        return None
    java_thread = findClass("java.lang.Thread")

    def cancelled() -> bool:
        return bool(java_thread.currentThread().isInterrupted())

    return cancelled
