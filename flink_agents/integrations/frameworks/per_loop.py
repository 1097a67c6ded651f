"""One framework agent (and its SDK client) per event loop.

A framework agent holds an async SDK client (``AsyncOpenAI``,
``AsyncAnthropic``, an ``httpx.AsyncClient``), whose pooled connections are
bound to the event loop that opened them. On Flink, every operator subtask
runs its own loop (``runtime.scheduling.key_runner``) and in thread mode
several subtasks share one Python interpreter: an agent built once at
module level and used by two subtasks fails with "bound to a different
event loop". Build it per loop instead::

    REVIEWER = PerLoop(lambda: Agent(OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=URL))))

    async def review(event, ctx):
        result = await run_durably(ctx, await REVIEWER.get(), event.input)

The factory runs on the loop that will use the agent, once per loop; the
agent lives as long as its loop (the local runner's ``asyncio.run``, a Flink
subtask). ``close`` (optional) is awaited on that loop when it shuts down.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Generic, Optional, TypeVar

from flink_agents.integrations.chat_models._per_loop import PerLoopClients

__all__ = ["PerLoop"]

T = TypeVar("T")


async def _keep_open(_: Any) -> None:
    """Nothing to close: the loop's shutdown drops the object with it."""


class PerLoop(Generic[T]):
    """``factory()``'s result, one per running event loop.

    Args:
        factory: Builds the object (an agent, a graph, a client); called on
            the loop that will use it.
        close: Awaited with the object on its loop when that loop shuts
            down (``asyncio.run`` and the Flink subtask's loop call
            ``shutdown_asyncgens``); default: nothing.
    """

    def __init__(self, factory: Callable[[], T], close: Optional[Callable[[T], Awaitable[None]]] = None) -> None:
        self._objects: PerLoopClients[T] = PerLoopClients(factory, close or _keep_open)

    async def get(self) -> T:
        """The running loop's object, built on first use.

        Raises:
            RuntimeError: Called without a running event loop.
        """
        return await self._objects.get()

    def __len__(self) -> int:
        """How many loops' objects are alive."""
        return len(self._objects)
