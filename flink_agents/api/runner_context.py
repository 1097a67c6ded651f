"""What an action sees of the runtime while it runs."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, Generator

from flink_agents.api.callbacks import Callback
from flink_agents.api.configuration import ReadableConfiguration
from flink_agents.api.events.event import Event
from flink_agents.api.memory_object import MemoryObject
from flink_agents.api.metric_group import MetricGroup
from flink_agents.api.resource import Resource, ResourceType

if TYPE_CHECKING:
    from flink_agents.api.memory.long_term_memory import BaseLongTermMemory

__all__ = ["AsyncExecutionResult", "RunnerContext"]


class AsyncExecutionResult(Coroutine):
    """What ``RunnerContext.durable_execute_async`` returns: the call, made
    only when awaited, as in Flink Agents 0.3.1 (lazy submission:
    ``result = await ctx.durable_execute_async(fn, *args)``; nothing runs
    until the ``await``, and a result never awaited never runs).

    Built the 0.3.1 way, ``AsyncExecutionResult(executor, func, args,
    kwargs)``, awaiting it submits ``func(*args, **kwargs)`` to ``executor``
    and waits for it without blocking the event loop. The runtime builds it
    with ``AsyncExecutionResult.deferred(start)`` around its journaled call.

    It is a coroutine (``collections.abc.Coroutine``), so beyond ``await``
    (the only use 0.3.1 supports) it also goes to ``asyncio.gather``,
    ``asyncio.create_task`` and task groups. Like a coroutine, it can be
    awaited once: a second ``await`` raises ``RuntimeError``.
    """

    def __init__(
        self,
        executor: Executor | None,
        func: Callable[..., Any],
        args: tuple = (),
        kwargs: Dict[str, Any] | None = None,
    ) -> None:
        """Args:
            executor: Where ``func`` runs (``submit`` is called on it once,
                when the result is first awaited); None runs it on asyncio's
                default thread pool.
            func: The function to call.
            args: Its positional arguments.
            kwargs: Its keyword arguments.

        Raises:
            TypeError: ``func`` is not callable.
        """
        if not callable(func):
            raise TypeError(f"AsyncExecutionResult needs a callable func, got {type(func).__name__}")
        self._executor = executor
        self._func = func
        self._args = tuple(args)
        self._kwargs = dict(kwargs or {})
        self._start: Callable[[], Awaitable[Any]] = self._submit
        self._coroutine: Any = None

    @classmethod
    def deferred(cls, start: Callable[[], Awaitable[Any]]) -> "AsyncExecutionResult":
        """A result whose ``await`` awaits ``start()``; ``start`` is called
        at the first ``await`` (or first step of a task), not before. For
        runtimes: the durable runtime passes its journaled call here."""
        result = cls.__new__(cls)
        result._executor, result._func, result._args, result._kwargs = None, start, (), {}
        result._start = start
        result._coroutine = None
        return result

    async def _submit(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._executor is None:
            return await loop.run_in_executor(None, lambda: self._func(*self._args, **self._kwargs))
        return await asyncio.wrap_future(self._executor.submit(self._func, *self._args, **self._kwargs))

    def _started(self) -> Any:
        if self._coroutine is None:
            self._coroutine = self._drive()
        return self._coroutine

    async def _drive(self) -> Any:
        return await self._start()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._started().__await__()

    def send(self, value: Any) -> Any:
        return self._started().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if val is None and tb is None:
            return self._started().throw(typ)
        return self._started().throw(typ, val, tb)

    def close(self) -> None:
        if self._coroutine is not None:
            self._coroutine.close()


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
    def get_resource(self, name: str, type: ResourceType, metric_group: MetricGroup | None = None) -> Resource:
        """The resource ``name`` of kind ``type``, created once per operator.

        ``metric_group`` (default: this action's ``action_metric_group``) is
        bound to the resource (``Resource.set_metric_group``), as in Flink
        Agents 0.3.1.

        Raises:
            KeyError: No such resource in the agent's plan.
        """

    @property
    @abstractmethod
    def config(self) -> ReadableConfiguration:
        """The job's agent configuration, read-only: typed reads
        (``ctx.config.get(AgentExecutionOptions.MAX_RETRIES)``,
        ``get_int(key)``), as Flink Agents 0.3.1's ``ctx.config``, and plain
        mapping reads (``ctx.config.get(key, default)``, ``ctx.config[key]``)."""

    @property
    @abstractmethod
    def action_config(self) -> Dict[str, Any]:
        """The configuration given with ``add_action(..., **config)``."""

    @property
    def long_term_memory(self) -> "BaseLongTermMemory":
        """The long-term memory of the current key
        (``flink_agents.api.memory.long_term_memory``; Flink Agents 0.3.1's
        property): memory sets whose items outlive runs, restarts and
        failovers, searched by meaning; calls are journaled.

        Raises:
            RuntimeError: The job configures no long-term memory (set
                ``long-term-memory.vector-store`` to a vector store's name).
            NotImplementedError: This context has no long-term memory.
        """
        raise NotImplementedError(f"{type(self).__name__} has no long-term memory")

    @property
    def agent_metric_group(self) -> MetricGroup:
        """The agent's metric group, shared by every action of the operator
        (``flink_agents.api.metric_group``; Flink Agents 0.3.1's property).
        Values reach Flink's metric group of the operator on the Flink
        runner, and the local runner's ``execute()`` result locally.

        Raises:
            NotImplementedError: This context reports no metrics.
        """
        raise NotImplementedError(f"{type(self).__name__} reports no metrics")

    @property
    def action_metric_group(self) -> MetricGroup:
        """This action's metric group: ``agent_metric_group``'s key-value
        sub-group ``action`` = the action's name (metrics named
        ``action.<name>.<metric>``, as in Flink Agents 0.3.1).

        Raises:
            NotImplementedError: This context reports no metrics.
        """
        raise NotImplementedError(f"{type(self).__name__} reports no metrics")

    def close(self) -> None:
        """Release what this context holds (0.3.1 API). The runtime ends a
        context when its action returns; calling this earlier is allowed and
        has no further effect here."""

    def get_action_config_value(self, key: str, default: Any = None) -> Any:
        """One value of ``action_config``."""
        return self.action_config.get(key, default)

    @abstractmethod
    def durable_execute(
        self, func: Callable[..., Any], *args: Any, reconciler: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any:
        """Call ``func(*args, **kwargs)`` and return its result.

        The result (or exception) is journaled by the durable runtime so that
        a replay after a failover returns it without calling ``func`` again.

        ``reconciler`` (as in Flink Agents 0.3.1): an optional zero-argument
        callable, keyword-only and never passed to ``func``, asked only on
        recovery: when a failover cut the call off after it began and
        before its outcome was journaled, the replay calls ``reconciler()``
        instead of ``func``. What it returns is journaled and returned as
        the call's result; what it raises is journaled and raised as the
        call's failure. Without one, such a call runs again.

        Raises:
            TypeError: ``reconciler`` is not a zero-argument callable.
        """

    @abstractmethod
    def durable_execute_async(
        self, func: Callable[..., Any], *args: Any, reconciler: Callable[[], Any] | None = None, **kwargs: Any
    ) -> AsyncExecutionResult:
        """``durable_execute`` for async actions: ``func`` runs on a worker thread
        (or is awaited if it is a coroutine function) so other keys run meanwhile.

        Use it as Flink Agents 0.3.1 code does:
        ``result = await ctx.durable_execute_async(func, *args)``. The call is
        made (or its journaled result returned, on a replay) when the
        returned ``AsyncExecutionResult`` is awaited. ``reconciler`` as for
        ``durable_execute`` (it may also be a coroutine function).

        Raises:
            TypeError: ``reconciler`` is not a zero-argument callable.
        """

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
