"""What an action sees of the runtime while it runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Dict

from flink_agents.api.callbacks import Callback
from flink_agents.api.events.event import Event
from flink_agents.api.memory_object import MemoryObject
from flink_agents.api.resource import Resource, ResourceType

__all__ = ["RunnerContext"]


class RunnerContext(ABC):
    """The context of one action invocation.

    A context is valid only while its action runs; do not keep it.
    """

    @property
    @abstractmethod
    def key(self) -> Any:
        """The key of the record being processed."""

    @abstractmethod
    def send_event(self, event: Event) -> None:
        """Queue ``event`` for the actions that listen to its type.

        Events are delivered after the sending action finishes, and only if it
        finishes without raising. ``OutputEvent`` goes downstream.

        Raises:
            TypeError: ``event`` is not an ``Event``.
        """

    @property
    @abstractmethod
    def sensory_memory(self) -> MemoryObject:
        """Memory of the current run; cleared when the run ends."""

    @property
    @abstractmethod
    def short_term_memory(self) -> MemoryObject:
        """Memory of the current key, kept across runs (in Flink keyed state)."""

    @abstractmethod
    def get_resource(self, name: str, type: ResourceType) -> Resource:
        """The resource ``name`` of kind ``type``, created once per operator.

        Raises:
            KeyError: No such resource in the agent's plan.
        """

    @property
    @abstractmethod
    def config(self) -> Dict[str, Any]:
        """The job's agent configuration (read-only)."""

    @property
    @abstractmethod
    def action_config(self) -> Dict[str, Any]:
        """The configuration given with ``add_action(..., **config)``."""

    def get_action_config_value(self, key: str, default: Any = None) -> Any:
        """One value of ``action_config``."""
        return self.action_config.get(key, default)

    @abstractmethod
    def durable_execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` and return its result.

        The result (or exception) is journaled by the durable runtime so that
        a replay after a failover returns it without calling ``fn`` again.
        """

    @abstractmethod
    async def durable_execute_async(
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """``durable_execute`` for async actions: ``fn`` runs on a worker thread
        (or is awaited if it is a coroutine function) so other keys run meanwhile."""

    async def create_callback(self, purpose: str, timeout_s: float) -> "Callback":
        """Create a callback that an outside system completes over HTTP.

        See ``flink_agents.api.callbacks``. Only in async actions.

        Args:
            purpose: What the run waits for (shown to operators; journaled).
            timeout_s: Seconds until the callback times out, from 1 to 86,400.

        Raises:
            ValueError: ``timeout_s`` is outside [1, 86400].
            RuntimeError: The action is not async, or has returned.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support callbacks")
