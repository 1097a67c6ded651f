"""The driver interface: what the engine needs from its host.

Two implementations with mirrored file names: ``runtime/local/driver.py``
(dicts, in-process) and ``runtime/flink/driver.py`` (Flink keyed state and the
operator's collector). The engine never sees which one it runs on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, List

from flink_agents.runtime.execution.state import KeyState

__all__ = ["KeyedDriver"]


class KeyedDriver(ABC):
    """Keyed state and output for the keys the engine runs.

    On Flink, ``load``/``store`` may only be called for the operator's current
    key (inside ``process_element``/``on_timer`` of that key); the Flink driver
    raises if another key is touched. The engine therefore only awaits work of
    the key being processed within one callback.
    """

    @abstractmethod
    def load(self, key: Any) -> KeyState | None:
        """The key's state, or None for a key never seen."""

    @abstractmethod
    def store(self, key: Any, state: KeyState) -> None:
        """Replace the key's state."""

    @abstractmethod
    def emit(self, key: Any, output: Any) -> None:
        """Send an ``OutputEvent``'s output downstream."""

    @abstractmethod
    def emit_error(self, key: Any, error: Dict[str, Any]) -> None:
        """Send the error record of a skipped record to the error output.

        ``error`` is ``{"key", "seq", "record", "action", "error_type",
        "error_message", "attempts"}``.
        """

    def arm_deadline(self, key: Any, callback_id: str, deadline_ms: int, seq: int) -> None:
        """A callback's deadline (Unix ms) as a timer of the host, if it has
        timers that survive a restore (Flink: a processing-time timer of the
        key, kept in keyed state). Called from the thread runs execute on,
        for each pending callback a run of ``key``'s record ``seq`` creates
        or finds on replay. Hosts without such timers ignore it: the
        engine's poller enforces deadlines too (``runtime.features.callbacks``)."""

    def emit_progress(self, records: List[Dict[str, Any]]) -> None:
        """Publish one commit's progress records (``runtime.features.progress``).

        Raises:
            NotImplementedError: The driver has no progress stream (the
                engine calls this only when ``progress.enabled`` is set).
        """
        raise NotImplementedError(f"{type(self).__name__} has no progress stream")
