"""The local runner's host: a thin adapter over the host core.

Mirrors ``runtime/flink/operator.py``: where the operator turns Flink's
callbacks into ``KeyedHost.process``/``on_timer`` calls, this host feeds the
input list to ``KeyedHost.accept`` and then ``drain``s: the core admits and
queues each record, submits it to the scheduler, and applies every key's
finished work as soon as it is ready (``runtime.keyed_host``); the port is
``runtime/local/driver.py`` (a dict of states, lists of outputs, no timers).
"""

from __future__ import annotations

from typing import Any

from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.keyed_host import KeyedHost
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.scheduling.key_runner import KeyRunner

__all__ = ["LocalHost"]


class LocalHost:
    """Feeds records and steering messages to the host core.

    Args:
        engine: The engine the scheduler runs records on.
        driver: Keyed state and emitted values.
        runner: The scheduler.
    """

    def __init__(self, engine: AgentEngine, driver: LocalDriver, runner: KeyRunner) -> None:
        self._core = KeyedHost(engine, driver, runner)

    def steer(self, key: Any, message: Any) -> None:
        """Queue a steering message for ``key`` (a full queue emits an error record)."""
        self._core.steer(key, message)

    def accept(self, key: Any, value: Any) -> None:
        """Queue one input record of ``key`` and start it when the key is free.

        Raises:
            InputRecordError: The record holds a value the codec refuses.
            BaseException: A finished record's failure (``fail`` strategy).
        """
        self._core.accept(key, value)

    def drain(self) -> None:
        """Apply work until every accepted record has finished.

        Raises:
            BaseException: A finished record's failure (``fail`` strategy).
        """
        self._core.drain()
