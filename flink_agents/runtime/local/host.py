"""The local runner's host loop: what Flink's callbacks do for the operator.

Mirrors ``runtime/flink/operator.py``: each input record is appended to its
key's pending queue in keyed state and handed to the scheduler
(``KeyRunner.submit``); finished records are applied to keyed state with the
step every host uses (``apply_completions``) and their outputs, error records
and progress emitted. Where the operator applies a key's work in a callback
of that key (``process_element``, a polling timer), this host applies every
key's work as soon as it is ready; the host blocks while the scheduler's
backlog is full, as ``process_element`` does.
"""

from __future__ import annotations

from typing import Any

from flink_agents.runtime.execution.completion import apply_completions
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.execution.state import KeyState, PendingRecord

__all__ = ["LocalHost"]


class LocalHost:
    """Feeds records to the scheduler and applies what finished.

    Args:
        engine: The engine the scheduler runs records on.
        driver: Keyed state and emitted values.
        runner: The scheduler.
    """

    def __init__(self, engine: AgentEngine, driver: LocalDriver, runner: KeyRunner) -> None:
        self._engine = engine
        self._driver = driver
        self._runner = runner

    def accept(self, key: Any, value: Any) -> None:
        """Queue one input record of ``key`` and start it when the key is free.

        Raises:
            InputRecordError: The record holds a value the codec refuses.
            BaseException: A finished record's failure (``fail`` strategy).
        """
        state = self._driver.load(key) or KeyState(journal_id=self._engine.job_id)
        state.pending.append(PendingRecord(state.next_seq, value))
        state.next_seq += 1
        self._driver.store(key, state)
        self._runner.submit(key, state)
        self._apply_ready()
        self._runner.wait_for_capacity()  # back-pressure, as process_element

    def drain(self) -> None:
        """Apply work until every accepted record has finished.

        Raises:
            BaseException: A finished record's failure (``fail`` strategy).
        """
        while self._runner.wait_until_ready_or_idle():
            self._apply_ready()
        self._apply_ready()

    def _apply_ready(self) -> None:
        for key in self._runner.take_ready():
            self._apply(key)

    def _apply(self, key: Any) -> None:
        progress = self._runner.take_progress(key)
        if progress:
            self._driver.emit_progress(progress)
        completions = self._runner.take(key)
        if completions:
            state = self._driver.load(key)
            assert state is not None  # a completion implies a submitted record
            applied = apply_completions(key, state, completions)
            self._driver.store(key, state)
            for is_error, value in applied.emissions:
                (self._driver.emit_error if is_error else self._driver.emit)(key, value)
            applied.raise_failure()
        if not self._runner.has_work(key):
            # Idle: its state lives here; a later record starts from it (with
            # the memory TTL applied), as the operator releases idle keys.
            self._runner.release(key)
