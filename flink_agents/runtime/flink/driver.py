"""Flink driver: keyed state in a Flink ``ValueState``, output to the collector.

Valid only inside ``process_element``/``on_timer`` of the key being loaded or
stored: Flink scopes keyed state to the operator's current key.
"""

from __future__ import annotations

from typing import Any, List

from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.state import KeyState

__all__ = ["FlinkDriver"]


class FlinkDriver(KeyedDriver):
    """Maps the engine's per-key state onto one ``ValueState[str]`` (JSON).

    The state object is cached between ``load`` and ``store`` within one
    callback so a run does not re-decode it at every step; ``begin`` starts a
    callback for the current key and ``drain`` hands the outputs to yield.
    """

    def __init__(self, value_state: Any) -> None:
        self._value_state = value_state
        self._current_key: Any = None
        self._cached: KeyState | None = None
        self._outputs: List[Any] = []

    def begin(self, key: Any) -> None:
        """Start a callback for ``key`` (the operator's current key)."""
        self._current_key = key
        self._cached = None

    def _check(self, key: Any) -> None:
        if key != self._current_key:
            raise RuntimeError(
                f"keyed state of {key!r} accessed while the operator's current key is "
                f"{self._current_key!r}"
            )

    def load(self, key: Any) -> KeyState | None:
        self._check(key)
        if self._cached is None:
            text = self._value_state.value()
            self._cached = None if text is None else KeyState.from_json(text)
        return self._cached

    def store(self, key: Any, state: KeyState) -> None:
        self._check(key)
        self._cached = state
        self._value_state.update(state.to_json())

    def emit(self, key: Any, output: Any) -> None:
        self._outputs.append(output)

    def drain(self) -> List[Any]:
        """Outputs emitted since the last drain, in order."""
        outputs, self._outputs = self._outputs, []
        return outputs
