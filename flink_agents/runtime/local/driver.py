"""Local driver: keyed state in a dict, outputs appended to a list."""

from __future__ import annotations

from typing import Any, Dict, List

from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.state import KeyState

__all__ = ["LocalDriver"]


class LocalDriver(KeyedDriver):
    """In-process state for the local runner; outputs are ``{key: output}``."""

    def __init__(self) -> None:
        self.states: Dict[Any, KeyState] = {}
        self.outputs: List[Dict[Any, Any]] = []

    def load(self, key: Any) -> KeyState | None:
        return self.states.get(key)

    def store(self, key: Any, state: KeyState) -> None:
        self.states[key] = state

    def emit(self, key: Any, output: Any) -> None:
        self.outputs.append({key: output})
