"""The driver port: what the host core (``runtime.keyed_host.KeyedHost``)
needs from its host.

Keyed state (``load``/``store``), emission (``emit``, ``emit_error``,
``emit_progress``) and timers (``register_*``, ``current_*``, the callback
deadlines a run asks for: ``arm_deadline``/``take_deadlines``). Two
implementations with mirrored file names: ``runtime/local/driver.py`` (dicts,
in-process, no timers) and ``runtime/flink/driver.py`` (Flink keyed state,
the callback's timer service, emissions buffered for the callback to yield).
Neither the core nor the engine sees which one it runs on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, List, Tuple

from flink_agents.runtime.execution.state import KeyState

__all__ = ["KeyedDriver"]


class KeyedDriver(ABC):
    """Keyed state, output and timers for the keys the host core runs.

    On Flink, ``load``/``store`` may only be called for the operator's current
    key (inside ``process_element``/``on_timer`` of that key); the Flink driver
    raises if another key is touched. The engine therefore only awaits work of
    the key being processed within one callback.

    The timer methods are for a host whose callbacks are scoped to a key
    (``KeyedHost.process``/``on_timer``); a host without timers (the local
    runner: ``KeyedHost.accept``/``drain``) leaves them unimplemented.
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

    def forget(self, key: Any) -> None:
        """The runner let go of the idle ``key``: drop what is cached of it
        (its next load reads keyed state)."""

    def emit_record(self, key: Any, seq: int, output: Any) -> None:
        """``emit``, told which record of the key (sequence number) the
        output came from; the local runner orders its list by it."""
        self.emit(key, output)

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

    def take_deadlines(self, key: Any) -> List[Tuple[str, int, int]]:
        """The deadlines ``arm_deadline`` queued for ``key`` since the last
        call, ``(callback id, deadline ms, seq)``; none on a host without
        such timers."""
        return []

    def register_processing_time_timer(self, time_ms: int) -> None:
        """A processing-time timer of the current key at ``time_ms``."""
        raise NotImplementedError(f"{type(self).__name__} has no timers")

    def register_event_time_timer(self, time_ms: int) -> None:
        """An event-time timer of the current key at ``time_ms``."""
        raise NotImplementedError(f"{type(self).__name__} has no timers")

    def current_processing_time(self) -> int:
        """The host's processing time, Unix ms."""
        raise NotImplementedError(f"{type(self).__name__} has no timers")

    def current_watermark(self) -> int:
        """The host's current watermark, ms."""
        raise NotImplementedError(f"{type(self).__name__} has no timers")

    def emit_progress(self, records: List[Dict[str, Any]]) -> None:
        """Publish one commit's progress records (``runtime.features.progress``).

        Raises:
            NotImplementedError: The driver has no progress stream (the
                engine calls this only when ``progress.enabled`` is set).
        """
        raise NotImplementedError(f"{type(self).__name__} has no progress stream")
